"""Which build of the request path runs: the modules ``setup.py`` compiled with mypyc, or
their sources.

``setup.py`` compiles the modules of its ``COMPILED`` list into one mypyc group (extension
modules next to the ``.py`` files, and the group's shared library
``inferd/protocols/compiled__mypyc``) and, once every extension is built, writes
``compiled.json`` beside this file: every listed module with the SHA-256 of the source it was
built from, and every extension file (the group's library included) with its own SHA-256; a
build that failed, or one still running or killed half way, leaves ``compiled`` false and
why. ``install`` (run once, by this package's and the kernel's ``__init__``, before any listed
module is imported) decides: the compiled set runs only when every listed source still
matches its hash, every extension that import would load is the file the build made, and
``INFERD_COMPILE`` is not ``0``; otherwise a meta-path finder makes every kernel and protocols
module load from its source (and any module the manifest does not list always does). All or
nothing, because compiled modules of one group call each other natively and cannot run beside
an interpreted copy of one of them. Owns that decision, ``describe`` and ``fell_back``; never
builds anything.
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
GROUP_LIBRARY = "inferd.protocols.compiled__mypyc"


@dataclass(frozen=True, slots=True)
class Build:
    """What runs: the compiled modules' names (empty when everything runs as source) and,
    when it is source, why."""

    compiled: tuple[str, ...]
    reason: str = ""
    # The sources run because INFERD_COMPILE=0 asked for them, at the build or now.
    requested: bool = False


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


def extension_of(module: str) -> Path | None:
    """The extension file an import of ``module`` would load (the first suffix found, as
    the path finder looks), if any."""
    source = source_of(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        extension = source.with_name(source.stem + suffix)
        if extension.is_file():
            return extension
    return None


def _decide(manifest: dict[str, object] | None) -> Build:
    if os.environ.get(SWITCH) == "0":
        return Build((), f"{SWITCH}=0", requested=True)
    if manifest is None:
        return Build((), "not built: no compiled.json")
    if not manifest.get("compiled"):
        return Build((), str(manifest.get("reason") or "not built"),
                     requested=manifest.get("source_requested") is True)
    modules, extensions = manifest.get("modules"), manifest.get("extensions")
    if not isinstance(modules, dict) or not isinstance(extensions, dict):
        return Build((), "compiled.json has no extension hashes; rebuild with make setup")
    for module, digest in modules.items():
        source = source_of(module)
        if not source.is_file() or source_hash(source) != digest:
            return Build((), f"{module} changed since it was compiled; rebuild with make setup")
    for module in (GROUP_LIBRARY, *modules):
        extension = extension_of(module)
        if extension is None:
            return Build((), f"{module} has no compiled extension")
        if source_hash(extension) != extensions.get(module):
            return Build((), f"{module}'s extension is not the one its build made; "
                         "rebuild with make setup")
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


def fell_back() -> bool:
    """Whether the sources run though nobody asked for them (a build that failed, was
    interrupted or is older than the sources): a slower server than the one installed, which
    the start-up line says as a warning."""
    build = install()
    return not build.compiled and not build.requested
