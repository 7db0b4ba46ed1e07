"""What Triton's python backend added after 2.51, end to end through tritonclient: response
parameters (python_backend#394) also read from a BLS response (#395), ``cancel()`` on a
decoupled BLS response iterator (#398), a model's own ``is_ready()`` (#430), and readiness
false while a model's process is down (core#461/#473), until inferd has restarted it.

One server serves the models (tests/plugins/python_models): ``reporter`` (response
parameters), ``bls_reporter`` (reads them through BLS), ``bls_canceller`` and ``ticker`` (a
cancelled BLS stream), ``readiness`` (``is_ready`` steered by files in its folder) and
``phoenix`` (a reload that waits for the test).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, wait_for

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
MODELS = ("reporter", "bls_reporter", "bls_canceller", "ticker", "readiness", "phoenix")
PROTOCOLS = ("http", "grpc")


@pytest.fixture(scope="module")
def repository(module_inferd: InferdHarness) -> Path:
    return module_inferd.copy_models(module_inferd.repository(), PYTHON_MODELS, *MODELS)


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, repository: Path) -> ServerHandle:
    return module_inferd.start(repository)


@pytest.fixture(params=PROTOCOLS)
def client(request: pytest.FixtureRequest, server: ServerHandle) -> Iterator[Any]:
    if request.param == "http":
        with httpclient.InferenceServerClient(server.http_url) as http:
            yield http
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            yield grpc


def module_of(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def infer(client: Any, model: str, **arrays: np.ndarray) -> Any:
    module = module_of(client)
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), "INT32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(model, inputs)


def response_parameters(client: Any, result: Any) -> dict[str, Any]:
    """The response's ``parameters`` as plain values, over either protocol."""
    if module_of(client) is httpclient:
        parameters: dict[str, Any] = result.get_response().get("parameters", {})
        return parameters
    found = {}
    for key, value in result.get_response().parameters.items():
        kind = value.WhichOneof("parameter_choice")
        found[key] = getattr(value, kind)
    return found


# ------------------------------------------------------------------ response parameters


def test_a_python_models_response_parameters_reach_the_client(client: Any) -> None:
    result = infer(client, "reporter", IN=np.array([21], np.int32))
    assert result.as_numpy("OUT").tolist() == [42]
    assert response_parameters(client, result) == {
        "doubled": True, "input": 21, "by": "reporter"}


def test_a_bls_response_carries_the_called_models_parameters(client: Any) -> None:
    result = infer(client, "bls_reporter", IN=np.array([5], np.int32))
    assert result.as_numpy("OUT").tolist() == [10]
    read = result.as_numpy("PARAMETERS")[0]
    assert json.loads(read) == {"doubled": True, "input": 5, "by": "reporter"}
    assert response_parameters(client, result) == {"via": "bls_reporter"}


# ------------------------------------------------------------------ BLS cancel()


def test_cancel_on_a_bls_stream_stops_the_called_model(
        server: ServerHandle, repository: Path) -> None:
    """``ticker`` streams until its request is cancelled (30 s at most, then it writes "gave
    up"): the caller's ``cancel()`` after 3 responses ends it at once."""
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as http:
        result = infer(http, "bls_canceller", TAG=np.array([7], np.int32),
                       TAKE=np.array([3], np.int32))
    assert result.as_numpy("FINISHED").tolist() == [True]
    assert result.as_numpy("TAKEN")[0] >= 3  # those sent before ticker saw the cancellation
    record = (repository / "ticker" / "record.txt").read_text().splitlines()
    assert "7 cancelled" in record, record


# ------------------------------------------------------------------ is_ready()


def test_is_ready_decides_the_models_readiness(
        client: Any, server: ServerHandle, repository: Path) -> None:
    folder = repository / "readiness"
    checks = folder / "checks.txt"
    before = len(checks.read_text().splitlines()) if checks.exists() else 0
    assert client.is_model_ready("readiness")
    # Both instances were asked (Triton asks every instance of the version).
    assert len(checks.read_text().splitlines()) >= before + 2
    for steering in ("not_ready", "broken", "not_bool"):
        (folder / steering).touch()
        try:
            assert not client.is_model_ready("readiness"), steering
            assert not client.is_model_ready("readiness", "1"), steering
            assert not client.is_server_ready(), steering  # strict readiness: core#473
        finally:
            (folder / steering).unlink()
        assert client.is_model_ready("readiness")
    # Readiness changes nothing else: the model serves throughout.
    assert infer(client, "readiness", IN=np.array([3], np.int32)).as_numpy("OUT").tolist() == [3]


# ------------------------------------------------------------------ a dead model process


def test_a_model_is_not_ready_while_its_process_is_down_then_ready_again(
        server: ServerHandle, repository: Path) -> None:
    folder = repository / "phoenix"
    with httpclient.InferenceServerClient(server.http_url) as http:
        first_pid = int(infer(http, "phoenix", IN=np.array([0], np.int32)).as_numpy("PID")[0])
        assert http.is_model_ready("phoenix") and http.is_server_ready()
        os.kill(first_pid, signal.SIGKILL)
        # Its reload waits for "release": until then the model is not ready, nor the server.
        wait_for(lambda: not http.is_model_ready("phoenix"), "phoenix not ready", server)
        assert not http.is_server_ready()
        assert http.is_model_ready("reporter")  # the other models serve on
        (folder / "release").touch()
        wait_for(lambda: http.is_model_ready("phoenix"), "phoenix ready again", server)
        assert http.is_server_ready()
        second_pid = int(infer(http, "phoenix", IN=np.array([0], np.int32)).as_numpy("PID")[0])
    assert second_pid != first_pid
