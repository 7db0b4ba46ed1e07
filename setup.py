"""inferd's build: everything is in pyproject.toml but the compiled request path.

The modules in ``COMPILED`` are compiled with mypyc into one group (their extension modules
next to the sources, the group's shared library as ``inferd.protocols.compiled__mypyc``), and
``protocols/compiled.json`` records whether the build worked and, when it did, each module's
source hash and each extension file's hash; ``inferd.protocols.build`` reads it at import so
that only the files this build made, beside the sources it made them from, ever run compiled.
The manifest says "not compiled" from the moment the C build starts and is written again only
once every extension is built and hashed where it will be imported from, so a build killed
half way (Ctrl-C, the OOM killer) leaves the sources running, never an older extension.
Without mypy, without a C compiler, when mypyc refuses a module or with ``INFERD_COMPILE=0``
the install still succeeds and everything runs as pure Python.
``python setup.py build_ext --inplace`` (the Makefile's) builds in the tree, skips the work
when the manifest matches the sources and the extensions, and removes extension modules no
longer listed.

For tests only: ``INFERD_COMPILE_ONLY``, a comma-separated subset of ``COMPILED`` (paths as
listed), compiles just those, so a test can run a real build in seconds in a copy of the tree
(tests/test_setup_build.py); in place it removes the other modules' extensions.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import io
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
# What to do about a build that failed, in the reason the server's start-up line shows.
REBUILD_HINT = "make setup, or python setup.py build_ext --inplace, shows the build's output"
# What the manifest says while a build runs, and so after one that was killed.
UNFINISHED = "a build started and did not finish; rebuild with make setup"

# The modules one inference request crosses, each kept only where bench/performance/compiled.py
# shows it faster compiled. Left interpreted: the message kinds (the wire codec checks decoded
# values against their type hints, which compiled classes no longer carry in full);
# kernel/sdk/_batch_plan.py (backends subclass its generic dataclass, which mypyc
# cannot compile into anything importable and subscriptable); kernel/actors/scheduler/progress.py
# (tests subclass it); kernel/actors/executor/instance_slot.py (compiled, an awaited generic
# ``InstanceSlot.run`` failed a batch with "None object expected", and ``named_call`` copies a
# Python function's code object). The classes backends subclass allow interpreted subclasses.
COMPILED = [
    "protocols/wire/codec.py",
    "protocols/wire/kinds.py",
    "protocols/wire/flat.py",
    "protocols/tensors.py",
    "protocols/kserve_http/infer.py",
    "protocols/kserve_http/inputs.py",
    "protocols/kserve_http/response.py",
    "protocols/kserve_http/scan.py",
    "protocols/json_bodies.py",
    "protocols/kserve_grpc/infer.py",
    "protocols/kserve_grpc/inputs.py",
    "protocols/kserve_grpc/framing.py",
    "protocols/http2/huffman.py",
    "protocols/http2/hpack.py",
    "protocols/http2/connection.py",
    "protocols/http2/control.py",
    "protocols/http2/streams.py",
    "protocols/http2/frames.py",
    "protocols/http2/guard.py",
    "kernel/actors/scheduler/batcher.py",
    "kernel/actors/scheduler/queue_policy.py",
    "kernel/actors/scheduler/requests.py",
    "kernel/actors/scheduler/response_order.py",
    "kernel/actors/scheduler/version_table.py",
    "kernel/actors/scheduler/version.py",
    "kernel/actors/scheduler/dispatch.py",
    "kernel/actors/scheduler/request_validation.py",
    "kernel/observability/statistics.py",
    "kernel/runtime/router.py",
    "kernel/runtime/process_link.py",
    "kernel/dataplane/data_plane.py",
    "kernel/actors/scheduler/actor.py",
    "kernel/actors/scheduler/remote_streams.py",
    "kernel/sdk/batching.py",
]
if os.environ.get("INFERD_COMPILE_ONLY"):
    _only = os.environ["INFERD_COMPILE_ONLY"].split(",")
    if not set(_only) <= set(COMPILED):
        sys.exit(f"inferd: INFERD_COMPILE_ONLY lists modules not in COMPILED: {_only}")
    COMPILED = [path for path in COMPILED if path in _only]


def _module(path: str) -> str:
    return "inferd." + path.removesuffix(".py").replace("/", ".")


def _file_hash(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _hashes() -> dict[str, str]:
    return {_module(path): _file_hash(ROOT / path) for path in COMPILED}


def _write_manifest(
    target: Path, compiled: bool, reason: str = "", *, modules: dict[str, str] | None = None,
    extensions: dict[str, str] | None = None, source_requested: bool = False,
) -> None:
    """Replaced whole (a rename), so a reader never meets half a manifest."""
    manifest = {"compiled": compiled, "reason": reason, "source_requested": source_requested,
                "modules": modules or {}, "extensions": extensions or {}}
    written = target.with_name(target.name + ".partial")
    written.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(written, target)


def _in_tree(extension: str) -> Path:
    """Where an in-place build puts the extension module named ``extension``."""
    package, *rest = extension.removeprefix("inferd.").split(".")
    return PACKAGE_DIRS[package].joinpath(*rest).with_name(
        rest[-1] + importlib.machinery.EXTENSION_SUFFIXES[0])


def _up_to_date() -> bool:
    try:
        manifest = json.loads(MANIFEST.read_text())
        extensions = manifest["extensions"]
        return bool(
            manifest["compiled"] is True
            and manifest["modules"] == _hashes()
            and set(extensions) == {*map(_module, COMPILED), GROUP + "__mypyc"}
            and all(_file_hash(_in_tree(name)) == digest for name, digest in extensions.items())
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


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

# The sources as mypyc read them (hashed before it starts): what the extensions are built
# from, whatever is edited while the build runs.
_compiled_sources: dict[str, str] = {}


def _extensions() -> list[object]:
    if not _BUILDING.intersection(sys.argv[1:]):
        return []
    if os.environ.get("INFERD_COMPILE") == "0":
        _write_manifest(MANIFEST, False, "built with INFERD_COMPILE=0", source_requested=True)
        return []
    inplace = "--inplace" in sys.argv
    if inplace and _up_to_date():
        print("inferd: compiled request path up to date")
        return []
    _compiled_sources.update(_hashes())
    # mypy prints its errors and then exits: caught here so the first becomes the reason.
    printed = io.StringIO()
    try:
        from mypyc.build import mypycify

        layout = _layout()
        os.environ["MYPYPATH"] = str(layout)
        with contextlib.redirect_stdout(printed):
            extensions = mypycify(
                ["--config-file", str(ROOT / "pyproject.toml"), "--explicit-package-bases",
                 *(str(layout / "inferd" / path) for path in COMPILED)],
                group_name=GROUP,
                opt_level=os.environ.get("INFERD_COMPILE_OPT", "3"),
            )
    except BaseException as error:  # mypy missing, or mypyc refusing (it exits on errors)
        if isinstance(error, KeyboardInterrupt):
            raise
        sys.stdout.write(printed.getvalue())
        reason = f"mypyc build failed: {_first_error(printed.getvalue(), error)}; {REBUILD_HINT}"
        traceback.print_exc()
        print(f"inferd: {reason}; the request path runs as pure Python", file=sys.stderr)
        _write_manifest(MANIFEST, False, reason)
        return []
    sys.stdout.write(printed.getvalue())
    if inplace:
        _remove_unlisted_extensions()
    return extensions


def _first_error(printed: str, error: BaseException) -> str:
    """What went wrong, in one line: mypy's first error (its path made relative to the
    layout's package), else the exception."""
    for line in printed.splitlines():
        if ": error:" in line:
            return line.partition(f"{os.sep}inferd{os.sep}")[2][:200] or line[:200]
    shown = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {shown}".strip().rstrip(":")


class LenientBuildExt(build_ext):
    """A C compiler missing or failing leaves the pure-Python install working, and the
    manifest beside the extensions (in the tree in place, else in build_lib, which the wheel
    takes) describes only a build that finished."""

    def run(self) -> None:
        if not self.extensions:
            super().run()
            return
        target = (MANIFEST if self.inplace
                  else Path(self.build_lib) / "inferd" / "protocols" / MANIFEST.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Before any extension file changes: a build killed from here on leaves the sources.
        _write_manifest(target, False, UNFINISHED)
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
            built = {extension.name: Path(self.get_ext_fullpath(extension.name))
                     for extension in self.extensions}
            missing = sorted(name for name, path in built.items() if not path.is_file())
            if missing:
                raise FileNotFoundError(f"no extension file for {', '.join(missing)}")
        except Exception as error:
            print(f"inferd: C build failed: {error}", file=sys.stderr)
            # Short, as the server's start-up line shows it: the command is printed above.
            reason = f"the C build failed ({type(error).__name__}); {REBUILD_HINT}"
            print("inferd: the request path runs as pure Python", file=sys.stderr)
            _write_manifest(target, False, reason)
            return
        _write_manifest(target, True, modules=_compiled_sources,
                        extensions={name: _file_hash(path) for name, path in built.items()})


setup(ext_modules=_extensions(), cmdclass={"build_ext": LenientBuildExt})
