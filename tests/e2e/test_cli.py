"""The ``inferd`` client subcommands against a real server: the index as a table, load and
unload, and a clear error with a non-zero exit code."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

INFERD = [sys.executable, "-m", "inferd.kernel.cli"]


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERD, *arguments], capture_output=True, text=True, timeout=60)


def test_models_load_and_unload(inferd: Any) -> None:
    server = inferd.start(inferd.repository("simple", "mlp"), "--model-control-mode", "explicit")
    loaded = run("load", "simple", "--url", server.url)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "loaded simple"
    table = run("models", "--url", server.url)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "VERSION", "STATE", "REASON"]
    assert lines[1].split() == ["mlp", "-", "-"]
    assert lines[2].split() == ["simple", "1", "READY"]
    unloaded = run("unload", "simple", "--url", server.url)
    assert unloaded.returncode == 0 and unloaded.stdout.strip() == "unloaded simple"
    assert run("models", "--url", server.url).stdout.splitlines()[2].split() == [
        "simple", "1", "UNAVAILABLE", "unloaded"]


def test_a_failed_load_prints_the_reason_and_exits_1(inferd: Any) -> None:
    server = inferd.start(inferd.repository(), "--model-control-mode", "explicit")
    failed = run("load", "nope", "--url", server.url)
    assert failed.returncode == 1
    assert failed.stderr.startswith(
        "error: failed to load 'nope': model 'nope' is not in the model repository")
