"""The KServe v2 HTTP frontend end to end, through tritonclient.http (sync and aio) and, for
requests tritonclient would never send, raw ``http.client``.

One EXPLICIT-mode server serves most of the module, with every model but ``spare`` loaded at
start-up: the example ``simple`` and ``identity_fp32``, an ONNX Identity model with one input
per datatype onnxruntime's Python binding handles, and a testing-backend echo model for what
it does not (BF16, bytes that are not UTF-8). A second server with a small
``--http-max-input-size`` and a slow model covers the body limits and, in the last test of the
module, the shutdown. Tests that refuse to start a server start their own.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import signal
import socket
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, wait_for, wait_started

SMALL_LIMIT = 64 * 1024

# datatype -> ONNX element type; BF16 is not here: onnxruntime's Python binding has no
# bfloat16, so the testing backend covers it.
ONNX_DATATYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}
NUMPY_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16, "BYTES": np.object_,
}
BATCH_DIM_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension"
    " to be prepended to each input shape. If you want to specify the full shape including the"
    " batch dim in your input dims config, try setting max_batch_size to zero. See the model"
    " configuration docs for more info on max_batch_size."
)


def config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def tensors_config(datatypes: list[str]) -> str:
    inputs = ", ".join(
        f'{{ name: "IN_{d}" data_type: {config_type(d)} dims: [ -1 ] }}' for d in datatypes
    )
    outputs = ", ".join(
        f'{{ name: "OUT_{d}" data_type: {config_type(d)} dims: [ -1 ] }}' for d in datatypes
    )
    return f"max_batch_size: 0\ninput [ {inputs} ]\noutput [ {outputs} ]\n"


def identity_all_config() -> str:
    return 'name: "identity_all"\nbackend: "onnxruntime"\n' + tensors_config(list(ONNX_DATATYPES))


def identity_all_model() -> bytes:
    inputs, outputs, nodes = [], [], []
    for datatype, element_type in ONNX_DATATYPES.items():
        inputs.append(helper.make_tensor_value_info(f"IN_{datatype}", element_type, ["n"]))
        outputs.append(helper.make_tensor_value_info(f"OUT_{datatype}", element_type, ["n"]))
        nodes.append(helper.make_node("Identity", [f"IN_{datatype}"], [f"OUT_{datatype}"]))
    graph = helper.make_graph(nodes, "identity_all", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def echo_config(name: str, datatypes: list[str]) -> str:
    return (
        f'name: "{name}"\nbackend: "inferd_testing"\n' + tensors_config(datatypes)
        + 'parameters { key: "mode" value { string_value: "echo" } }\n'
    )



@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root = module_inferd.repository(
        "simple",
        "identity_fp32",
        configs={
            "echo_bf16": echo_config("echo_bf16", ["BF16", "BYTES"]),
            "spare": module_inferd.testing_config("spare", "echo"),
            "identity_all": identity_all_config(),
        },
    )
    (root / "identity_all" / "1" / "model.onnx").write_bytes(identity_all_model())
    loaded = ("simple", "identity_fp32", "echo_bf16", "identity_all")
    server = module_inferd.start(
        root, "--model-control-mode=explicit", *(f"--load-model={name}" for name in loaded)
    )
    return server


@pytest.fixture(scope="module")
def small_server(module_inferd: InferdHarness) -> ServerHandle:
    """A server that takes bodies of at most ``SMALL_LIMIT`` bytes and has a slow model."""
    root = module_inferd.repository(
        "identity_fp32",
        # Held until slow.release exists (the shutdown test lets it go).
        configs={"slow": module_inferd.testing_config(
            "slow", "slow", delay_ms="30000",
            started_file=str(module_inferd.folder / "slow.started"),
            release_file=str(module_inferd.folder / "slow.release"))},
    )
    server = module_inferd.start(root, f"--http-max-input-size={SMALL_LIMIT}")
    return server


@pytest.fixture
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    yield client
    client.close()


def raw(server: ServerHandle, method: str, path: str, body: Any = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request over a fresh connection: (status, lower-cased headers, body)."""
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {},
                           encode_chunked=not isinstance(body, (bytes, type(None))))
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def raw_error(server: ServerHandle, method: str, path: str, body: Any = None,
              headers: dict[str, str] | None = None) -> tuple[int, str]:
    status, _, content = raw(server, method, path, body, headers)
    return status, json.loads(content)["error"]


def infer_input(name: str, array: np.ndarray, datatype: str,
                binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def simple_inputs(rows: int = 2, binary: bool = True) -> list[httpclient.InferInput]:
    first = np.arange(rows * 16, dtype=np.int32).reshape(rows, 16)
    second = np.full((rows, 16), 3, dtype=np.int32)
    return [infer_input("INPUT0", first, "INT32", binary), infer_input("INPUT1", second, "INT32", binary)]


def assert_simple_result(result: Any, rows: int = 2) -> None:
    first = np.arange(rows * 16, dtype=np.int32).reshape(rows, 16)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + 3)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - 3)
    assert result.as_numpy("OUTPUT0").dtype == np.int32


ONE_OF_THE_FIELDS = ("Input must set only one of the following fields: 'data', "
                     "'binary_data_size' in 'parameters', 'shared_memory_region' in "
                     "'parameters'. But ")


def assert_error(error: pytest.ExceptionInfo[InferenceServerException], status: int,
                 message: str) -> None:
    assert error.value.status() == str(status)
    assert error.value.message() == message


def simple_json(**changes: Any) -> dict[str, Any]:
    """A valid all-JSON infer request body for ``simple``, with top-level changes."""
    request: dict[str, Any] = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        ]
    }
    request.update(changes)
    return request


def post_json(server: ServerHandle, path: str, document: Any,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return raw(server, "POST", path, json.dumps(document).encode(), headers)


# ------------------------------------------------------------------------------- health


def test_live_ready_and_server_metadata(client: httpclient.InferenceServerClient,
                                        server: ServerHandle) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    metadata = client.get_server_metadata()
    assert metadata["name"] == "inferd"
    assert isinstance(metadata["version"], str) and metadata["version"]
    assert "model_repository" in metadata["extensions"]
    for what in ("live", "ready"):
        assert raw(server, "GET", f"/v2/health/{what}")[0::2] == (200, b"")


def test_model_metadata_with_and_without_version(client: httpclient.InferenceServerClient) -> None:
    expected = {
        "name": "simple",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": f"INPUT{i}", "datatype": "INT32", "shape": [-1, 16]} for i in (0, 1)],
        "outputs": [{"name": f"OUTPUT{i}", "datatype": "INT32", "shape": [-1, 16]} for i in (0, 1)],
    }
    assert client.get_model_metadata("simple") == expected
    assert client.get_model_metadata("simple", "1") == expected
    with pytest.raises(InferenceServerException) as error:
        client.get_model_metadata("nope")
    assert_error(error, 404, "Request for unknown model: 'nope' is not found")
    with pytest.raises(InferenceServerException) as error:
        client.get_model_metadata("simple", "7")
    assert_error(error, 404, "Request for unknown model: 'simple' version 7 is not found")


def test_model_ready(client: httpclient.InferenceServerClient, server: ServerHandle) -> None:
    assert client.is_model_ready("simple") is True
    assert client.is_model_ready("simple", "1") is True
    assert client.is_model_ready("simple", "2") is False
    assert client.is_model_ready("nope") is False
    assert client.is_model_ready("spare") is False  # in the repository, never loaded
    assert raw_error(server, "GET", "/v2/models/nope/ready") == (400, "Model version not ready")
    assert raw(server, "GET", "/v2/models/simple/versions/1/ready")[0::2] == (200, b"")


def test_model_config_prints_dims_as_numbers(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple")
    assert config["name"] == "simple"
    assert config["max_batch_size"] == 8
    assert [tensor["dims"] for tensor in config["input"]] == [[16], [16]]
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert client.get_model_config("simple", "1") == config
    with pytest.raises(InferenceServerException) as error:
        client.get_model_config("nope")
    assert_error(error, 404, "Request for unknown model: 'nope' is not found")


def test_statistics_rise_after_inference(client: httpclient.InferenceServerClient) -> None:
    def simple_stats() -> dict[str, Any]:
        stats = client.get_inference_statistics("simple")["model_stats"]
        assert [(s["name"], s["version"]) for s in stats] == [("simple", "1")]
        return stats[0]  # type: ignore[no-any-return]

    before = simple_stats()
    client.infer("simple", simple_inputs(rows=3))
    after = simple_stats()
    assert after["inference_count"] == before["inference_count"] + 3
    assert after["execution_count"] == before["execution_count"] + 1
    success_before, success_after = before["inference_stats"], after["inference_stats"]
    assert success_after["success"]["count"] == success_before["success"]["count"] + 1
    assert success_after["success"]["ns"] > success_before["success"]["ns"]
    assert isinstance(success_after["compute_infer"]["ns"], int)
    assert client.get_inference_statistics("simple", "1")["model_stats"][0]["name"] == "simple"
    everything = client.get_inference_statistics()["model_stats"]
    assert {"simple", "identity_fp32", "identity_all"} <= {s["name"] for s in everything}
    with pytest.raises(InferenceServerException) as error:
        client.get_inference_statistics("nope")
    assert_error(error, 400, "requested model 'nope' is not available")


def test_statistics_carry_response_stats_and_memory_usage_as_grpc_does(
        server: ServerHandle, client: httpclient.InferenceServerClient) -> None:
    client.infer("simple", simple_inputs(rows=2))
    [stats] = client.get_inference_statistics("simple")["model_stats"]
    # Triton's keys in Triton's order; neither its python backend nor ours reports
    # per-response statistics or memory usage, so both are empty, as over gRPC.
    assert list(stats) == ["name", "version", "last_inference", "inference_count",
                           "execution_count", "inference_stats", "response_stats",
                           "batch_stats", "memory_usage"]
    assert (stats["response_stats"], stats["memory_usage"]) == ({}, [])
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        [over_grpc] = grpc.get_inference_statistics("simple").model_stats
    assert (dict(over_grpc.response_stats), list(over_grpc.memory_usage)) == ({}, [])
    assert over_grpc.inference_count == stats["inference_count"]
    assert [b.batch_size for b in over_grpc.batch_stats] == [
        b["batch_size"] for b in stats["batch_stats"]]


# ------------------------------------------------------------------------------ inference


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_simple_infer_exact_results(client: httpclient.InferenceServerClient, binary: bool) -> None:
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary) for i in (0, 1)]
    result = client.infer("simple", simple_inputs(binary=binary), outputs=outputs,
                          request_id="req-7")
    assert_simple_result(result)
    response = result.get_response()
    assert response["id"] == "req-7"
    assert (response["model_name"], response["model_version"]) == ("simple", "1")
    for output in response["outputs"]:
        assert ("data" in output) is not binary
        assert ("parameters" in output) is binary


def test_mixed_output_encodings_and_default_binary(client: httpclient.InferenceServerClient,
                                                   server: ServerHandle) -> None:
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = client.infer("simple", simple_inputs(binary=False), outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"),
                                  np.arange(32, dtype=np.int32).reshape(2, 16) - 3)
    # No outputs named: tritonclient asks for every output as binary data.
    result = client.infer("simple", simple_inputs(binary=True))
    assert_simple_result(result)
    assert all("binary_data_size" in o["parameters"] for o in result.get_response()["outputs"])
    # Raw JSON with no id and no binary anything: no id, JSON outputs, no header-length header.
    status, headers, body = post_json(server, "/v2/models/simple/infer", simple_json())
    assert status == 200 and "inference-header-content-length" not in headers
    document = json.loads(body)
    assert "id" not in document
    assert document["outputs"][0]["data"] == [v + 1 for v in range(16)]


def test_nested_json_data_and_request_parameters(server: ServerHandle) -> None:
    request = simple_json(id="nested", parameters={"custom": "yes", "priority": 1, "timeout": 10**7})
    request["inputs"][0]["data"] = [list(range(16))]
    status, _, body = post_json(server, "/v2/models/simple/versions/1/infer", request)
    assert status == 200, body
    document = json.loads(body)
    assert document["id"] == "nested"
    assert document["outputs"][1]["data"] == [v - 1 for v in range(16)]


def datatype_values(datatype: str, binary: bool) -> np.ndarray:
    if datatype == "BOOL":
        return np.array([True, False, True])
    if datatype == "BYTES":
        return np.array(["", "héllo wörld", "日本語 ✓", "plain"], dtype=np.object_)
    dtype = np.dtype(NUMPY_DTYPES[datatype])
    if dtype.kind == "f" or datatype == "BF16":
        values = [-1.5, 0.0, 2.25, 256.0]
        return np.array(values + ([np.inf] if binary else []), dtype=dtype)
    limits = np.iinfo(dtype)
    return np.array([limits.min, 0, 1, limits.max], dtype=dtype)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_every_onnx_datatype_round_trips(client: httpclient.InferenceServerClient,
                                         binary: bool) -> None:
    arrays = {datatype: datatype_values(datatype, binary) for datatype in ONNX_DATATYPES}
    inputs = [infer_input(f"IN_{d}", array, d, binary) for d, array in arrays.items()]
    outputs = [httpclient.InferRequestedOutput(f"OUT_{d}", binary_data=binary) for d in arrays]
    result = client.infer("identity_all", inputs, outputs=outputs)
    for datatype, array in arrays.items():
        output = result.as_numpy(f"OUT_{datatype}")
        if datatype == "BYTES":
            expected = [text.encode() for text in array]
            # tritonclient leaves JSON strings as str, binary elements as bytes.
            got = [item if isinstance(item, bytes) else item.encode() for item in output.tolist()]
            assert got == expected
        else:
            assert output.dtype == array.dtype, datatype
            np.testing.assert_array_equal(output, array)


@pytest.mark.parametrize("binary_output", [True, False], ids=["binary", "json"])
def test_bf16_and_arbitrary_bytes_round_trip(client: httpclient.InferenceServerClient,
                                             binary_output: bool) -> None:
    bf16 = np.array([1.0, -2.5, 3.140625, 0.0], dtype=ml_dtypes.bfloat16)
    blobs = np.array([b"", b"\x00\xff\xfe", "ü".encode(), b"x" * 1000], dtype=np.object_)
    outputs = [httpclient.InferRequestedOutput("OUT_BF16", binary_data=binary_output),
               httpclient.InferRequestedOutput("OUT_BYTES", binary_data=True)]
    # tritonclient sends BF16 only as binary data.
    result = client.infer("echo_bf16", [infer_input("IN_BF16", bf16, "BF16"),
                                        infer_input("IN_BYTES", blobs, "BYTES")], outputs=outputs)
    output = result.as_numpy("OUT_BF16")
    assert output.dtype == bf16.dtype
    np.testing.assert_array_equal(output.view(np.uint16), bf16.view(np.uint16))
    assert result.as_numpy("OUT_BYTES").tolist() == blobs.tolist()


def test_bytes_that_are_not_utf8_cannot_be_json(server: ServerHandle) -> None:
    blob = b"\xff\xfe"
    header = json.dumps({
        "inputs": [
            {"name": "IN_BF16", "datatype": "BF16", "shape": [0], "parameters": {"binary_data_size": 0}},
            {"name": "IN_BYTES", "datatype": "BYTES", "shape": [1],
             "parameters": {"binary_data_size": 4 + len(blob)}},
        ],
        "outputs": [{"name": "OUT_BYTES"}],
    }).encode()
    body = header + len(blob).to_bytes(4, "little") + blob
    status, message = raw_error(server, "POST", "/v2/models/echo_bf16/infer", body,
                                {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400
    assert message.startswith("output 'OUT_BYTES' holds bytes that are not UTF-8 text")


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tensor_over_one_mebibyte(client: httpclient.InferenceServerClient, binary: bool) -> None:
    values = np.random.default_rng(7).random(600_000, dtype=np.float32)  # 2.4 MB
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = client.infer("identity_fp32", [infer_input("INPUT0", values, "FP32", binary)],
                          outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


@pytest.mark.parametrize("request_coding", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_coding", [None, "gzip", "deflate"])
def test_compressed_requests_and_responses(client: httpclient.InferenceServerClient,
                                           request_coding: str | None,
                                           response_coding: str | None) -> None:
    result = client.infer("simple", simple_inputs(), request_compression_algorithm=request_coding,
                          response_compression_algorithm=response_coding)
    assert_simple_result(result)


def test_response_is_compressed_as_accepted(server: ServerHandle) -> None:
    body = json.dumps(simple_json()).encode()
    for accept, coding, decompress in (("gzip", "gzip", gzip.decompress),
                                       ("deflate;q=0.9, gzip;q=0.1", "deflate", zlib.decompress)):
        status, headers, content = raw(server, "POST", "/v2/models/simple/infer",
                                       gzip.compress(body),
                                       {"Content-Encoding": "gzip", "Accept-Encoding": accept})
        assert status == 200
        assert headers["content-encoding"] == coding
        assert json.loads(decompress(content))["outputs"][0]["data"] == [v + 1 for v in range(16)]
    status, headers, content = raw(server, "POST", "/v2/models/simple/infer", body,
                                   {"Accept-Encoding": "br"})
    assert status == 200 and "content-encoding" not in headers and json.loads(content)


def test_aio_client(server: ServerHandle) -> None:
    async def scenario() -> None:
        async with aiohttpclient.InferenceServerClient(server.http_url) as client:
            assert await client.is_server_live() is True
            assert await client.is_model_ready("simple") is True
            metadata = await client.get_model_metadata("simple")
            assert metadata["name"] == "simple"
            first = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = [aiohttpclient.InferInput("INPUT0", [1, 16], "INT32"),
                      aiohttpclient.InferInput("INPUT1", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(first)
            inputs[1].set_data_from_numpy(first * 2)
            results = await asyncio.gather(*(
                client.infer("simple", inputs, request_id=str(i),
                             response_compression_algorithm="gzip")
                for i in range(8)
            ))
            for i, result in enumerate(results):
                assert result.get_response()["id"] == str(i)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first * 3)
            with pytest.raises(InferenceServerException) as error:
                await client.infer("nope", inputs)
            assert_error(error, 404, "Request for unknown model: 'nope' is not found")

    asyncio.run(scenario())


# ------------------------------------------------------------------------- inference errors


def test_unknown_model_and_version(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.infer("nope", simple_inputs())
    assert_error(error, 404, "Request for unknown model: 'nope' is not found")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(), model_version="3")
    assert_error(error, 404, "Request for unknown model: 'simple' version 3 is not found")


def test_requests_that_do_not_fit_the_model(client: httpclient.InferenceServerClient) -> None:
    good = np.zeros((1, 16), dtype=np.int32)
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [infer_input("INPUT0", good[:, :15], "INT32"),
                                infer_input("INPUT1", good, "INT32")])
    assert_error(error, 400, "unexpected shape for input 'INPUT0' for model 'simple'. Expected"
                 " [-1,16], got [1,15]." + BATCH_DIM_NOTE)
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [infer_input("INPUT0", good.astype(np.float32), "FP32"),
                                infer_input("INPUT1", good, "INT32")])
    assert_error(error, 400,
                 "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [infer_input("INPUT0", good, "INT32", binary=False)])
    assert_error(error, 400, "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for"
                 " model 'simple'. Got input(s)"
                 " ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all"
                 " required input(s).")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(rows=9))
    assert_error(error, 400, "inference request batch-size must be <= 8 for 'simple'")
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", simple_inputs(), outputs=[httpclient.InferRequestedOutput("NOPE")])
    assert_error(error, 400, "unexpected inference output 'NOPE' for model 'simple'")


def binary_simple_body(header_changes: dict[str, Any] | None = None,
                       payload: bytes | None = None) -> tuple[bytes, bytes]:
    """A binary-data request for ``simple`` (header JSON, whole body)."""
    values = np.arange(16, dtype="<i4").tobytes()
    document: dict[str, Any] = {"inputs": [
        {"name": name, "datatype": "INT32", "shape": [1, 16],
         "parameters": {"binary_data_size": len(values)}}
        for name in ("INPUT0", "INPUT1")
    ]}
    document.update(header_changes or {})
    header = json.dumps(document).encode()
    return header, header + (values * 2 if payload is None else payload)


def post_binary(server: ServerHandle, body: bytes, header_length: Any,
                model: str = "simple") -> tuple[int, str]:
    return raw_error(server, "POST", f"/v2/models/{model}/infer", body,
                     {"Inference-Header-Content-Length": str(header_length)})


def test_binary_body_errors(server: ServerHandle) -> None:
    header, body = binary_simple_body()
    status, message = post_binary(server, body[:-10], len(header))
    assert status == 400
    assert message == ("input 'INPUT1' has binary_data_size 64 but only 54 bytes of binary data"
                       " remain in the request body (truncated body, or wrong"
                       " Inference-Header-Content-Length)")
    status, message = post_binary(server, body + b"junk", len(header))
    assert status == 400 and message.startswith("the request body has 4 bytes after the binary")
    status, message = post_binary(server, body, len(body) + 1)
    assert (status, message) == (400, (f"Inference-Header-Content-Length is {len(body) + 1} but"
                                      f" the request body has only {len(body)} bytes"))
    for bad in ("twelve", "-5", "1e3"):
        status, message = post_binary(server, body, bad)
        assert status == 400 and message.startswith("Inference-Header-Content-Length must be")
    status, message = post_binary(server, body, len(header) - 3)
    assert status == 400 and message.startswith("malformed inference request:")
    # A binary size that does not match the input's shape and datatype.
    short = json.loads(header)
    short["inputs"][0]["parameters"]["binary_data_size"] = 40
    short["inputs"][1]["parameters"]["binary_data_size"] = 64
    header = json.dumps(short).encode()
    status, message = post_binary(server, header + np.zeros(26, "<i4").tobytes(), len(header))
    assert (status, message) == (400, ("tensor 'INPUT0' of datatype INT32 and shape [1, 16] needs"
                                      " 64 bytes, received 40"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", ("malformed inference request: invalid JSON (Expecting property name"
                       " enclosed in double quotes: line 1 column 2 (char 1))")),
        (b"[]", "the inference request must be a JSON object, not an array"),
        (b'{"id": "\xff"}', "malformed inference request: not UTF-8 text"),
        (json.dumps(simple_json(inputs=None)).encode(), "the inference request has no 'inputs'"),
        (json.dumps(simple_json(extra=1)).encode(), "unknown field 'extra' in the inference request"),
        (json.dumps(simple_json(id=5)).encode(), "the request 'id' must be a string, not a number"),
        (json.dumps(simple_json(parameters={"triton_enable_empty_final_response": True})).encode(),
         ("parameter 'triton_enable_empty_final_response' is reserved for Triton usage and cannot"
         " be specified")),
        (json.dumps(simple_json(parameters={"custom": {"a": 1}})).encode(),
         ("parameter 'custom' has invalid type. It should be either 'int', 'bool', 'double' or"
         " 'string'.")),
        (json.dumps(simple_json(parameters={"priority": -1})).encode(),
         "parameter 'priority' must be a non-negative integer, got -1"),
        (json.dumps(simple_json(outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}])).encode(),
         "output 'OUTPUT0' already exists in request"),
        (json.dumps(simple_json(outputs=[{"name": "OUTPUT0",
                                          "parameters": {"classification": 2.5}}])).encode(),
         "'classification' of requested output 'OUTPUT0' must be a non-negative integer, got 2.5"),
    ],
    ids=["bad-json", "not-object", "not-utf8", "no-inputs", "unknown-field", "id-number",
         "triton-parameter", "parameter-type", "negative-priority", "output-twice",
         "classification"],
)
def test_malformed_json_requests(server: ServerHandle, body: bytes, message: str) -> None:
    status, error = raw_error(server, "POST", "/v2/models/simple/infer", body)
    assert status == 400
    assert error.startswith(message), error


def json_input(**changes: Any) -> dict[str, Any]:
    """``simple_json`` with INPUT0's fields changed."""
    request = simple_json()
    request["inputs"][0].update(changes)
    return request


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        (json_input(datatype="INT128"), "input 'INPUT0' has unknown datatype 'INT128'"),
        (json_input(shape=[1, -16]), "tensor 'INPUT0' has a negative dimension in [1, -16]"),
        (json_input(shape=[1, "16"]), "tensor 'INPUT0' has a non-integer dimension '16'"),
        (json_input(shape=[1, 2**40]), ("input 'INPUT0' of shape [1, 1099511627776] and datatype"
                                       " INT32 needs 4398046511104 bytes, more than the maximum"
                                       " input size of 67108864 bytes")),
        (json_input(shape=[2**62, 2**62]), ("tensor 'INPUT0' shape [4611686018427387904,"
                                           " 4611686018427387904] has too many elements")),
        (json_input(shape=[1, 15]), ("input 'INPUT0' has 16 elements in 'data' but its shape"
                                    " [1, 15] needs 15")),
        (json_input(data=[1.5] * 16), "input 'INPUT0' of datatype INT32 needs integers in 'data'"),
        (json_input(data=[2**31] + [0] * 15), ("input 'INPUT0': value 2147483648 is out of range"
                                              " for datatype INT32")),
        (json_input(data=[[1, 2], [3]]), "input 'INPUT0' 'data' is not a rectangular array"),
        (json_input(data=None), ONE_OF_THE_FIELDS + "no field is set"),
        (json_input(parameters={"binary_data_size": 64}),
         ONE_OF_THE_FIELDS + "set 'data' 'binary_data_size'"),
        (json_input(data=None, parameters={"shared_memory_region": "r"}),
         "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
         "parameter for input 'INPUT0'"),
    ],
    ids=["datatype", "negative-dim", "string-dim", "huge-dims", "overflowing-dims",
         "element-count", "float-for-int", "out-of-range", "ragged", "no-data",
         "data-and-binary", "shared-memory"],
)
def test_inputs_refused_before_allocation(server: ServerHandle, request_body: dict[str, Any],
                                          message: str) -> None:
    if request_body["inputs"][0].get("data", 0) is None:
        del request_body["inputs"][0]["data"]
    status, error = raw_error(server, "POST", "/v2/models/simple/infer",
                              json.dumps(request_body).encode())
    assert status == 400
    assert error.startswith(message), error


def test_deeply_nested_json_is_refused(server: ServerHandle) -> None:
    deep = b"[" * 50_000 + b"]" * 50_000
    body = b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": ' + deep + b"}]}"
    status, error = raw_error(server, "POST", "/v2/models/simple/infer", body)
    assert status == 400 and "nesting deeper than 64 levels" in error
    status, error = raw_error(server, "POST", "/v2/repository/index", b'{"ready": ' + b"[" * 250_000)
    assert status == 400 and "nesting deeper than 64 levels" in error
    nested: Any = [1]
    for _ in range(70):
        nested = [nested]
    # 71 levels of data in the request's three: refused as the body is parsed.
    too_deep = (400, "malformed inference request: JSON nesting deeper than 64 levels")
    assert raw_error(server, "POST", "/v2/models/simple/infer",
                     json.dumps(json_input(shape=[1], data=nested)).encode()) == too_deep
    bytes_request = json_input(datatype="BYTES", shape=[1], data=nested)
    bytes_request["inputs"][0]["data"] = json.loads(json.dumps(nested).replace("1", '"a"'))
    assert raw_error(server, "POST", "/v2/models/simple/infer",
                     json.dumps(bytes_request).encode()) == too_deep
    assert raw(server, "GET", "/v2/health/live")[0] == 200


def test_routes_and_methods(server: ServerHandle) -> None:
    for path in ("/v2/nothing", "/v2/models/simple/versions/x", "/v2/models/simple/infer/more",
                 "/v3", "/", "/v2/models/simple/versions/1/bogus"):
        assert raw_error(server, "GET", path) == (404, "Not Found"), path
    for method, path in (("POST", "/v2"), ("GET", "/v2/models/simple/infer"),
                         ("POST", "/v2/health/live"), ("GET", "/v2/repository/index"),
                         ("DELETE", "/v2/models/simple"), ("PUT", "/v2/repository/models/x/load")):
        assert raw_error(server, method, path) == (405, "Method Not Allowed"), (method, path)


def test_bad_content_encoding(server: ServerHandle) -> None:
    body = json.dumps(simple_json()).encode()
    assert raw_error(server, "POST", "/v2/models/simple/infer", body, {"Content-Encoding": "br"}) == (
        400, "unsupported Content-Encoding 'br' (use gzip, deflate or identity)")
    status, error = raw_error(server, "POST", "/v2/models/simple/infer", body,
                              {"Content-Encoding": "gzip"})
    assert status == 400 and error.startswith("the request body is not valid gzip data")
    status, error = raw_error(server, "POST", "/v2/models/simple/infer",
                              gzip.compress(body)[:-12], {"Content-Encoding": "gzip"})
    assert (status, error) == (400, "the gzip request body is truncated")


def test_huge_headers_are_refused(server: ServerHandle) -> None:
    status, error = raw_error(server, "GET", "/v2/health/live", headers={"X-Big": "a" * 200_000})
    assert status == 400 and "headers are larger than" in error
    assert raw(server, "GET", "/v2/health/live")[0] == 200


# ------------------------------------------------------------------------- repository API


def index_rows(client: httpclient.InferenceServerClient, name: str) -> list[dict[str, Any]]:
    return [row for row in client.get_model_repository_index() if row["name"] == name]


def test_repository_index(client: httpclient.InferenceServerClient, server: ServerHandle) -> None:
    index = client.get_model_repository_index()
    assert {"name": "simple", "version": "1", "state": "READY"} in index
    assert {"name": "spare"} in index  # never loaded (yet): the name only
    status, _, body = post_json(server, "/v2/repository/index", {"ready": True})
    assert status == 200
    assert all(row["state"] == "READY" for row in json.loads(body))
    assert raw_error(server, "POST", "/v2/repository/index", b'{"ready": "yes"}') == (
        400, "'ready' must be a boolean, not a string")


def test_load_with_config_override_and_unload(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("identity_fp32")
    config["name"] = "spare"
    config["backend"] = "inferd_testing"
    config["platform"] = ""
    config["parameters"] = {"mode": {"string_value": "echo"}}
    config["input"][0]["dims"] = [3]
    config["output"][0]["dims"] = [3]
    client.load_model("spare", config=json.dumps(config))
    assert index_rows(client, "spare") == [{"name": "spare", "version": "1", "state": "READY"}]
    assert client.get_model_metadata("spare")["inputs"][0]["shape"] == [3]
    values = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    result = client.infer("spare", [infer_input("INPUT0", values, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)

    client.unload_model("spare")
    # Triton's keys, and inferd's ``memory``: what the unload gave back (docs/memory.md).
    assert [{key: value for key, value in row.items() if key != "memory"}
            for row in index_rows(client, "spare")] == [
        {"name": "spare", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    assert client.is_model_ready("spare") is False
    client.unload_model("spare", unload_dependents=True)  # unloading again succeeds
    client.unload_model("never-heard-of")


def test_load_with_files(client: httpclient.InferenceServerClient) -> None:
    onnx_bytes = (Path(__file__).resolve().parents[2] / "model_repository" / "identity_fp32" / "1"
                  / "model.onnx").read_bytes()
    config = {
        "name": "uploaded", "backend": "onnxruntime", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    }
    client.load_model("uploaded", config=json.dumps(config),
                      files={"file:1/model.onnx": onnx_bytes})
    assert index_rows(client, "uploaded") == [{"name": "uploaded", "version": "1", "state": "READY"}]
    values = np.array([4.0, 5.0], dtype=np.float32)
    result = client.infer("uploaded", [infer_input("INPUT0", values, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    client.unload_model("uploaded")
    assert client.is_model_ready("uploaded") is False


def test_load_errors(client: httpclient.InferenceServerClient, server: ServerHandle) -> None:
    path = "/v2/repository/models/simple/load"
    assert raw_error(server, "POST", path, b'{"parameters": {"file:1/model.onnx": "%%%"}}') == (
        400, "load parameter 'file:1/model.onnx' is not valid base64")
    assert raw_error(server, "POST", path, b'{"parameters": {"colour": "red"}}') == (
        400, "unknown load parameter 'colour' (expected 'config', 'versions' or "
             "'file:<version>/<path>')")
    status, error = raw_error(server, "POST", path, b"{oops")
    assert status == 400 and error.startswith("malformed model load request:")
    assert raw_error(server, "POST", path, b'{"parameters": {"file:1/model.onnx": "AAAA"}}') == (
        400, "failed to load 'simple': file overrides need a 'config' parameter too")
    status, error = raw_error(server, "POST", path, json.dumps(
        {"parameters": {"config": "{}", "file:../../escape": "AAAA"}}).encode())
    assert status == 400 and "must stay inside the model folder" in error
    status, error = raw_error(server, "POST", path, json.dumps(
        {"parameters": {"config": "{not json"}}).encode())
    assert (status, error) == (400, "failed to load 'simple': model 'simple': config "
                                    "override is not valid JSON: Expecting property name enclosed in double quotes: "
                                    "line 1 column 2 (char 1)")
    with pytest.raises(InferenceServerException) as exc:
        client.load_model("no-such-model")
    # Triton's opening, which its client examples (simple_http_model_control.py) match on.
    assert exc.value.status() == "404", exc.value.message()
    assert exc.value.message() == ("failed to load 'no-such-model': model 'no-such-model' is "
                                   "not in the model repository")
    assert raw_error(server, "POST", "/v2/repository/models/simple/unload",
                     b'{"parameters": {"unload_dependents": 1}}') == (
        400, "unload parameter 'unload_dependents' must be a boolean, not a number")
    # None of this disturbed what serves.
    assert_simple_result(client.infer("simple", simple_inputs()))


# -------------------------------------------------------------------- limits and lifecycle


def test_bodies_over_the_limit(small_server: ServerHandle) -> None:
    path = "/v2/models/identity_fp32/infer"
    limit_message = (f"the request body of {SMALL_LIMIT + 1} bytes is larger than the maximum"
                     f" input size of {SMALL_LIMIT} bytes (--http-max-input-size)")
    assert raw_error(small_server, "POST", path, b"x" * (SMALL_LIMIT + 1)) == (400, limit_message)

    def chunks() -> Iterator[bytes]:
        for _ in range(20):
            yield b" " * 8192

    status, error = raw_error(small_server, "POST", path, chunks())
    assert (status, error) == (400, (f"the request body is larger than the maximum input size of"
                                     f" {SMALL_LIMIT} bytes (--http-max-input-size)"))
    bomb = gzip.compress(b" " * (4 * 1024 * 1024))
    assert len(bomb) < SMALL_LIMIT
    assert raw_error(small_server, "POST", path, bomb, {"Content-Encoding": "gzip"}) == (
        400, (f"the request body decompresses to more than the maximum input size of"
             f" {SMALL_LIMIT} bytes"))
    # A JSON input whose values would expand past the limit, in a body under it.
    request = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [20_000],
                           "data": [0] * 20_000}]}
    status, error = raw_error(small_server, "POST", path, json.dumps(request).encode())
    assert (status, error) == (400, ("input 'INPUT0' of shape [20000] and datatype FP32 needs 80000"
                                    f" bytes, more than the maximum input size of {SMALL_LIMIT} bytes"))
    values = np.ones(1000, dtype=np.float32)
    with httpclient.InferenceServerClient(small_server.http_url) as client:
        result = client.infer("identity_fp32", [infer_input("INPUT0", values, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_busy_port_and_disabled_frontend(inferd: InferdHarness, server: ServerHandle) -> None:
    empty = inferd.repository()
    busy = inferd.launch(empty, f"--http-port={server.ports['http']}")
    busy.clean_exit = False
    assert busy.wait_exit(60) == 1
    assert "cannot bind" in busy.log() and "HTTP frontend" in busy.log()

    quiet = inferd.start(empty, "--allow-http=false")
    with quiet.client() as native:
        assert native.is_live()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", quiet.ports["http"]), 2):
        pass


def test_shutdown_refuses_new_requests_and_finishes_in_flight(small_server: ServerHandle) -> None:
    """Must stay the last test of the module: it stops ``small_server``."""
    values = np.ones(4, dtype=np.float32)
    outcome: dict[str, Any] = {}

    def slow_request() -> None:
        with httpclient.InferenceServerClient(small_server.http_url, network_timeout=60) as client:
            try:
                outcome["result"] = client.infer("slow", [infer_input("INPUT0", values, "FP32")])
            except Exception as error:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = error

    def refusal() -> tuple[int, str] | None:
        try:
            return raw_error(small_server, "GET", "/v2/health/live")
        except (ConnectionError, json.JSONDecodeError):
            return None

    folder = small_server.log_path.parents[1]
    worker = threading.Thread(target=slow_request)
    worker.start()
    wait_started(folder / "slow.started", 1, small_server)  # running, held until released
    small_server.process.send_signal(signal.SIGTERM)
    refused = wait_for(refusal, "a refusal while shutting down", small_server)
    (folder / "slow.release").touch()
    worker.join(30)
    assert refused == (503, "server is shutting down")
    assert "error" not in outcome, outcome.get("error")
    np.testing.assert_array_equal(outcome["result"].as_numpy("OUTPUT0"), values)
    assert small_server.wait_exit(30) == 0
