"""The distribution ships every package: a folder with an ``__init__.py`` under kernel/,
plugins/ or protocols/ that ``[tool.setuptools] packages`` does not list would be missing from
a wheel (the container images install one) while an editable install still finds it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {f"inferd.{top}": top for top in ("kernel", "plugins", "protocols")}
    assert setuptools["package-dir"] == folders
    found = {
        ".".join(("inferd", *init.parent.relative_to(ROOT).parts))
        for top in folders.values() for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == set(setuptools["packages"])


def test_the_gpu_machines_pure_python_install_has_the_plugins_and_the_data(
        tmp_path: Path) -> None:
    # bench/gpu/install_tree.py is how bench/gpu_check.sh installs inferd where no build backend
    # or index may be: the copy must import from where it was put, and find inferd's plugins
    # through its entry points as an installed wheel would.
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "bench.gpu.install_tree", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)
    assert (tmp_path / "inferd" / "protocols" / "kserve_http" / "openapi.json").is_file()
    assert not list(tmp_path.rglob("__pycache__"))
    probe = (
        "import importlib.metadata as m, inferd.kernel.cli.main as cli;"
        "print(cli.__file__);"
        "print(sorted(e.name for e in m.entry_points(group='inferd')));"
        "print(m.version('inferd'))"
    )
    shown = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                           text=True, timeout=60, cwd=tmp_path,
                           env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    where, plugins, version = shown.stdout.splitlines()
    assert where.startswith(str(tmp_path))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert plugins == str(sorted(project["entry-points"]["inferd"]))
    assert version == project["version"]
