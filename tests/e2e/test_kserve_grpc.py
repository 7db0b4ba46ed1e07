"""The KServe v2 gRPC frontend end to end, through tritonclient.grpc (sync and aio) and, for
requests tritonclient would never build, the generated stub itself.

One EXPLICIT-mode server (every model loaded at start-up) serves most of the module: the
example ``simple`` and ``identity_fp32``, an ONNX Identity model with one input per datatype
onnxruntime's Python binding handles, and testing-backend echo models for what it does not
(BF16, arbitrary bytes, typed contents). Tests that stop or refuse a server start their own.
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, wait_for, wait_started


EXAMPLE_REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
LIVE_TIMEOUT_SECS = 30.0

# datatype -> (ONNX element type, numpy dtype of test values); BF16 is not here: numpy and
# onnxruntime's Python binding have no bfloat16, so the testing backend covers it.
ONNX_DATATYPES: dict[str, tuple[int, Any]] = {
    "BOOL": (TensorProto.BOOL, np.bool_),
    "UINT8": (TensorProto.UINT8, np.uint8),
    "UINT16": (TensorProto.UINT16, np.uint16),
    "UINT32": (TensorProto.UINT32, np.uint32),
    "UINT64": (TensorProto.UINT64, np.uint64),
    "INT8": (TensorProto.INT8, np.int8),
    "INT16": (TensorProto.INT16, np.int16),
    "INT32": (TensorProto.INT32, np.int32),
    "INT64": (TensorProto.INT64, np.int64),
    "FP16": (TensorProto.FLOAT16, np.float16),
    "FP32": (TensorProto.FLOAT, np.float32),
    "FP64": (TensorProto.DOUBLE, np.float64),
    "BYTES": (TensorProto.STRING, np.object_),
}

# Datatypes that have a typed InferTensorContents field, with the values sent in it.
TYPED_VALUES: dict[str, list[Any]] = {
    "BOOL": [True, False, True],
    "INT8": [-128, 0, 127],
    "INT16": [-32768, 1, 32767],
    "INT32": [-(2**31), 2, 2**31 - 1],
    "INT64": [-(2**63), 3, 2**63 - 1],
    "UINT8": [0, 1, 255],
    "UINT16": [0, 2, 65535],
    "UINT32": [0, 3, 2**32 - 1],
    "UINT64": [0, 4, 2**64 - 1],
    "FP32": [-1.5, 0.0, 3.25],
    "FP64": [-2.5, 1e300, 7.0],
    "BYTES": [b"", b"\x00\xff", "é✓".encode()],
}
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}


def config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def identity_all_config() -> str:
    inputs = ", ".join(
        f'{{ name: "IN_{d}" data_type: {config_type(d)} dims: [ -1 ] }}' for d in ONNX_DATATYPES
    )
    outputs = ", ".join(
        f'{{ name: "OUT_{d}" data_type: {config_type(d)} dims: [ -1 ] }}' for d in ONNX_DATATYPES
    )
    return (
        'name: "identity_all"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n"
    )


def identity_all_model() -> bytes:
    inputs, outputs, nodes = [], [], []
    for datatype, (element_type, _) in ONNX_DATATYPES.items():
        inputs.append(helper.make_tensor_value_info(f"IN_{datatype}", element_type, ["n"]))
        outputs.append(helper.make_tensor_value_info(f"OUT_{datatype}", element_type, ["n"]))
        nodes.append(helper.make_node("Identity", [f"IN_{datatype}"], [f"OUT_{datatype}"]))
    graph = helper.make_graph(nodes, "identity_all", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def echo_config(name: str, datatypes: list[str], mode: str = "echo") -> str:
    inputs = ", ".join(
        f'{{ name: "IN_{d}" data_type: {config_type(d)} dims: [ -1 ] }}' for d in datatypes
    )
    outputs = ", ".join(
        f'{{ name: "OUT_{d}" data_type: {config_type(d)} dims: [ -1 ] }}' for d in datatypes
    )
    return (
        f'name: "{name}"\nbackend: "inferd_testing"\nmax_batch_size: 0\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n"
        f'parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}\n'
    )



@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root = module_inferd.repository(
        "simple",
        "identity_fp32",
        configs={
            "echo_bf16": echo_config("echo_bf16", ["BF16", "BYTES"]),
            "echo_typed": echo_config("echo_typed", list(TYPED_VALUES)),
            "failing": module_inferd.testing_config("failing", "fail"),
            "reloadable": module_inferd.testing_config("reloadable", "echo"),
            "identity_all": identity_all_config(),
            # Held (until slow3.release exists) so a test can see three running at once.
            "slow3": module_inferd.testing_config(
                "slow3", "slow", instances=3, delay_ms="30000",
                started_file=str(module_inferd.folder / "slow3.started"),
                release_file=str(module_inferd.folder / "slow3.release")),
        },
    )
    (root / "identity_all" / "1" / "model.onnx").write_bytes(identity_all_model())
    server = module_inferd.start(root, "--model-control-mode=explicit", "--load-model=*")
    return server


@pytest.fixture
def client(server: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


@pytest.fixture
def stub(server: ServerHandle) -> Iterator[Any]:
    """The generated stub, for requests tritonclient refuses to build."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def simple_inputs(first: np.ndarray, second: np.ndarray) -> list[grpcclient.InferInput]:
    return [infer_input("INPUT0", first, "INT32"), infer_input("INPUT1", second, "INT32")]


def assert_error(error: pytest.ExceptionInfo[InferenceServerException], status: str,
                 message: str) -> None:
    assert error.value.status() == f"StatusCode.{status}"
    assert error.value.message() == message


def raw_request(model: str = "simple", **fields: Any) -> Any:
    """A ModelInferRequest for ``simple`` with correct raw contents unless overridden."""
    request = service_pb2.ModelInferRequest(model_name=model, **fields)
    if "inputs" not in fields:
        for name in ("INPUT0", "INPUT1"):
            request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        if "raw_input_contents" not in fields:
            request.raw_input_contents.extend([np.arange(16, dtype="<i4").tobytes()] * 2)
    return request


def assert_rpc_error(call: Any, request: Any, code: grpc.StatusCode, contains: str) -> None:
    with pytest.raises(grpc.RpcError) as error:
        call(request)
    assert error.value.code() == code, error.value.details()
    assert contains in error.value.details()


# ------------------------------------------------------------------------------- health


def test_live_ready_and_model_ready(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    assert client.is_model_ready("simple") is True
    assert client.is_model_ready("simple", "1") is True
    assert client.is_model_ready("simple", "2") is False
    assert client.is_model_ready("no_such_model") is False


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "inferd"
    assert metadata["version"]
    assert "model_repository" in metadata["extensions"]


def test_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("simple", as_json=True)
    assert metadata["name"] == "simple"
    assert metadata["versions"] == ["1"]
    assert metadata["platform"] == "onnxruntime_onnx"
    tensors = [{"name": f"INPUT{i}", "datatype": "INT32", "shape": ["-1", "16"]} for i in (0, 1)]
    assert metadata["inputs"] == tensors
    assert [output["name"] for output in metadata["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_config_is_a_model_config_proto(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple").config
    assert config.name == "simple"
    assert config.max_batch_size == 8
    assert [tensor.name for tensor in config.input] == ["INPUT0", "INPUT1"]
    assert list(config.input[0].dims) == [16]
    assert config.input[0].data_type == model_config_pb2.TYPE_INT32
    assert config.version_policy.latest.num_versions == 1
    assert [group.name for group in config.instance_group] == ["simple_0"]


# ------------------------------------------------------------------------------- inference


def test_simple_infer_exact_results_and_id_echo(client: grpcclient.InferenceServerClient) -> None:
    first = np.arange(32, dtype=np.int32).reshape(2, 16)
    second = np.full((2, 16), 3, dtype=np.int32)
    result = client.infer("simple", simple_inputs(first, second), request_id="request-42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    response = result.get_response()
    assert response.id == "request-42"
    assert response.model_name == "simple"
    assert response.model_version == "1"
    # Every output travels in raw_output_contents, never in typed contents.
    assert len(response.raw_output_contents) == len(response.outputs) == 2


def test_requested_outputs_and_explicit_version(client: grpcclient.InferenceServerClient) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer(
        "simple", simple_inputs(first, first), model_version="1",
        outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
    )
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), np.int32))


def test_statistics_rise_after_inference(client: grpcclient.InferenceServerClient) -> None:
    def simple_stats() -> Any:
        (stats,) = client.get_inference_statistics("simple").model_stats
        return stats

    before = simple_stats()
    first = np.ones((3, 16), dtype=np.int32)
    client.infer("simple", simple_inputs(first, first))
    after = simple_stats()
    assert (after.name, after.version) == ("simple", "1")
    assert after.inference_count == before.inference_count + 3
    assert after.execution_count == before.execution_count + 1
    assert after.inference_stats.success.count == before.inference_stats.success.count + 1
    assert after.inference_stats.success.ns > before.inference_stats.success.ns
    assert after.inference_stats.compute_infer.count > before.inference_stats.compute_infer.count
    assert 3 in [batch.batch_size for batch in after.batch_stats]
    everything = client.get_inference_statistics().model_stats
    assert {"simple", "identity_all", "echo_typed"} <= {stats.name for stats in everything}


def datatype_values(datatype: str) -> np.ndarray:
    if datatype == "BOOL":
        return np.array([True, False, True])
    if datatype == "BYTES":
        return np.array(["", "héllo ✓", "日本語", "plain"], dtype=np.object_)
    dtype = np.dtype(ONNX_DATATYPES[datatype][1])
    if dtype.kind == "f":
        return np.array([-1.5, 0.0, 2.25, np.inf], dtype=dtype)
    limits = np.iinfo(dtype)
    return np.array([limits.min, 0, 1, limits.max], dtype=dtype)


def test_every_onnx_datatype_round_trips(client: grpcclient.InferenceServerClient) -> None:
    arrays = {datatype: datatype_values(datatype) for datatype in ONNX_DATATYPES}
    inputs = [infer_input(f"IN_{d}", array, d) for d, array in arrays.items()]
    result = client.infer("identity_all", inputs)
    for datatype, array in arrays.items():
        output = result.as_numpy(f"OUT_{datatype}")
        if datatype == "BYTES":
            assert output.tolist() == [text.encode() for text in array]
        else:
            assert output.dtype == array.dtype, datatype
            np.testing.assert_array_equal(output, array)


def test_bf16_and_arbitrary_bytes_round_trip(client: grpcclient.InferenceServerClient) -> None:
    bf16 = np.array([1.0, -2.5, 3.140625, 0.0], dtype=ml_dtypes.bfloat16)
    blobs = np.array([b"", b"\x00\xff\xfe", "ü".encode(), b"x" * 1000], dtype=np.object_)
    result = client.infer(
        "echo_bf16", [infer_input("IN_BF16", bf16, "BF16"), infer_input("IN_BYTES", blobs, "BYTES")]
    )
    output = result.as_numpy("OUT_BF16")
    assert output.dtype == bf16.dtype
    np.testing.assert_array_equal(output.view(np.uint16), bf16.view(np.uint16))
    assert result.as_numpy("OUT_BYTES").tolist() == blobs.tolist()


def test_tensor_over_four_mebibytes(client: grpcclient.InferenceServerClient) -> None:
    values = np.random.default_rng(7).random(3 * 1024 * 1024, dtype=np.float32)  # 12 MiB
    result = client.infer("identity_fp32", [infer_input("INPUT0", values, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_typed_contents_inputs(stub: Any) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo_typed", id="typed")
    for datatype, values in TYPED_VALUES.items():
        tensor = request.inputs.add(name=f"IN_{datatype}", datatype=datatype, shape=[3])
        getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(values)
    response = stub.ModelInfer(request)
    assert response.id == "typed"
    result = grpcclient.InferResult(response)
    for datatype, values in TYPED_VALUES.items():
        output = result.as_numpy(f"OUT_{datatype}")
        assert output.tolist() == values, datatype


def test_request_parameters(stub: Any) -> None:
    request = raw_request(id="with-parameters")
    request.parameters["priority"].uint64_param = 1
    request.parameters["timeout"].int64_param = 10_000_000
    request.parameters["custom"].string_param = "value"
    request.parameters["ratio"].double_param = 0.5
    response = stub.ModelInfer(request)
    assert response.id == "with-parameters"


# ------------------------------------------------------------------------------- errors


def test_unknown_model_and_version(client: grpcclient.InferenceServerClient) -> None:
    first = np.ones((1, 16), dtype=np.int32)
    with pytest.raises(InferenceServerException) as error:
        client.infer("no_such_model", simple_inputs(first, first))
    assert_error(error, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(first, first), model_version="7")
    assert_error(error, "NOT_FOUND", "Request for unknown model: 'simple' version 7 is not found")
    with pytest.raises(InferenceServerException) as error:
        client.get_model_metadata("no_such_model")
    assert_error(error, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")
    with pytest.raises(InferenceServerException) as error:
        client.get_model_config("no_such_model")
    assert_error(error, "NOT_FOUND", "Request for unknown model: 'no_such_model' is not found")
    with pytest.raises(InferenceServerException) as error:
        client.get_inference_statistics("no_such_model")
    assert_error(error, "INVALID_ARGUMENT", "requested model 'no_such_model' is not available")


def test_a_tensor_named_twice_is_invalid(client: grpcclient.InferenceServerClient) -> None:
    ones = np.ones((1, 16), dtype=np.int32)
    twice = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT0")]
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(ones, ones), outputs=twice)
    assert_error(error, "INVALID_ARGUMENT", "output 'OUTPUT0' already exists in request")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [*simple_inputs(ones, ones), infer_input("INPUT0", ones, "INT32")])
    assert_error(error, "INVALID_ARGUMENT", "input 'INPUT0' already exists in request")


def test_requests_that_do_not_fit_the_model(client: grpcclient.InferenceServerClient) -> None:
    good = np.ones((1, 16), dtype=np.int32)
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(np.ones((1, 15), np.int32), good))
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.value.message().startswith(
        "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]"
    )
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [infer_input("INPUT0", good.astype(np.float32), "FP32"),
                                infer_input("INPUT1", good, "INT32")])
    assert_error(error, "INVALID_ARGUMENT",
                 "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [infer_input("INPUT0", good, "INT32")])
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.value.message().startswith(
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'")
    assert "INPUT1" in error.value.message()
    with pytest.raises(InferenceServerException) as error:
        nine = np.ones((9, 16), np.int32)
        client.infer("simple", simple_inputs(nine, nine))
    assert_error(error, "INVALID_ARGUMENT",
                 "inference request batch-size must be <= 8 for 'simple'")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(good, good),
                     outputs=[grpcclient.InferRequestedOutput("NOPE")])
    assert_error(error, "INVALID_ARGUMENT", "unexpected inference output 'NOPE' for model 'simple'")


def test_backend_failure(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.infer("failing", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])
    assert_error(error, "INVALID_ARGUMENT", "testing backend: failure requested")


def test_the_messages_tritons_client_examples_wait_for(stub: Any) -> None:
    # As grpc_explicit_int_content_client.py and grpc_explicit_int8_content_client.py do:
    # typed contents, then a version string that is no number, then a raw entry for one
    # input while its typed contents stay (the raw entries are not counted first).
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name, values in (("INPUT0", range(16)), ("INPUT1", [1] * 16)):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16]).contents.int_contents[
            :] = values
    response = stub.ModelInfer(request)
    assert np.frombuffer(response.raw_output_contents[0], "<i4").tolist() == list(range(1, 17))
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    request.model_version = "wrong_specification"
    with pytest.raises(grpc.RpcError) as error:
        stub.ModelInfer(request)
    assert (error.value.code(), error.value.details()) == (invalid, (
        "failed to get model version from specified version string 'wrong_specification' "
        "(details: stol), version should be an integral value > 0"))
    request.model_version = "-1"
    assert_rpc_error(stub.ModelInfer, request, invalid,
                     "invalid model version specified '-1' , version should be an integral "
                     "value > 0")
    request.model_version = ""
    request.raw_input_contents.extend([np.arange(8, dtype="<i8").tobytes()])
    request.inputs[0].contents.int_contents[:] = range(8, 16)
    with pytest.raises(grpc.RpcError) as error:
        stub.ModelInfer(request)
    assert (error.value.code(), error.value.details()) == (invalid, (
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for "
        "model 'simple'"))
    for call, message in ((stub.ModelMetadata, service_pb2.ModelMetadataRequest),
                          (stub.ModelConfig, service_pb2.ModelConfigRequest)):
        assert_rpc_error(call, message(name="simple", version="x1"), invalid,
                         "failed to get model version from specified version string 'x1'")


def test_malformed_requests_are_invalid_arguments(stub: Any) -> None:
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    short = [np.arange(16, dtype="<i4").tobytes(), b"\x00" * 60]
    assert_rpc_error(stub.ModelInfer, raw_request(raw_input_contents=short), invalid,
                     "tensor 'INPUT1' of datatype INT32 and shape [1, 16] needs 64 bytes, "
                     "received 60")
    one = [np.arange(16, dtype="<i4").tobytes()]
    assert_rpc_error(stub.ModelInfer, raw_request(raw_input_contents=one), invalid,
                     "expected 2 raw_input_contents (one per input, in input order) for model "
                     "'simple', got 1")

    both = raw_request()
    both.inputs[0].contents.int_contents.extend(range(16))
    assert_rpc_error(stub.ModelInfer, both, invalid,
                     "contents field must not be specified when using raw_input_contents for "
                     "'INPUT0' for model 'simple'")

    no_data = service_pb2.ModelInferRequest(model_name="simple")
    no_data.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    assert_rpc_error(stub.ModelInfer, no_data, invalid,
                     "unable to find data for input tensor 'INPUT0' for model 'simple' in request.")

    unknown_type = raw_request()
    unknown_type.inputs[1].datatype = "INT128"
    assert_rpc_error(stub.ModelInfer, unknown_type, invalid,
                     "input 'INPUT1' for model 'simple' has unknown datatype 'INT128'")

    negative = raw_request()
    del negative.inputs[0].shape[:]
    negative.inputs[0].shape.extend([-1, 16])
    assert_rpc_error(stub.ModelInfer, negative, invalid, "negative dimension")

    huge = raw_request()
    del huge.inputs[0].shape[:]
    huge.inputs[0].shape.extend([2**31, 2**31, 2**31])
    assert_rpc_error(stub.ModelInfer, huge, invalid, "has too many elements")

    wide = raw_request()
    del wide.inputs[0].shape[:]
    wide.inputs[0].shape.extend([1, 2**40])
    assert_rpc_error(stub.ModelInfer, wide, invalid, "needs 4398046511104 bytes, received 64")

    typed_mismatch = service_pb2.ModelInferRequest(model_name="echo_typed")
    typed_mismatch.inputs.add(name="IN_INT8", datatype="INT8", shape=[1])
    typed_mismatch.inputs[0].contents.fp32_contents.append(1.0)
    assert_rpc_error(stub.ModelInfer, typed_mismatch, invalid,
                     "unexpected explicit tensor data for input tensor 'IN_INT8'")

    out_of_range = service_pb2.ModelInferRequest(model_name="echo_typed")
    out_of_range.inputs.add(name="IN_INT8", datatype="INT8", shape=[1])
    out_of_range.inputs[0].contents.int_contents.append(300)
    assert_rpc_error(stub.ModelInfer, out_of_range, invalid, "outside the range of INT8")

    miscounted = service_pb2.ModelInferRequest(model_name="echo_typed")
    miscounted.inputs.add(name="IN_INT32", datatype="INT32", shape=[4])
    miscounted.inputs[0].contents.int_contents.extend([1, 2, 3])
    assert_rpc_error(stub.ModelInfer, miscounted, invalid,
                     "has 3 values in int_contents but its shape [4] holds 4")

    truncated_bytes = service_pb2.ModelInferRequest(model_name="echo_bf16")
    truncated_bytes.inputs.add(name="IN_BYTES", datatype="BYTES", shape=[1])
    truncated_bytes.raw_input_contents.append(b"\x05\x00\x00\x00abc")
    assert_rpc_error(stub.ModelInfer, truncated_bytes, invalid, "BYTES data is truncated")


def test_undecodable_messages_are_invalid_arguments(server: ServerHandle) -> None:
    garbage = b"\x0b\xff"  # field 1 with wire type 3, which no message here uses
    with grpc.insecure_channel(server.grpc_url) as channel:
        for method in ("ModelMetadata", "ModelInfer", "RepositoryModelLoad"):
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
            with pytest.raises(grpc.RpcError) as error:
                call(garbage)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert error.value.details().startswith("malformed "), error.value.details()
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        (reply,) = list(stream(iter([garbage])))
        response = service_pb2.ModelStreamInferResponse.FromString(reply)
        assert response.error_message.startswith("malformed ModelInferRequest")


def test_reserved_and_mistyped_parameters(stub: Any) -> None:
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    reserved = raw_request()
    reserved.parameters["triton_secret"].bool_param = True
    assert_rpc_error(stub.ModelInfer, reserved, invalid,
                     "parameter keys starting with 'triton_' are reserved for Triton usage")
    allowed = raw_request(id="allowed")
    allowed.parameters["triton_enable_empty_final_response"].bool_param = True
    assert stub.ModelInfer(allowed).id == "allowed"
    priority = raw_request()
    priority.parameters["priority"].string_param = "high"
    assert_rpc_error(stub.ModelInfer, priority, invalid,
                     "invalid value type for 'priority' parameter, expected int64_param or "
                     "uint64_param.")
    timeout = raw_request()
    timeout.parameters["timeout"].int64_param = -5
    assert_rpc_error(stub.ModelInfer, timeout, invalid,
                     "invalid value for 'timeout', expected value >= 0.")
    empty = raw_request()
    empty.parameters["custom"].SetInParent()
    assert_rpc_error(stub.ModelInfer, empty, invalid, "parameter 'custom' has no value")


def test_a_shared_memory_reference_needs_its_size(stub: Any) -> None:
    # Shared memory is implemented (tests/e2e/test_shared_memory.py): a region reference
    # without its size is the client's mistake.
    shared = raw_request()
    shared.inputs[0].parameters["shared_memory_region"].string_param = "region"
    assert_rpc_error(stub.ModelInfer, shared, grpc.StatusCode.INVALID_ARGUMENT,
                     "'shared_memory_byte_size' must be specified along with "
                     "'shared_memory_region'")


# ------------------------------------------------------------------------------- streaming


def test_stream_infer_in_order_with_a_failure(server: ServerHandle) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for index in range(6):
            if index == 3:
                client.async_stream_infer(
                    "failing", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")],
                    request_id="fails",
                )
            else:
                second = np.full((1, 16), index, dtype=np.int32)
                client.async_stream_infer("simple", simple_inputs(first, second),
                                          request_id=f"r{index}")
        received = [results.get(timeout=30) for _ in range(6)]
        client.stop_stream()
    for index, (result, error) in enumerate(received):
        if index == 3:
            assert result is None
            assert error.message() == "testing backend: failure requested"
            continue
        assert error is None
        response = result.get_response()
        assert response.id == f"r{index}"  # responses come back in request order
        assert response.parameters["triton_final_response"].bool_param is True
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + index)


def test_stream_requests_run_concurrently(server: ServerHandle) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    folder = server.log_path.parents[1]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for index in range(3):
            values = np.full(4, index, np.float32)
            client.async_stream_infer("slow3", [infer_input("INPUT0", values, "FP32")],
                                      request_id=str(index))
        # All three run at once, held on the model's three instances; one after another, the
        # second would not start before the first was let go.
        assert sorted(wait_started(folder / "slow3.started", 3, server)) == ["0", "1", "2"]
        (folder / "slow3.release").touch()
        received = [results.get(timeout=30) for _ in range(3)]
        # A request left in flight when the client cancels the stream harms nothing.
        client.async_stream_infer("slow3", [infer_input("INPUT0", values, "FP32")])
        client.stop_stream(cancel_requests=True)
    assert [result.get_response().id for result, _ in received] == ["0", "1", "2"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live()


def test_stream_errors_do_not_end_the_stream(server: ServerHandle) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    first = np.ones((1, 16), dtype=np.int32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("no_such_model", simple_inputs(first, first), request_id="a")
        client.async_stream_infer("simple", [infer_input("INPUT0", first, "INT32")],
                                  request_id="b")
        client.async_stream_infer("simple", simple_inputs(first, first), request_id="c")
        received = [results.get(timeout=30) for _ in range(3)]
        client.stop_stream()
    assert received[0][1].message() == "Request for unknown model: 'no_such_model' is not found"
    assert received[1][1].message().startswith(
        "[request id: b] expected 2 inputs but got 1 inputs")
    assert received[2][1] is None
    assert received[2][0].get_response().id == "c"


def test_stream_empty_final_response(server: ServerHandle) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    first = np.ones((1, 16), dtype=np.int32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("simple", simple_inputs(first, first), request_id="e",
                                  enable_empty_final_response=True)
        client.async_stream_infer("simple", simple_inputs(first, first), request_id="f")
        received = [results.get(timeout=30) for _ in range(2)]
        client.stop_stream()
    # As Triton: a model that is not decoupled answers once, that response final; the
    # empty final response is a decoupled model's (test_decoupled.py), so the next
    # response on the stream is the next request's.
    (data, data_error), (after, after_error) = received
    assert data_error is None and after_error is None
    assert data.get_response().id == "e"
    assert data.get_response().parameters["triton_final_response"].bool_param is True
    np.testing.assert_array_equal(data.as_numpy("OUTPUT0"), first * 2)
    assert after.get_response().id == "f"
    assert after.get_response().parameters["triton_final_response"].bool_param is True


# ------------------------------------------------------------------------------- aio client


def test_aio_client(server: ServerHandle) -> None:
    async def scenario() -> None:
        async with aiogrpcclient.InferenceServerClient(server.grpc_url) as client:
            assert await client.is_server_live()
            assert await client.is_model_ready("simple")
            first = np.arange(16, dtype=np.int32).reshape(1, 16)
            result = await client.infer("simple", simple_inputs(first, first), request_id="aio")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first * 2)
            assert result.get_response().id == "aio"

            async def requests() -> Any:
                for index in range(4):
                    second = np.full((1, 16), index, dtype=np.int32)
                    yield {"model_name": "simple", "inputs": simple_inputs(first, second),
                           "request_id": f"s{index}"}

            ids = []
            async for result, error in client.stream_infer(requests()):
                assert error is None
                ids.append(result.get_response().id)
                if len(ids) == 4:
                    break
            assert ids == ["s0", "s1", "s2", "s3"]
            with pytest.raises(InferenceServerException) as error:
                await client.get_model_metadata("no_such_model")
            assert error.value.status() == "StatusCode.NOT_FOUND"

    asyncio.run(scenario())


# ------------------------------------------------------------------------------- repository


def index_of(client: grpcclient.InferenceServerClient, name: str) -> list[dict[str, str]]:
    index = client.get_model_repository_index(as_json=True).get("models", [])
    return [entry for entry in index if entry["name"] == name]


def test_repository_index(client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    names = [entry["name"] for entry in index]
    assert names == sorted(names)
    assert {"name": "simple", "version": "1", "state": "READY"} in index

def test_repository_index_ready_only(stub: Any) -> None:
    everything = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest()).models
    ready = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models
    assert ready and all(entry.state == "READY" for entry in ready)
    assert len(ready) == len([entry for entry in everything if entry.state == "READY"])


def test_unload_and_load(client: grpcclient.InferenceServerClient) -> None:
    client.unload_model("reloadable")
    assert index_of(client, "reloadable") == [
        {"name": "reloadable", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    assert client.is_model_ready("reloadable") is False
    with pytest.raises(InferenceServerException) as error:
        client.infer("reloadable", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])
    assert_error(error, "NOT_FOUND",
                 "Request for unknown model: 'reloadable' has no available versions")
    client.unload_model("reloadable")  # unloading an unloaded model succeeds
    client.unload_model("no_such_model")  # and so does unloading an unknown one
    assert client.is_server_ready() is True
    with pytest.raises(InferenceServerException) as error:
        client.load_model("no_such_model")  # Triton's opening, then the real cause
    assert_error(error, "NOT_FOUND", "failed to load 'no_such_model': model 'no_such_model' "
                                     "is not in the model repository")

    client.load_model("reloadable")
    assert index_of(client, "reloadable") == [
        {"name": "reloadable", "version": "1", "state": "READY"}
    ]
    result = client.infer("reloadable", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones(4, np.float32))


def test_load_with_config_override(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("reloadable", as_json=True)["config"]
    config["parameters"]["mode"] = {"string_value": "fail"}
    client.load_model("reloadable", config=json.dumps(config))
    with pytest.raises(InferenceServerException) as error:
        client.infer("reloadable", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])
    assert_error(error, "INVALID_ARGUMENT", "testing backend: failure requested")
    client.load_model("reloadable")  # a plain load goes back to the repository's config
    client.infer("reloadable", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])


def test_load_with_file_override(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("identity_fp32", as_json=True)["config"]
    config["name"] = "identity_copy"
    config.pop("instance_group", None)
    model_file = (EXAMPLE_REPOSITORY / "identity_fp32" / "1" / "model.onnx").read_bytes()
    client.load_model("identity_copy", config=json.dumps(config),
                      files={"file:1/model.onnx": model_file})
    assert index_of(client, "identity_copy") == [
        {"name": "identity_copy", "version": "1", "state": "READY"}
    ]
    values = np.arange(5, dtype=np.float32)
    result = client.infer("identity_copy", [infer_input("INPUT0", values, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    client.unload_model("identity_copy")
    assert index_of(client, "identity_copy")[0]["state"] == "UNAVAILABLE"


def test_bad_loads(client: grpcclient.InferenceServerClient, stub: Any) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.load_model("no_such_model")
    assert error.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as error:
        client.load_model("reloadable", files={"file:1/model.onnx": b"x"})
    assert_error(error, "INVALID_ARGUMENT",
                 "failed to load 'reloadable': file overrides need a 'config' parameter too")
    with pytest.raises(InferenceServerException) as error:
        client.load_model("reloadable", config="{not json")
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    config = '{"name": "escape", "backend": "inferd_testing"}'
    with pytest.raises(InferenceServerException) as error:
        client.load_model("escape", config=config, files={"file:../../etc/x": b"x"})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must stay inside the model folder" in error.value.message()
    unknown = service_pb2.RepositoryModelLoadRequest(model_name="reloadable")
    unknown.parameters["colour"].string_param = "blue"
    assert_rpc_error(stub.RepositoryModelLoad, unknown, grpc.StatusCode.INVALID_ARGUMENT,
                     "unknown parameter 'colour' in the load request of model 'reloadable'")
    mistyped = service_pb2.RepositoryModelLoadRequest(model_name="reloadable")
    mistyped.parameters["config"].bytes_param = b"{}"
    assert_rpc_error(stub.RepositoryModelLoad, mistyped, grpc.StatusCode.INVALID_ARGUMENT,
                     "invalid value type for 'config' parameter, expected string_param.")
    # Nothing above changed what serves.
    assert client.is_model_ready("reloadable") is True
    assert client.is_server_ready() is True


# ------------------------------------------------------------------------------- own servers


def test_load_refused_in_none_mode(inferd: InferdHarness) -> None:
    root = inferd.repository(configs={"echo": inferd.testing_config("echo", "echo")})
    server = inferd.start(root)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as error:
                call("echo")
            assert_error(error, "UNAVAILABLE",
                         "explicit model load / unload is not allowed if polling is enabled")
        assert client.is_model_ready("echo") is True


def test_busy_port_stops_start_up(inferd: InferdHarness) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = inferd.launch(inferd.repository(), "--grpc-port", str(port))
        assert server.wait_exit(LIVE_TIMEOUT_SECS) == 1
    assert f"the gRPC frontend cannot listen on 127.0.0.1:{port}" in server.log()


def test_allow_grpc_false(inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository(), "--allow-grpc=false")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as error:
            client.is_server_live(client_timeout=2)
        assert error.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    log = server.log()
    assert "frontend kserve_http listening" in log  # the other frontends did start
    assert "frontend kserve_grpc listening" not in log
    assert "gRPC frontend listening" not in log


def test_shutdown_refuses_new_requests_and_finishes_in_flight(inferd: InferdHarness) -> None:
    started, release = inferd.folder / "slow.started", inferd.folder / "slow.release"
    slow = inferd.testing_config("slow", "slow", delay_ms="30000", started_file=str(started),
                                 release_file=str(release))
    server = inferd.start(inferd.repository(configs={"slow": slow}))
    outcome: dict[str, Any] = {}

    def in_flight() -> None:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("slow", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])
            outcome["result"] = result.as_numpy("OUTPUT0")

    thread = threading.Thread(target=in_flight)
    thread.start()
    wait_started(started, 1, server)  # the request is executing (held until released)
    server.process.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM received: shutting down" in server.log(), "the shutdown", server)
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as error,
    ):
        client.infer("slow", [infer_input("INPUT0", np.ones(4, np.float32), "FP32")])
    assert_error(error, "UNAVAILABLE", "server is shutting down")
    release.touch()
    thread.join(30)
    np.testing.assert_array_equal(outcome["result"], np.ones(4, np.float32))
    assert server.wait_exit(30) == 0
