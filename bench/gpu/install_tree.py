"""Install inferd from this working tree into a folder on ``sys.path``, as pure Python, with
nothing but the standard library: what ``bench/gpu_check.sh`` does on the GPU machine, where
no package index is reachable and a build backend may be missing or too old.

``python -m bench.gpu.install_tree TARGET`` copies each import package ``pyproject.toml`` maps
(``[tool.setuptools] package-dir``: ``inferd.kernel`` = ``kernel`` and so on) to
``TARGET/inferd/...`` with its data files, and writes ``inferd-<version>.dist-info`` with the
metadata and entry points (the ``inferd`` plugin group, the ``inferd`` command), which is how
inferd finds its own plugins. No compiled module, no ``inferd`` script: run
``python -m inferd.kernel.cli.main`` (``bench/common/serving.py`` does when there is no script).
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.c")


def install(target: Path, root: Path = ROOT) -> Path:
    """Install into ``target``; returns the dist-info folder written."""
    document = tomllib.loads((root / "pyproject.toml").read_text())
    project = document["project"]
    name, version = project["name"], project["version"]
    for package, folder in document["tool"]["setuptools"]["package-dir"].items():
        destination = target.joinpath(*package.split("."))
        if destination.exists():
            shutil.rmtree(destination)
        shutil.copytree(root / folder, destination, ignore=IGNORED)
    info = target / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        f"Summary: {project.get('description', '')}\n")
    (info / "INSTALLER").write_text("bench/gpu/install_tree.py\n")
    sections = [("console_scripts", project.get("scripts", {}))]
    sections += list(project.get("entry-points", {}).items())
    lines = []
    for group, entries in sections:
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in entries.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return info


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.gpu.install_tree TARGET")
    print(install(Path(sys.argv[1])))
