"""``inferd check`` as a CI step runs it: a separate process, its exit status and output."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import EXAMPLE_REPOSITORY, INFERD

TIMEOUT_SECS = 120


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERD, "check", *arguments], capture_output=True, text=True,
                          timeout=TIMEOUT_SECS, check=False)


def test_the_example_repository_passes() -> None:
    finished = run("--format", "json", str(EXAMPLE_REPOSITORY))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    report = json.loads(finished.stdout)
    assert report["ok"] is True and report["error_count"] == 0
    models = {model["name"]: model for model in report["models"]}
    assert models["ocr"]["catalog"]["task"] == "ocr"
    assert models["simple"]["auto_complete"] == "completed from the model file"


def test_a_broken_repository_fails_with_the_place_of_each_problem(tmp_path: Path) -> None:
    folder = tmp_path / "typo"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text('backend: "inferd_testing"\nmax_bach_size: 2\n')
    finished = run(str(tmp_path))
    assert finished.returncode == 1, finished.stdout + finished.stderr
    assert f'error: {folder}/config.pbtxt:2:1: no field named "max_bach_size"' in (
        finished.stdout.splitlines())
    assert run(str(tmp_path / "missing")).returncode == 2
    assert run("--format=xml", str(tmp_path)).returncode == 2
