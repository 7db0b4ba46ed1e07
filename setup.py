"""inferd's build: everything is in pyproject.toml but the compiled request path.

The modules in ``COMPILED`` are compiled with mypyc into one group (their extension modules
next to the sources, the group's shared library as ``inferd.protocols.compiled__mypyc``), and
``protocols/compiled.json`` records each one's source hash and whether the build worked;
``inferd.protocols.build`` reads it at import so a source edited since the build runs as
source. Without mypy, without a C compiler, when mypyc refuses a module or with
``INFERD_COMPILE=0`` the install still succeeds and everything runs as pure Python.
``python setup.py build_ext --inplace`` (the Makefile's) builds in the tree, skips the work
when the manifest matches the sources, and removes extension modules no longer listed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGE_DIRS = {"kernel": ROOT / "kernel", "protocols": ROOT / "protocols"}
MANIFEST = ROOT / "protocols" / "compiled.json"
GROUP = "inferd.protocols.compiled"

# The modules one inference request crosses, each kept only where bench/bench_compiled.py
# shows it faster compiled. Left interpreted: the message kinds (the wire codec checks decoded
# values against their type hints, which compiled classes no longer carry in full);
# kernel/actors/executor/batched_instance.py (backends subclass it, and its generic slotted
# dataclasses fail to import compiled); kernel/actors/scheduler/progress.py (tests subclass it);
# kernel/dataplane/data_plane.py and kernel/runtime/router.py (their unit tests drive them with
# stand-ins a compiled signature refuses, and no step of the bench shows them yet).
COMPILED = [
    "protocols/wire.py",
    "protocols/wire_kinds.py",
    "protocols/wire_flat.py",
    "protocols/tensors.py",
    "protocols/kserve_http.py",
    "protocols/json_bodies.py",
    "protocols/kserve_grpc.py",
    "protocols/kserve_grpc_inputs.py",
    "protocols/kserve_grpc_wire.py",
    "protocols/huffman.py",
    "protocols/hpack.py",
    "protocols/http2.py",
    "protocols/http2_guard.py",
    "kernel/actors/scheduler/batcher.py",
    "kernel/actors/scheduler/queue_policy.py",
    "kernel/actors/scheduler/requests.py",
    "kernel/actors/scheduler/response_order.py",
    "kernel/actors/scheduler/routing.py",
    "kernel/actors/scheduler/version.py",
    "kernel/actors/scheduler/dispatch.py",
    "kernel/actors/scheduler/request_validation.py",
    "kernel/observability/statistics.py",
]


def _module(path: str) -> str:
    return "inferd." + path.removesuffix(".py").replace("/", ".")


def _hashes() -> dict[str, str]:
    return {
        _module(path): hashlib.sha256((ROOT / path).read_bytes()).hexdigest()
        for path in COMPILED
    }


def _write_manifest(compiled: bool, reason: str = "") -> None:
    manifest = {"compiled": compiled, "reason": reason, "modules": _hashes()}
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


def _up_to_date() -> bool:
    try:
        manifest = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return False
    import importlib.machinery

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return (
        manifest.get("compiled") is True
        and manifest.get("modules") == _hashes()
        and all((ROOT / path.removesuffix(".py")).with_suffix(suffix).is_file()
                for path in COMPILED)
    )


def _remove_unlisted_extensions() -> None:
    """An in-place extension module no longer listed would shadow its edited source."""
    listed = {(ROOT / path).with_suffix("") for path in COMPILED}
    for folder in PACKAGE_DIRS.values():
        for extension in folder.rglob("*.so"):
            stem = extension.with_name(extension.name.split(".", 1)[0])
            if stem not in listed and not extension.name.startswith("compiled__mypyc"):
                extension.unlink()


def _layout() -> Path:
    """The sources under their import names (inferd/kernel, inferd/protocols), which mypy
    cannot read from pyproject's package-dir mapping."""
    layout = ROOT / "build" / "mypyc-layout"
    (layout / "inferd").mkdir(parents=True, exist_ok=True)
    for name, folder in PACKAGE_DIRS.items():
        link = layout / "inferd" / name
        if not link.is_symlink():
            link.symlink_to(folder, target_is_directory=True)
    return layout


# Only these build anything: pip's metadata steps (egg_info, dist_info) run this file too.
_BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def _extensions() -> list[object]:
    if not _BUILDING.intersection(sys.argv[1:]):
        return []
    if os.environ.get("INFERD_COMPILE") == "0":
        _write_manifest(False, "built with INFERD_COMPILE=0")
        return []
    inplace = "--inplace" in sys.argv
    if inplace and _up_to_date():
        print("inferd: compiled request path up to date")
        return []
    try:
        from mypyc.build import mypycify

        layout = _layout()
        os.environ["MYPYPATH"] = str(layout)
        extensions = mypycify(
            ["--config-file", str(ROOT / "pyproject.toml"), "--explicit-package-bases",
             *(str(layout / "inferd" / path) for path in COMPILED)],
            group_name=GROUP,
            opt_level=os.environ.get("INFERD_COMPILE_OPT", "3"),
        )
    except BaseException as error:  # mypy missing, or mypyc refusing (it exits on errors)
        if isinstance(error, KeyboardInterrupt):
            raise
        shown = str(error).splitlines()[0][:200] if str(error) else ""
        reason = f"mypyc build failed: {type(error).__name__}: {shown}".strip()
        traceback.print_exc()
        print(f"inferd: {reason}; the request path runs as pure Python", file=sys.stderr)
        _write_manifest(False, reason)
        return []
    _write_manifest(True)
    if inplace:
        _remove_unlisted_extensions()
    return extensions


class LenientBuildExt(build_ext):
    """A C compiler missing or failing leaves the pure-Python install working."""

    def run(self) -> None:
        # build_lib outlives a build: extension modules of a longer list would reach the wheel.
        listed = {extension.name for extension in self.extensions}
        for package in ("kernel", "protocols"):
            for stale in (Path(self.build_lib) / "inferd" / package).rglob("*.so"):
                name = ".".join(stale.relative_to(self.build_lib).with_name(
                    stale.name.split(".", 1)[0]).parts)
                if name not in listed:
                    stale.unlink()
        try:
            super().run()
        except Exception as error:
            print(f"inferd: C build failed: {error}", file=sys.stderr)
            # Short, as the server's start-up line shows it: the command is printed above.
            reason = f"the C build failed ({type(error).__name__}; see the install's output)"
            print("inferd: the request path runs as pure Python", file=sys.stderr)
            _write_manifest(False, reason)
            if not self.inplace and not getattr(self, "editable_mode", False):
                built = Path(self.build_lib) / "inferd" / "protocols" / MANIFEST.name
                if built.parent.is_dir():
                    built.write_text(MANIFEST.read_text())


setup(ext_modules=_extensions(), cmdclass={"build_ext": LenientBuildExt})
