"""``inferd.kernel.sdk.memory_meter``: the process tree's resident memory counts the
children (the executors), a model's files are summed, and a GPU nobody sees reads as None."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from inferd.kernel.sdk.memory_meter import (
    MemoryMeter,
    folder_bytes,
    process_tree,
    resident_bytes,
)
from inferd.kernel.sdk.process_metrics import process_usage


def test_the_tree_holds_the_children_too() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        assert child.pid in process_tree(os.getpid())
        own = process_usage(os.getpid())
        assert own is not None
        total = resident_bytes(os.getpid())
        assert total is not None and total > own[1]
    finally:
        child.communicate(b"")


def test_folder_bytes_and_readings(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(b"x" * 1000)
    (tmp_path / "config.pbtxt").write_text("name: 'm'\n")
    assert folder_bytes(str(tmp_path)) == 1000 + len("name: 'm'\n")
    meter = MemoryMeter()
    assert (meter.reading("cpu") or 0) > 0 and (meter.total("cpu") or 0) > 0
    assert meter.reading("gpu99") is None and meter.total("gpu99") is None
