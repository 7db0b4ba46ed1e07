"""Run folders: a new private one per server, and those of dead servers removed."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from inferd.kernel.runtime.run_folder import (
    create_run_folder,
    hold_temporary_files,
    remove_stale_run_folders,
)


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_run_folder_is_private_and_named_by_its_pid(tmp_path: Path) -> None:
    folder = create_run_folder(tmp_path)
    assert folder.parent == tmp_path
    assert folder.name.startswith(f"inferd-{os.getpid()}-")
    assert folder.stat().st_mode & 0o777 == 0o700


def test_temporary_files_go_in_the_run_folder_for_this_process_and_its_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = create_run_folder()
    held = hold_temporary_files(folder)
    assert held == folder / "tmp" and held.stat().st_mode & 0o777 == 0o700
    assert tempfile.gettempdir() == str(held)
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(held)  # an executor started now writes there too
    assert os.listdir(tmp_path) == [folder.name]


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
