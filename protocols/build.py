"""Which build of the request path runs: the modules ``setup.py`` compiled with mypyc, or
their sources.

``setup.py`` compiles the modules of its ``COMPILED`` list into one mypyc group (extension
modules next to the ``.py`` files, and the group's shared library
``inferd/protocols/compiled__mypyc``) and writes ``compiled.json`` beside this file: every
listed module with the SHA-256 of the source it was built from, and whether the build
succeeded (or why not). ``install`` (run once, by this package's and the kernel's
``__init__``, before any listed module is imported) decides: the compiled set runs only when
every listed source still matches its hash, every extension is present and
``INFERD_COMPILE`` is not ``0``; otherwise a meta-path finder makes every kernel and
protocols module load from its source (and any module the manifest does not list always
does). All or nothing, because compiled modules of one group
call each other natively and cannot run beside an interpreted copy of one of them. Owns that
decision and ``describe``; never builds anything.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

MANIFEST = Path(__file__).with_name("compiled.json")
SWITCH = "INFERD_COMPILE"


@dataclass(frozen=True, slots=True)
class Build:
    """What runs: the compiled modules' names (empty when everything runs as source) and,
    when it is source, why."""

    compiled: tuple[str, ...]
    reason: str = ""


_build: Build | None = None


def source_of(module: str) -> Path:
    """The ``.py`` file of a listed module, wherever the package is installed."""
    package, _, rest = module.removeprefix("inferd.").partition(".")
    if package == "protocols":
        root = Path(__file__).parent
    else:
        spec = importlib.util.find_spec(f"inferd.{package}")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"inferd.{package}")
        root = Path(list(spec.submodule_search_locations)[0])
    return root.joinpath(*rest.split(".")).with_suffix(".py")


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _has_extension(source: Path) -> bool:
    return any(
        source.with_name(source.stem + suffix).is_file()
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _decide(manifest: dict[str, object] | None) -> Build:
    if os.environ.get(SWITCH) == "0":
        return Build((), f"{SWITCH}=0")
    if manifest is None:
        return Build((), "not built: no compiled.json")
    modules = manifest.get("modules")
    if not isinstance(modules, dict) or not manifest.get("compiled"):
        return Build((), str(manifest.get("reason") or "not built"))
    protocols = Path(__file__).parent
    if not any(protocols.glob("compiled__mypyc.*")):
        return Build((), "the compiled group's library is missing")
    for module, digest in modules.items():
        source = source_of(module)
        if not source.is_file() or source_hash(source) != digest:
            return Build((), f"{module} changed since it was compiled; rebuild with make setup")
        if not _has_extension(source):
            return Build((), f"{module} has no compiled extension")
    return Build(tuple(modules))


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` files of inferd's kernel and protocols modules, but ``compiled``,
    ahead of any extension module beside them (one an earlier build left, which no manifest
    lists: its group's library no longer holds it)."""

    PACKAGES = ("inferd.kernel.", "inferd.protocols.")

    def __init__(self, compiled: Sequence[str] = ()) -> None:
        self.compiled = frozenset(compiled)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.PACKAGES) or fullname in self.compiled:
            return None
        leaf = fullname.rpartition(".")[2]
        for entry in path or ():
            source = os.path.join(entry, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
            package = os.path.join(entry, leaf)
            if os.path.isfile(os.path.join(package, "__init__.py")):
                return importlib.util.spec_from_file_location(
                    fullname, os.path.join(package, "__init__.py"),
                    submodule_search_locations=[package],
                )
        return None


def _read_manifest() -> dict[str, object] | None:
    try:
        manifest = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def install() -> Build:
    """Decide which build runs (once per process) and make the imports follow it."""
    global _build
    if _build is not None:
        return _build
    manifest = _read_manifest()
    build = _decide(manifest)
    sys.meta_path.insert(0, _SourceFinder(build.compiled))
    _build = build
    return build


def describe() -> str:
    """One line for the server's log: which build of the request path runs."""
    build = install()
    if build.compiled:
        return f"compiled with mypyc ({len(build.compiled)} modules)"
    return f"pure Python ({build.reason})"
