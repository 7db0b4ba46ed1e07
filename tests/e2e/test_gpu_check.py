"""``bench/gpu_check.sh --cpu-only`` keeps working: the GPU check's script, run as it is on a
machine without a GPU, in the test environment (``$PYTHON``: this Python, nothing installed),
serves its models with a real ``inferd serve`` and ends with a PASS line for each check it
can make without a GPU and a SKIP line, never a PASS, for each check of the GPU itself (what
it checked instead is on that line); its log folder has the script's whole output, the
server's log and the summary. On the GPU machine the same script runs without ``--cpu-only``
(docs/gpus.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.kernel.sdk.devices import visible_gpus
from tests.services import import_or_missing

import_or_missing("torch", "make setup installs it unless WITH_TORCH=0")
pytestmark = pytest.mark.skipif(bool(visible_gpus()), reason="--cpu-only is for no GPU")

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {  # each check and its verdict without a GPU
    "ready": "PASS", "twins": "PASS", "placement": "PASS", "zero_copy": "SKIP",
    "gpu_metrics": "SKIP", "cuda_shm": "SKIP", "shm_in_place": "SKIP", "throughput": "PASS",
}


@pytest.mark.timeout(600)  # a server start and torch.export: minutes on a loaded machine
def test_the_cpu_only_run_passes_what_it_can_check_skips_the_gpu_and_writes_its_log(
        tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    completed = subprocess.run(
        [str(ROOT / "bench" / "gpu_check.sh"), "--cpu-only", str(logs),
         "--batches", "1,4", "--seconds", "0.5", "--concurrency", "2"],
        env={**os.environ, "PYTHON": sys.executable}, cwd=tmp_path, capture_output=True,
        text=True, timeout=540,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    summary = (logs / "summary.txt").read_text().splitlines()
    assert [line.split()[:2] for line in summary] == [
        [verdict, name] for name, verdict in CHECKS.items()]
    # A SKIP still checked what a server without a GPU must do, and says so.
    skipped = [line for line in summary if line.startswith("SKIP")]
    assert all("no GPU" in line and "checked instead" in line for line in skipped), skipped
    log = (logs / "gpu_check.log").read_text()
    assert log.endswith("exit status 0\n") and "== summary" in log
    assert "loaded wide_cpu version 1" in (logs / "inferd.log").read_text()


def test_usage_and_an_empty_wheel_folder_are_told(tmp_path: Path) -> None:
    usage = subprocess.run([str(ROOT / "bench" / "gpu_check.sh")], capture_output=True,
                           text=True, timeout=30)
    assert usage.returncode == 2 and "usage: bench/gpu_check.sh" in usage.stderr
    (tmp_path / "empty").mkdir()
    missing = subprocess.run([str(ROOT / "bench" / "gpu_check.sh"), "--cpu-only", "--install",
                              str(tmp_path / "logs")], capture_output=True, text=True,
                             timeout=30, env={**os.environ, "GPU_WHEELS": str(tmp_path / "empty")})
    assert missing.returncode == 2
    assert "/empty/: run 'make gpu-wheels'" in missing.stdout + missing.stderr
