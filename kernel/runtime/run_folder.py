"""The server's run folder: one private folder per server process for what it keeps on disk
while it runs, and the removal of the folders of servers that died without removing theirs.

The folder is ``$TMPDIR/inferd-<pid>-<random>/`` (``tempfile.gettempdir()``, mode 0700). It
holds the ZeroMQ IPC socket its executors connect to (``hub``), the private folders of
loads with file overrides (``overrides/``) and ``tmp/``, which ``hold_temporary_files`` makes
the ``$TMPDIR`` of the server and of every process it starts, so what frameworks and libraries
write there (onnxruntime, torch, the python backend's stubs) goes with the run folder rather
than being left in the user's ``$TMPDIR``. The server removes it at exit; a server killed
with SIGKILL cannot, so every start removes the run folders, owned by this user, whose pid no
longer names a live process. A folder whose pid is alive is left alone, even if that pid now
belongs to another program: removing too little is the safe mistake.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "inferd-"
HUB_SOCKET = "hub"
OVERRIDES = "overrides"
TEMPORARY = "tmp"
_RUN_FOLDER = re.compile(re.escape(PREFIX) + r"([0-9]+)-[A-Za-z0-9_]+")


def create_run_folder(parent: str | Path | None = None) -> Path:
    """A new run folder for this process, after removing those of dead servers."""
    parent = Path(parent or tempfile.gettempdir())
    removed = remove_stale_run_folders(parent)
    if removed:
        log.info("removed %d run folder(s) left by servers that died: %s", len(removed),
                 ", ".join(str(folder) for folder in removed))
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))


def hold_temporary_files(run_folder: Path) -> Path:
    """Make ``run_folder/tmp`` this process's temporary folder: ``$TMPDIR`` (read by native
    libraries, and inherited by the executors this process starts) and ``tempfile``'s own."""
    folder = run_folder / TEMPORARY
    folder.mkdir(mode=0o700)
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    return folder


def remove_stale_run_folders(parent: str | Path) -> list[Path]:
    """Remove, and return, the run folders under ``parent`` of processes that are gone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        found = _RUN_FOLDER.fullmatch(entry.name)
        if found is None or not _owned_folder(entry):
            continue
        if process_alive(int(found.group(1))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _owned_folder(entry: os.DirEntry[str]) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return entry.is_dir(follow_symlinks=False) and info.st_uid == os.getuid()


def process_alive(pid: int) -> bool:
    """Whether ``pid`` names a live process (of any user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, and belongs to someone else
    except OverflowError:
        return False
    return True
