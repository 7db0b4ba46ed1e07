"""Run folders: a new private one per server, and those of dead servers removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from inferd.kernel.run_folder import create_run_folder, remove_stale_run_folders


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_run_folder_is_private_and_named_by_its_pid(tmp_path: Path) -> None:
    folder = create_run_folder(tmp_path)
    assert folder.parent == tmp_path
    assert folder.name.startswith(f"inferd-{os.getpid()}-")
    assert folder.stat().st_mode & 0o777 == 0o700


def test_only_folders_of_dead_processes_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / f"inferd-{dead_pid()}-abc123"
    (stale / "overrides").mkdir(parents=True)
    alive = tmp_path / f"inferd-{os.getpid()}-abc123"
    alive.mkdir()
    other = [tmp_path / "inferd-override-xyz", tmp_path / "inferd-123", tmp_path / "other"]
    for folder in other:
        folder.mkdir()
    linked = tmp_path / f"inferd-{dead_pid()}-link"
    linked.symlink_to(alive)
    assert remove_stale_run_folders(tmp_path) == [stale]
    assert not stale.exists()
    assert alive.exists() and linked.is_symlink() and all(folder.exists() for folder in other)
