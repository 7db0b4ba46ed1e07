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
