"""The python backend end to end: Triton-style ``model.py`` files served by a real ``inferd serve``
and called through tritonclient's HTTP and gRPC clients.

The repository holds the example ``simple`` ONNX model and python models (copied from
tests/plugins/python_models) that each import ``triton_python_backend_utils as pb_utils`` at
module level, unchanged from how they would run in Triton: ``add_sub`` (Triton's example),
``strings`` (BYTES pre-processing, with a helper module next to its model.py), ``bls_sync`` and
``bls_async`` (BLS calls to ``simple`` through the server's scheduler, with ``exec()`` and
``await async_exec()``), ``checker`` (a TritonError in one response) and ``raiser`` (an
exception out of ``execute``). One server (each model instance in an executor process of its
own) serves the module; a second one runs the BLS models with inline executors; a third shows
two instances of ``spinner`` running at once in two processes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

PROTOCOLS = ("http", "grpc")
# The models, as a Triton user writes them; tests/plugins/test_python_backend.py runs some too.
PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
PYTHON_MODEL_NAMES = ("add_sub", "strings", "bls_sync", "bls_async", "checker", "raiser")

# Triton's python backend's words: the instance, the exception, and its model's frames.
RAISER_MESSAGE = re.compile(
    r"Failed to process the request\(s\) for model 'raiser_0_0', message: "
    r"ValueError: cannot handle negative numbers\n\nAt:\n  /\S+/raiser/1/model\.py\(10\): "
    r"execute\n")


def python_repository(harness: InferdHarness) -> Path:
    root: Path = harness.repository("simple")
    harness.copy_models(root, PYTHON_MODELS, *PYTHON_MODEL_NAMES)
    return root



@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    handle = module_inferd.start(python_repository(module_inferd))
    return handle


def connect(server: ServerHandle, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


Infer = Callable[..., dict[str, np.ndarray]]


def make_infer(server: ServerHandle, protocol: str) -> Iterator[Infer]:
    module = httpclient if protocol == "http" else grpcclient
    with connect(server, protocol) as client:

        def infer(model: str, arrays: dict[str, tuple[np.ndarray, str]],
                  outputs: list[str] | None = None, **options: Any) -> dict[str, np.ndarray]:
            inputs = []
            for name, (array, datatype) in arrays.items():
                tensor = module.InferInput(name, list(array.shape), datatype)
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            requested = [module.InferRequestedOutput(name) for name in outputs or []] or None
            result = client.infer(model, inputs, outputs=requested, **options)
            names = outputs or [entry["name"] for entry in _outputs_of(result, protocol)]
            return {name: result.as_numpy(name) for name in names}

        yield infer


def _outputs_of(result: Any, protocol: str) -> list[dict[str, Any]]:
    response = result.get_response(as_json=True) if protocol == "grpc" else result.get_response()
    outputs: list[dict[str, Any]] = response["outputs"]
    return outputs


@pytest.fixture
def infer(server: ServerHandle, protocol: str) -> Iterator[Infer]:
    yield from make_infer(server, protocol)


def assert_failure(error: pytest.ExceptionInfo[InferenceServerException], protocol: str,
                   http_status: int, grpc_status: str, message: str) -> None:
    expected = str(http_status) if protocol == "http" else f"StatusCode.{grpc_status}"
    assert error.value.status() == expected
    assert error.value.message() == message


# ------------------------------------------------------------------------------------ tests


def test_add_sub_example(infer: Infer) -> None:
    a = np.array([1.5, 2, 3, 4], dtype=np.float32)
    b = np.array([0.5, 1, 1, 1], dtype=np.float32)
    result = infer("add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")})
    assert sorted(result) == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(result["OUTPUT0"], a + b)
    np.testing.assert_array_equal(result["OUTPUT1"], a - b)
    assert result["OUTPUT0"].dtype == np.float32
    only = infer("add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (b, "FP32")}, ["OUTPUT1"])
    np.testing.assert_array_equal(only["OUTPUT1"], a - b)


def test_python_models_report_their_compute_phases(infer: Infer, server: ServerHandle) -> None:
    a = np.ones(4, dtype=np.float32)
    infer("add_sub", {"INPUT0": (a, "FP32"), "INPUT1": (a, "FP32")})
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        "add_sub")["model_stats"][0]["inference_stats"]
    # perf_analyzer's server-side breakdown needs all three, as Triton reports them.
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert stats[phase]["count"] > 0 and stats[phase]["ns"] > 0, (phase, stats)


def test_python_models_report_their_config(server: ServerHandle, protocol: str) -> None:
    with connect(server, protocol) as client:
        metadata = client.get_model_metadata("add_sub")
        config = client.get_model_config("add_sub")
    if protocol == "grpc":
        assert metadata.platform == "python" and [i.name for i in metadata.inputs] == [
            "INPUT0", "INPUT1"]
        assert config.config.backend == "python"
    else:
        assert metadata["platform"] == "python"
        assert config["backend"] == "python"
        assert config["default_model_filename"] == "model.py"


def test_bytes_model(infer: Infer) -> None:
    texts = np.array([b"hello", "wörld".encode(), b""], dtype=object)
    result = infer("strings", {"TEXT": (texts, "BYTES")})
    np.testing.assert_array_equal(result["LENGTH"], [5, 6, 0])
    assert result["LENGTH"].dtype == np.int32
    assert list(result["UPPER"]) == [b"HELLO", "WÖRLD".encode(), b""]


def simple_inputs() -> dict[str, tuple[np.ndarray, str]]:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.full((1, 16), 3, dtype=np.int32)
    return {"INPUT0": (first, "INT32"), "INPUT1": (second, "INT32")}


def test_bls_exec_calls_simple(infer: Infer) -> None:
    inputs = simple_inputs()
    first, second = inputs["INPUT0"][0], inputs["INPUT1"][0]
    result = infer("bls_sync", inputs)
    np.testing.assert_array_equal(result["OUTPUT0"], first + second)
    np.testing.assert_array_equal(result["OUTPUT1"], first - second)


def test_bls_requests_go_through_the_called_models_scheduler(
    server: ServerHandle, infer: Infer
) -> None:
    def simple_requests() -> int:
        with httpclient.InferenceServerClient(server.http_url) as client:
            stats = client.get_inference_statistics("simple")["model_stats"][0]
        return int(stats["inference_stats"]["success"]["count"])

    before = simple_requests()
    infer("bls_sync", simple_inputs())
    infer("bls_async", simple_inputs())
    assert simple_requests() == before + 3


def test_bls_error_from_the_called_model_is_a_response(infer: Infer, protocol: str) -> None:
    with pytest.raises(InferenceServerException) as error:
        infer("bls_sync", simple_inputs(), parameters={"target": "no_such_model"})
    assert_failure(error, protocol, 404, "NOT_FOUND",
                   "Request for unknown model: 'no_such_model' is not found")


def test_async_bls_runs_two_calls_concurrently(infer: Infer) -> None:
    inputs = simple_inputs()
    first, second = inputs["INPUT0"][0], inputs["INPUT1"][0]
    result = infer("bls_async", inputs)
    np.testing.assert_array_equal(result["OUTPUT0"], first + second)
    np.testing.assert_array_equal(result["OUTPUT1"], second - first)


def test_triton_error_fails_only_its_request(server: ServerHandle, protocol: str) -> None:
    outcomes: dict[str, Any] = {}

    def send(label: str, values: list[float]) -> None:
        for infer in make_infer(server, protocol):
            try:
                array = np.array([values], dtype=np.float32)
                outcomes[label] = infer("checker", {"IN": (array, "FP32")})["OUT"]
            except InferenceServerException as error:
                outcomes[label] = error

    # Sent together, so the dynamic batcher (200 ms window) hands both to one execute.
    threads = [threading.Thread(target=send, args=("good", [1, 2])),
               threading.Thread(target=send, args=("bad", [-1, 2]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    np.testing.assert_array_equal(outcomes["good"], [[2, 4]])
    bad = outcomes["bad"]
    assert isinstance(bad, InferenceServerException)
    expected = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    assert bad.status() == expected and bad.message() == "negative input"


def test_exception_in_execute_fails_the_request_with_its_message(
    infer: Infer, protocol: str
) -> None:
    with pytest.raises(InferenceServerException) as error:
        infer("raiser", {"IN": (np.array([[-1, 0]], dtype=np.float32), "FP32")})
    expected = "500" if protocol == "http" else "StatusCode.INTERNAL"
    assert error.value.status() == expected
    assert RAISER_MESSAGE.fullmatch(error.value.message()), error.value.message()
    # The instance keeps serving.
    result = infer("raiser", {"IN": (np.array([[1, 2]], dtype=np.float32), "FP32")})
    np.testing.assert_array_equal(result["OUT"], [[1, 2]])


def test_bls_with_inline_executors(inferd: InferdHarness) -> None:
    """Inline executors share the main event loop: BLS must still never block it."""
    root = python_repository(inferd)
    server = inferd.start(root, "--executor-inline")
    inputs = simple_inputs()
    first, second = inputs["INPUT0"][0], inputs["INPUT1"][0]
    for protocol in PROTOCOLS:
        for infer in make_infer(server, protocol):
            for _ in range(3):  # past the executor's first timings, when it may go inline
                result = infer("bls_sync", inputs)
                np.testing.assert_array_equal(result["OUTPUT0"], first + second)
            result = infer("bls_async", inputs)
            np.testing.assert_array_equal(result["OUTPUT1"], second - first)


# ---------------------------------------------------------------- instances as processes


def test_instances_of_a_python_model_run_at_once_in_processes_of_their_own(
        inferd: InferdHarness) -> None:
    root = inferd.copy_models(inferd.repository(), PYTHON_MODELS, "spinner")
    server = inferd.start(root)
    records: list[np.ndarray] = []

    def spin() -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            seconds = httpclient.InferInput("SECONDS", [1], "FP32")
            seconds.set_data_from_numpy(np.array([1.0], np.float32))
            records.append(client.infer("spinner", [seconds]).as_numpy("RECORD"))

    threads = [threading.Thread(target=spin) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(records) == 2, server.log()
    (first_pid, first_began, first_ended), (second_pid, second_began, second_ended) = records
    assert first_pid != second_pid != server.process.pid  # two instances, two processes
    # Both spun (holding their interpreter's lock) through a common stretch of time.
    assert max(first_began, second_began) < min(first_ended, second_ended), records
