"""``inferd check`` as a CI step runs it: a separate process, its exit status and output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.services import S3Server
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY, INFERD


TIMEOUT_SECS = 120


def run(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERD, "check", *arguments], capture_output=True, text=True,
                          timeout=TIMEOUT_SECS, check=False, env=env)


def test_the_example_repository_passes() -> None:
    finished = run("--format", "json", str(EXAMPLE_REPOSITORY))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    report = json.loads(finished.stdout)
    assert report["ok"] is True and report["error_count"] == 0
    models = {model["name"]: model for model in report["models"]}
    assert models["ocr"]["catalog"]["task"] == "ocr"
    assert models["simple"]["auto_complete"] == "checked against the model file"  # all declared


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


def test_a_remote_repository_is_checked_as_a_load_would_fetch_it(
    s3_server: S3Server, tmp_path: Path
) -> None:
    local = tmp_path / "repository"
    shutil.copytree(EXAMPLE_REPOSITORY / "simple", local / "simple",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (local / "typo" / "1").mkdir(parents=True)
    (local / "typo" / "1" / "README").write_text("the testing backend reads no file\n")
    (local / "typo" / "config.pbtxt").write_text('backend: "inferd_testing"\nmax_bach_size: 2\n')
    s3_server.upload(local, "checked/models")
    url = s3_server.url("checked/models")
    env = {**os.environ, **s3_server.env, "AWS_EC2_METADATA_DISABLED": "true"}
    cache = ("--repository-cache-dir", str(tmp_path / "cache"))

    finished = run("--format", "json", *cache, url, env=env)
    assert finished.returncode == 1, finished.stdout + finished.stderr
    models = {model["name"]: model for model in json.loads(finished.stdout)["models"]}
    assert models["simple"]["state"] == "ok"
    assert models["simple"]["auto_complete"] == "checked against the model file"  # all declared
    assert models["typo"]["path"] == f"{url}/typo"
    assert models["typo"]["errors"][0] == {
        "message": 'no field named "max_bach_size"', "file": f"{url}/typo/config.pbtxt",
        "line": 2, "column": 1}

    missing = run(*cache, s3_server.url("nosuchbucket/models"), env=env)
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert "no such bucket" in missing.stdout
