"""Override folders: every path checked before the first write, the folder private, and
nothing left behind by a refused or failed write."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

import pytest

from inferd.kernel.actors.control.file_overrides import (
    checked_paths,
    remove_override_folder,
    write_override_files,
)
from inferd.protocols.errors import InvalidArgument


def test_files_are_written_into_a_private_model_folder(tmp_path: Path) -> None:
    folder = Path(write_override_files("m", {"1/model.onnx": b"abc", "1/sub/x": b"y"}, tmp_path))
    assert folder.name == "m" and folder.parent.parent == tmp_path.resolve()
    assert (folder / "1" / "model.onnx").read_bytes() == b"abc"
    assert (folder / "1" / "sub" / "x").read_bytes() == b"y"
    assert folder.parent.stat().st_mode & 0o777 == 0o700
    remove_override_folder(str(folder))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "path",
    ["", ".", "1/.", "1/..", "../x", "1//x", "/etc/x", "1\\x", "1/a\x00b", "1/a\nb",
     "1/" + "n" * 256, "1/" + "n/" * 1100 + "x"],
)
def test_paths_that_could_leave_or_cannot_be_written_are_refused_before_writing(
    tmp_path: Path, path: str
) -> None:
    files = {"1/first": b"written first if anything were", path: b"x"}
    with pytest.raises(InvalidArgument) as error:
        write_override_files("m", files, tmp_path)
    assert "file override path" in error.value.message
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_also_a_folder_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="both a file and the folder"):
        checked_paths("m", {"1/a": b"", "1/a/b": b""})


def test_a_write_that_fails_removes_the_folder(tmp_path: Path) -> None:
    # A file-size limit makes the second write fail (EFBIG), whoever runs the test.
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(InvalidArgument, match="could not be written"):
            write_override_files("m", {"1/small": b"x", "1/large": b"x" * 8192}, tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert list(tmp_path.iterdir()) == []
