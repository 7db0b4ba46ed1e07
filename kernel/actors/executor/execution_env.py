"""The Python environment a python model's executor processes run in: Triton's
``EXECUTION_ENV_PATH``.

A python model's config may say ``parameters { key: "EXECUTION_ENV_PATH" value {
string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }``: a packed environment (a conda-pack
tarball, ``.tar.gz``/``.tgz``/``.tar``) or a folder holding one (a venv, a conda
environment). ``$$TRITON_MODEL_DIRECTORY`` becomes the model's folder, as in Triton; a
relative path is relative to it. A tarball is unpacked once into a cache folder
(``$XDG_CACHE_HOME/inferd/execution-envs/<digest of its path, size and mtime>``; its
``bin/conda-unpack`` is run when it has one) and reused by later loads.

The model's processes then run that environment's interpreter. Its packages come first; the
server's own site-packages are appended after them (``site.addsitedir``, so the server's
editable install resolves too), which is where the executor finds inferd and its
dependencies. Those hold compiled extensions, so the environment must run the server's
Python version (major.minor): a load with another one fails with that reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.protocols.errors import InvalidArgument

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar")
VERSION_CHECK_TIMEOUT_SECS = 30.0
# Run by the environment's interpreter: the server's site folders after its own, then the
# executor. argv[1] is the folders as JSON; the executor's own arguments follow.
# The environment's Python may predate -P, so the bootstrap drops the working directory that
# ``-c`` puts first on sys.path itself (see ExecutorProcesses._start for why).
BOOTSTRAP = (
    "import json, runpy, site, sys; "
    "sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]; "
    "[site.addsitedir(folder) for folder in json.loads(sys.argv.pop(1))]; "
    "runpy.run_module('inferd.kernel.actors.executor.main', run_name='__main__', alter_sys=True)"
)


def requested(config: ModelConfig, model_dir: Path) -> Path | None:
    """The environment ``config`` asks for, as a path, or ``None``."""
    parameter = config.parameters.get(PARAMETER)
    if parameter is None or not parameter.string_value.strip():
        return None
    text = parameter.string_value.strip().replace(MODEL_DIRECTORY, str(model_dir))
    path = Path(text)
    return path if path.is_absolute() else model_dir / path


def interpreter(environment: Path, cache: Path | None = None) -> Path:
    """The Python interpreter of ``environment`` (unpacked first if it is a tarball),
    checked to run this server's Python version; ``InvalidArgument`` saying what is wrong."""
    folder = _unpacked(environment, cache or default_cache()) if _is_tarball(environment) \
        else environment
    if not folder.is_dir():
        raise InvalidArgument(f"{PARAMETER} {environment} is neither a folder nor a tarball "
                              f"({', '.join(TARBALL_SUFFIXES)})")
    python = next((folder / "bin" / name for name in ("python3", "python")
                   if (folder / "bin" / name).exists()), None)
    if python is None:
        raise InvalidArgument(f"{PARAMETER} {environment} holds no bin/python")
    try:
        shown = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:2])"],
                               capture_output=True, text=True, check=True,
                               timeout=VERSION_CHECK_TIMEOUT_SECS).stdout.split()
    except (OSError, subprocess.SubprocessError) as error:
        raise InvalidArgument(f"{PARAMETER} {environment}: its python does not run: {error}"
                              ) from None
    wanted = [str(sys.version_info.major), str(sys.version_info.minor)]
    if shown != wanted:
        raise InvalidArgument(
            f"{PARAMETER} {environment} runs Python {'.'.join(shown)}; this server runs "
            f"{'.'.join(wanted)}, whose packages its executor processes need")
    return python


def command(python: Path) -> list[str]:
    """The start of an executor's command line with ``python``: the bootstrap that puts
    the server's site folders after the environment's own."""
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    return [str(python), "-c", BOOTSTRAP, json.dumps([f for f in folders if os.path.isdir(f)])]


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inferd" / "execution-envs"


def _is_tarball(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TARBALL_SUFFIXES)


def _unpacked(tarball: Path, cache: Path) -> Path:
    info = tarball.stat()
    digest = hashlib.sha256(f"{tarball.resolve()}\0{info.st_size}\0{info.st_mtime_ns}".encode())
    folder = cache / digest.hexdigest()[:16]
    if (folder / ".unpacked").exists():
        return folder
    staging = cache / f".{folder.name}.{os.getpid()}"
    staging.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(tarball) as archive:
            archive.extractall(staging, filter="data")  # no links out, no devices, no setuid
    except (OSError, tarfile.TarError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise InvalidArgument(f"{PARAMETER} {tarball} cannot be unpacked: {error}") from None
    unpack = staging / "bin" / "conda-unpack"
    if unpack.exists():
        subprocess.run([str(unpack)], cwd=staging, check=False, capture_output=True,
                       timeout=VERSION_CHECK_TIMEOUT_SECS * 10)
    (staging / ".unpacked").touch()
    try:
        staging.rename(folder)
    except OSError:  # another load unpacked it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return folder
