"""The python backend end to end: Triton-style ``model.py`` files served by a real ``inferd serve``
and called through tritonclient's HTTP and gRPC clients.

The repository holds the example ``simple`` ONNX model and python models that each import
``triton_python_backend_utils as pb_utils`` at module level, unchanged from how they would run
in Triton: ``add_sub`` (Triton's example), ``strings`` (BYTES pre-processing, with a helper
module next to its model.py), ``bls_sync`` and ``bls_async`` (BLS calls to ``simple`` through the
server's scheduler, with ``exec()`` and ``await async_exec()``), ``checker`` (a TritonError in
one response) and ``raiser`` (an exception out of ``execute``). One server (model instances in
an executor process) serves the module; a second one runs the BLS models with inline executors.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

# The harness types live in tests/e2e/conftest.py, which is not importable as a module.
InferdHarness = Any
ServerHandle = Any
LIVE_TIMEOUT_SECS = 30.0
PROTOCOLS = ("http", "grpc")

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""

ADD_SUB_MODEL = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0 = in_0.as_numpy() + in_1.as_numpy()
            out_1 = in_0.as_numpy() - in_1.as_numpy()
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            inference_response = pb_utils.InferenceResponse(
                output_tensors=[out_tensor_0, out_tensor_1]
            )
            responses.append(inference_response)
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

STRINGS_CONFIG = """
name: "strings"
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

STRINGS_HELPER = """
def shout(text):
    return text.upper()
"""

# ``text_helpers`` sits next to model.py: Triton puts the version folder on sys.path.
STRINGS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils
from text_helpers import shout


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            lengths = np.array([len(item) for item in texts], dtype=np.int64)
            upper = np.array([shout(item.decode("utf-8")) for item in texts], dtype=object)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("LENGTH", lengths), pb_utils.Tensor("UPPER", upper),
            ]))
        return responses
"""

SIMPLE_LIKE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
input [ {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
"""

# Sends its inputs to ``simple`` (model name from the request parameter "target", as Triton's
# BLS example takes it) and returns simple's outputs as its own; simple's error is passed on.
BLS_SYNC_MODEL = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "simple")
            bls_request = pb_utils.InferenceRequest(
                model_name=target,
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            )
            bls_response = bls_request.exec()
            if bls_response.has_error():
                responses.append(pb_utils.InferenceResponse(error=bls_response.error()))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(bls_response, "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(bls_response, "OUTPUT1"),
            ]))
        return responses
"""

# Two calls to ``simple`` in flight at once: (a, b) for OUTPUT0 = a + b and (b, a) for
# OUTPUT1 = b - a.
BLS_ASYNC_MODEL = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            pending = []
            for first, second in ((a, b), (b, a)):
                swapped = [pb_utils.Tensor("INPUT0", first.as_numpy()),
                           pb_utils.Tensor("INPUT1", second.as_numpy())]
                bls_request = pb_utils.InferenceRequest(
                    model_name="simple", inputs=swapped,
                    requested_output_names=["OUTPUT0", "OUTPUT1"])
                pending.append(bls_request.async_exec())
            forward, backward = await asyncio.gather(*pending)
            for bls_response in (forward, backward):
                if bls_response.has_error():
                    raise pb_utils.TritonModelException(bls_response.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(forward, "OUTPUT0"),
                pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(
                    backward, "OUTPUT1").as_numpy()),
            ]))
        return responses
"""

ONE_IO_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
"""

CHECKER_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (values < 0).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative input", pb_utils.TritonError.INVALID_ARG)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", values * 2)]))
        return responses
"""

RAISER_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if (pb_utils.get_input_tensor_by_name(request, "IN").as_numpy() < 0).any():
                raise ValueError("cannot handle negative numbers")
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
"""

RAISER_MESSAGE = (
    "Failed to process the request(s) for model 'raiser', message: "
    "ValueError: cannot handle negative numbers"
)


def add_python_model(root: Path, name: str, config: str, model: str,
                     extra: dict[str, str] | None = None) -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(config))
    (folder / "1" / "model.py").write_text(textwrap.dedent(model))
    for filename, text in (extra or {}).items():
        (folder / "1" / filename).write_text(textwrap.dedent(text))


def python_repository(harness: InferdHarness) -> Path:
    root: Path = harness.repository("simple")
    add_python_model(root, "add_sub", ADD_SUB_CONFIG, ADD_SUB_MODEL)
    add_python_model(root, "strings", STRINGS_CONFIG, STRINGS_MODEL,
                     {"text_helpers.py": STRINGS_HELPER})
    add_python_model(root, "bls_sync", SIMPLE_LIKE_CONFIG.format(name="bls_sync"), BLS_SYNC_MODEL)
    add_python_model(root, "bls_async", SIMPLE_LIKE_CONFIG.format(name="bls_async"),
                     BLS_ASYNC_MODEL)
    add_python_model(root, "checker", ONE_IO_CONFIG.format(name="checker"), CHECKER_MODEL)
    add_python_model(root, "raiser", ONE_IO_CONFIG.format(name="raiser"), RAISER_MODEL)
    return root


def wait_frontends_live(server: ServerHandle) -> None:
    """The harness waits for the zmq frontend; HTTP and gRPC may bind a moment later."""
    deadline = time.monotonic() + LIVE_TIMEOUT_SECS
    for protocol in PROTOCOLS:
        while True:
            try:
                with connect(server, protocol) as client:
                    if client.is_server_live():
                        break
            except (OSError, InferenceServerException):
                pass  # refused until the frontend binds
            if server.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the {protocol} frontend never became live; log:\n{server.log()}")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    handle = module_inferd.start(python_repository(module_inferd))
    wait_frontends_live(handle)
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
    assert_failure(error, protocol, 500, "INTERNAL", RAISER_MESSAGE)
    # The instance keeps serving.
    result = infer("raiser", {"IN": (np.array([[1, 2]], dtype=np.float32), "FP32")})
    np.testing.assert_array_equal(result["OUT"], [[1, 2]])


def test_bls_with_inline_executors(inferd: InferdHarness) -> None:
    """Inline executors share the main event loop: BLS must still never block it."""
    root = python_repository(inferd)
    server = inferd.start(root, "--executor-inline")
    wait_frontends_live(server)
    inputs = simple_inputs()
    first, second = inputs["INPUT0"][0], inputs["INPUT1"][0]
    for protocol in PROTOCOLS:
        for infer in make_infer(server, protocol):
            for _ in range(3):  # past the executor's first timings, when it may go inline
                result = infer("bls_sync", inputs)
                np.testing.assert_array_equal(result["OUTPUT0"], first + second)
            result = infer("bls_async", inputs)
            np.testing.assert_array_equal(result["OUTPUT1"], second - first)
