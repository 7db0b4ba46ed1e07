"""Start-up end to end: a model that fails at start-up in NONE mode (served around with
``--exit-on-error=false``, fatal by default) and the ``--load-model`` flag checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.protocols.errors import NotFound
from inferd.protocols.messages import IndexEntry

BAD_CONFIG = 'name: "misspelt"\nmax_bach_size: 8\nplatform: "onnxruntime_onnx"\n'
BAD_CONFIG_ERROR = 'misspelt/config.pbtxt:2:1: no field named "max_bach_size"'
EXIT_TIMEOUT_SECS = 60.0


@pytest.fixture
def broken_repository(inferd: Any) -> Path:
    repository: Path = inferd.repository("simple", configs={"misspelt": BAD_CONFIG})
    return repository


def test_without_exit_on_error_the_server_serves_the_other_models(
    inferd: Any, broken_repository: Path
) -> None:
    server = inferd.start(broken_repository, "--exit-on-error=false")

    with server.client(timeout=30) as client:
        assert client.index() == [
            IndexEntry("misspelt", "", "UNAVAILABLE", BAD_CONFIG_ERROR),
            IndexEntry("simple", "1", "READY", ""),
        ]
        ones = np.ones((1, 16), np.int32)
        result = client.infer("simple", {"INPUT0": ones * 7, "INPUT1": ones * 2})
        assert result.as_numpy("OUTPUT0").tolist() == [[9] * 16]
        assert result.as_numpy("OUTPUT1").tolist() == [[5] * 16]
        # A start-up failure keeps a strictly ready server unready (SPEC 6.2).
        assert client.is_ready() is False
        # Refused at its config, it never became a model requests know (as Triton answers).
        with pytest.raises(NotFound, match="^Request for unknown model: 'misspelt' is not "
                                           "found$"):
            client.infer("misspelt", {"INPUT0": ones})
        assert client.is_live() is True


def test_by_default_a_start_up_failure_stops_the_server(
    inferd: Any, broken_repository: Path
) -> None:
    server = inferd.launch(broken_repository)

    code = server.wait_exit(EXIT_TIMEOUT_SECS)

    log = server.log()
    assert code == 1, log
    assert f"1 model failed to load:\n  misspelt: {BAD_CONFIG_ERROR}" in log, log
    assert "inferd is serving" not in log, log


def test_a_model_repository_that_is_not_a_folder_fails_the_start(
    inferd: Any, tmp_path: Path
) -> None:
    a_file = tmp_path / "models.txt"
    a_file.write_text("not a folder", encoding="utf-8")
    for root, problem in ((tmp_path / "missing", "does not exist"),
                          (a_file, "is not a directory")):
        server = inferd.launch(root)
        assert server.wait_exit(EXIT_TIMEOUT_SECS) == 1, server.log()
        assert f"failed to stat file {root}: the model repository {problem}" in server.log()
        assert "inferd is serving" not in server.log()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(
            ("--load-model", "simple"),
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well.",
            id="load-model-without-explicit-mode",
        ),
        pytest.param(
            ("--model-control-mode", "explicit", "--load-model", "*", "--load-model", "simple"),
            "Wildcard model name '*' must be the ONLY startup model if specified at all.",
            id="wildcard-with-other-names",
        ),
    ],
)
def test_load_model_flag_errors(
    inferd: Any, broken_repository: Path, flags: tuple[str, ...], message: str
) -> None:
    server = inferd.launch(broken_repository, *flags)

    code = server.wait_exit(EXIT_TIMEOUT_SECS)

    log = server.log()
    assert code == 1, log
    assert message in log, log
    assert "started executor" not in log, log
