"""What the server leaves in ``$TMPDIR``: serving the shipped repository (onnxruntime, torch
and python models, so the main process and executor processes) with ``$TMPDIR`` an empty
folder, the folder holds nothing but the server's run folder while it serves and nothing at all
once it has stopped. Every file the server, its frameworks and its executors write lives in the
run folder (``tmp/`` is their ``$TMPDIR``), which goes at exit; onnxruntime's telemetry, which
wrote a ``.ses`` file there, is off."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY, InferdHarness


def test_serving_the_shipped_repository_leaves_nothing_in_tmpdir(inferd: InferdHarness,
                                                                  tmp_path: Path) -> None:
    models = sorted(entry.name for entry in EXAMPLE_REPOSITORY.iterdir() if entry.is_dir())
    repository = inferd.repository(*models)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    server = inferd.start(repository, env={"TMPDIR": str(tmpdir)})
    with server.client() as client:
        ready = {entry.name for entry in client.index() if entry.state == "READY"}
        assert {"simple", "stream_words", "preprocess"} <= ready  # onnxruntime and python
        ones = np.ones((1, 16), np.int32)
        result = client.infer("simple", {"INPUT0": ones, "INPUT1": ones})
        assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]
    entries = os.listdir(tmpdir)  # while serving: the run folder, and nothing beside it
    assert len(entries) == 1 and entries[0].startswith(f"inferd-{server.process.pid}-"), entries
    run_folder = entries[0]
    assert ".ses" not in os.listdir(tmpdir / run_folder / "tmp")  # onnxruntime's telemetry: off
    assert server.terminate() == 0
    assert os.listdir(tmpdir) == []
