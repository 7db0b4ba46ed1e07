"""Tests of inferd.protocols.kserve_http.infer: the KServe REST infer codec with the binary tensor
extension, the repository API bodies and the JSON of the other replies. No sockets."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inferd.protocols import json_bodies, logging_api, trace_api
from inferd.protocols.kserve_http import json_tensors
from inferd.protocols.kserve_http import infer as codec
from inferd.protocols.kserve_http import admin
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    Index,
    IndexEntry,
    InferResponse,
    LoadRequest,
    ModelMetadata,
    ServerMetadata,
    Statistics,
    Tensor,
    TensorSpec,
    UnloadRequest,
)
from inferd.protocols.tensors import DATATYPES, from_numpy, numpy_dtype, serialize_bytes

NUMERIC = [d for d in DATATYPES if d not in ("BYTES", "BF16")]
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)


def body_of(document: dict[str, Any], *buffers: bytes) -> tuple[bytes, int | None]:
    header = json.dumps(document).encode()
    if not buffers:
        return header, None
    return header + b"".join(buffers), len(header)


def decode(document: dict[str, Any], *buffers: bytes, limit: int = codec.DEFAULT_MAX_INPUT_SIZE
           ) -> Any:
    body, header_length = body_of(document, *buffers)
    return codec.decode_infer_request("m", "", body, header_length, limit)


def refused(document: dict[str, Any], *buffers: bytes, **kwargs: Any) -> str:
    with pytest.raises(InvalidArgument) as error:
        decode(document, *buffers, **kwargs)
    return error.value.message


def split_response(encoded: codec.EncodedResponse) -> tuple[dict[str, Any], bytes]:
    headers = dict(encoded.headers)
    body = b"".join(bytes(part) for part in encoded.parts)
    length = int(headers.get("inference-header-content-length", len(body)))
    return json.loads(body[:length]), body[length:]


# ------------------------------------------------------------------------ round trips


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(NUMERIC).flatmap(
    lambda datatype: hnp.arrays(numpy_dtype(datatype), shapes).map(lambda a: (datatype, a))))
def test_binary_inputs_round_trip(case: tuple[str, np.ndarray]) -> None:
    datatype, array = case
    raw = array.tobytes()
    request, encoding = decode(
        {"inputs": [{"name": "x", "datatype": datatype, "shape": list(array.shape),
                     "parameters": {"binary_data_size": len(raw)}}]}, raw)
    (tensor,) = request.inputs
    assert tensor.datatype == datatype and tensor.shape == array.shape
    np.testing.assert_array_equal(tensor.data, array)
    assert encoding == codec.OutputEncoding({}, False)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(NUMERIC).flatmap(
    lambda datatype: hnp.arrays(numpy_dtype(datatype), shapes,
                                elements={"allow_nan": False, "allow_infinity": False}
                                if numpy_dtype(datatype).kind == "f" else None)
    .map(lambda a: (datatype, a))),
    st.booleans())
def test_outputs_round_trip_in_either_encoding(case: tuple[str, np.ndarray], binary: bool) -> None:
    datatype, array = case
    response = InferResponse("m", "1", (from_numpy("y", array, datatype),), id="r")
    document, rest = split_response(
        codec.encode_infer_response(response, codec.OutputEncoding({"y": binary}))
    )
    (output,) = document["outputs"]
    assert (document["id"], document["model_name"], document["model_version"]) == ("r", "m", "1")
    assert output["shape"] == list(array.shape)
    if binary:
        assert output["parameters"] == {"binary_data_size": array.nbytes}
        got = np.frombuffer(rest, dtype=numpy_dtype(datatype)).reshape(array.shape)
    else:
        assert rest == b""
        got = np.array(output["data"], dtype=numpy_dtype(datatype)).reshape(array.shape)
    np.testing.assert_array_equal(got, array)
    # And what the server sends is what it would accept back.
    again, _ = decode({"inputs": [{"name": "y", "datatype": datatype, "shape": list(array.shape),
                                   "data": output["data"]}]} if not binary else
                      {"inputs": [{"name": "y", "datatype": datatype, "shape": list(array.shape),
                                   "parameters": output["parameters"]}]},
                      *([rest] if binary else []))
    np.testing.assert_array_equal(again.inputs[0].data, array)


@given(st.lists(st.text(), max_size=5))
def test_bytes_round_trip_as_json_and_binary(texts: list[str]) -> None:
    encoded = [text.encode("utf-8", errors="surrogatepass") for text in texts]
    request, _ = decode({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [len(texts)],
                                     "data": texts}]})
    assert request.inputs[0].data.tolist() == encoded
    raw = serialize_bytes(encoded)
    request, _ = decode({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [len(texts)],
                                     "parameters": {"binary_data_size": len(raw)}}]}, raw)
    assert request.inputs[0].data.tolist() == encoded


def test_request_fields_parameters_and_output_encoding() -> None:
    request, encoding = decode({
        "id": "abc",
        "parameters": {"priority": 2, "timeout": 500, "binary_data_output": True, "custom": "x",
                       "sequence_id": 7},
        "inputs": [{"name": "x", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}],
        "outputs": [{"name": "a", "parameters": {"binary_data": False}}, {"name": "b"}],
    })
    assert (request.model, request.version, request.id) == ("m", "", "abc")
    assert (request.priority, request.timeout_us) == (2, 500)
    assert request.parameters == {"custom": "x", "sequence_id": 7}
    assert request.outputs == ("a", "b")
    assert request.inputs[0].data.tolist() == [[1, 2], [3, 4]]
    assert encoding.is_binary("a") is False and encoding.is_binary("b") is False
    assert encoding.is_binary("unnamed") is True


def test_bf16_and_fp16_json() -> None:
    request, _ = decode({"inputs": [
        {"name": "h", "datatype": "FP16", "shape": [2], "data": [1.5, -2]},
        {"name": "b", "datatype": "BF16", "shape": [2], "data": [1.5, -2]},
    ]})
    half, brain = request.inputs
    assert half.data.dtype == np.float16 and half.data.tolist() == [1.5, -2.0]
    assert brain.data.dtype == np.uint16 and brain.data.tolist() == [0x3FC0, 0xC000]
    response = InferResponse("m", "1", (half, Tensor("b", "BF16", (2,), brain.data)))
    document, _ = split_response(codec.encode_infer_response(response, codec.OutputEncoding()))
    assert [o["data"] for o in document["outputs"]] == [[1.5, -2.0], [1.5, -2.0]]


def test_uint64_and_int64_extremes_stay_exact() -> None:
    request, _ = decode({"inputs": [
        {"name": "u", "datatype": "UINT64", "shape": [3], "data": [0, 1, 2**64 - 1]},
        {"name": "i", "datatype": "INT64", "shape": [2], "data": [-(2**63), 2**63 - 1]},
    ]})
    assert request.inputs[0].data.tolist() == [0, 1, 2**64 - 1]
    assert request.inputs[1].data.tolist() == [-(2**63), 2**63 - 1]


# --------------------------------------------------------------------------- refusals


def one_input(**fields: Any) -> dict[str, Any]:
    entry = {"name": "x", "datatype": "INT32", "shape": [2], "data": [1, 2]}
    entry.update(fields)
    return {"inputs": [{k: v for k, v in entry.items() if v is not None}]}


@pytest.mark.parametrize(("document", "message"), [
    (one_input(shape=[3]), "input 'x' has 2 elements in 'data' but its shape [3] needs 3"),
    (one_input(datatype="FP8"), "input 'x' has unknown datatype 'FP8'"),
    (one_input(shape=[-1, 2]), "tensor 'x' has a negative dimension in [-1, 2]"),
    (one_input(shape=[True]), "tensor 'x' has a non-integer dimension True"),
    (one_input(shape=[2**62, 2**62]), ("tensor 'x' shape [4611686018427387904, "
                                      "4611686018427387904] has too many elements")),
    (one_input(data=[True, False]), "input 'x' of datatype INT32 needs integers in 'data'"),
    (one_input(data=["1", "2"]), "input 'x' of datatype INT32 needs integers in 'data'"),
    (one_input(data=[-(2**31) - 1, 0]), "input 'x': value -2147483649 is out of range"),
    (one_input(datatype="BOOL", data=[1, 0]), "input 'x' of datatype BOOL needs true/false"),
    (one_input(datatype="BYTES", data=["a", 1]), "input 'x' of datatype BYTES needs strings"),
    (one_input(datatype="FP32", data=["a", "b"]), "input 'x' of datatype FP32 needs numbers"),
    (one_input(data=None), "Input must set only one of the following fields: 'data', "
                           "'binary_data_size' in 'parameters', 'shared_memory_region' in "
                           "'parameters'. But no field is set"),
    (one_input(name=None), "request input 0 has no 'name' string"),
    (one_input(extra=1), "unknown field 'extra' in input 'x'"),
    (one_input(parameters={"binary_data": True}), ("unknown field 'binary_data' in the "
                                                  "'parameters' of input 'x'")),
    ({"inputs": {}}, "the request 'inputs' must be an array, not an object"),
    ({"inputs": [], "parameters": []}, "the request 'parameters' must be a JSON object"),
    ({"inputs": [], "parameters": {"triton_x": 1}}, "parameter 'triton_x' is reserved"),
    ({"inputs": [], "parameters": {"timeout": 1.5}}, "parameter 'timeout' must be a non-negative"),
    ({"inputs": [], "parameters": {"binary_data_output": 1}}, ("parameter 'binary_data_output' "
                                                              "must be a boolean")),
    ({"inputs": [], "outputs": [{"name": "y", "parameters": {"shared_memory_region": "r"}}]},
     "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter "
     "for requested output 'y'"),
])
def test_malformed_requests_are_refused(document: dict[str, Any], message: str) -> None:
    assert refused(document).startswith(message)


def test_binary_sizes_and_header_length_are_checked() -> None:
    document = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [2],
                            "parameters": {"binary_data_size": 8}}]}
    assert refused(document, b"\0" * 7).startswith("input 'x' has binary_data_size 8 but only 7")
    assert refused(document, b"\0" * 9).startswith("the request body has 1 bytes after")
    document["inputs"][0]["parameters"]["binary_data_size"] = 4
    assert refused(document, b"\0" * 4) == "tensor 'x' of datatype INT32 and shape [2] needs 8 " \
                                           "bytes, received 4"
    with pytest.raises(InvalidArgument, match="must be a non-negative integer"):
        codec.parse_header_length("-1", 10)
    with pytest.raises(InvalidArgument, match="is 11 but the request body has only 10 bytes"):
        codec.parse_header_length("11", 10)
    assert codec.parse_header_length(" 10 ", 10) == 10
    assert codec.parse_header_length(None, 10) is None


def test_sizes_past_the_limit_are_refused_before_allocation() -> None:
    message = refused(one_input(shape=[1, 2**40]), limit=1024)
    assert message == ("input 'x' of shape [1, 1099511627776] and datatype INT32 needs "
                       "4398046511104 bytes, more than the maximum input size of 1024 bytes")
    assert "maximum input size" in refused(
        one_input(datatype="BYTES", shape=[2], data=["a" * 600, "b" * 600]), limit=1024)


def test_nesting_is_bounded() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidArgument, match="nesting deeper than 64 levels"):
        json_bodies.parse_json(('{"inputs": ' + deep + "}").encode(), "inference request")
    nested: Any = ["a"]
    for _ in range(70):
        nested = [nested]
    # The request's object, its 'inputs' array and the input's object hold 'data'.
    assert refused(one_input(datatype="BYTES", shape=[1], data=nested)) == (
        "malformed inference request: JSON nesting deeper than 64 levels")
    assert refused(one_input(shape=[1], data=json.loads(
        json.dumps(nested).replace('"a"', "1")))) == (
        "malformed inference request: JSON nesting deeper than 64 levels")
    # Data not parsed from a body is bounded by the tensor codec itself.
    with pytest.raises(InvalidArgument, match="'data' is nested deeper than 64 levels"):
        json_tensors.tensor_from_json("x", "BYTES", (1,), 1, nested, 1 << 20)


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(("decode_body", "message"), [
    (lambda: codec.decode_infer_request("m", "", b'{"inputs": ' + DEEP + b"}"),
     "malformed inference request"),
    (lambda: admin.decode_index_request(b'{"ready": ' + DEEP + b"}"),
     "malformed repository index request"),
    (lambda: admin.decode_load_request("m", b'{"parameters": ' + DEEP + b"}"),
     "malformed model load request"),
    (lambda: admin.decode_load_request("m", json.dumps(
        {"parameters": {"config": '{"input": ' + DEEP.decode() + "}"}}).encode()),
     "malformed load parameter 'config'"),
    (lambda: admin.decode_unload_request("m", DEEP), "malformed model unload request"),
    (lambda: admin.decode_shared_memory_register("r", b'{"key": ' + DEEP + b"}"),
     "malformed shared memory register request"),
    (lambda: logging_api.decode_http_request(b'{"log_info": ' + DEEP + b"}"),
     "malformed log settings request"),
    (lambda: trace_api.decode_http_update("m", b'{"trace_rate": ' + DEEP + b"}"),
     "failed to parse the trace setting request"),
], ids=["infer", "index", "load", "load-config", "unload", "shared-memory", "logging", "trace"])
def test_every_json_body_has_its_nesting_bounded(decode_body: Any, message: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        decode_body()
    assert error.value.message == f"{message}: JSON nesting deeper than 64 levels"


def test_non_utf8_bytes_cannot_be_json() -> None:
    blob = np.empty(1, dtype=object)
    blob[0] = b"\xff"
    response = InferResponse("m", "1", (Tensor("y", "BYTES", (1,), blob),))
    with pytest.raises(InvalidArgument, match="not UTF-8 text"):
        codec.encode_infer_response(response, codec.OutputEncoding())
    document, rest = split_response(
        codec.encode_infer_response(response, codec.OutputEncoding(default_binary=True)))
    assert rest == b"\x01\0\0\0\xff"
    assert document["outputs"][0]["parameters"] == {"binary_data_size": 5}


# ----------------------------------------------------------------------- other bodies


def test_repository_bodies() -> None:
    assert admin.decode_index_request(b"").ready_only is False
    assert admin.decode_index_request(b'{"ready": true}').ready_only is True
    with pytest.raises(InvalidArgument, match="unknown field 'x'"):
        admin.decode_index_request(b'{"x": 1}')
    assert admin.decode_load_request("m", b"") == LoadRequest("m")
    payload = base64.b64encode(b"\0weights").decode()
    load = admin.decode_load_request("m", json.dumps(
        {"parameters": {"config": '{"name": "m"}', "file:1/model.onnx": payload}}).encode())
    assert load == LoadRequest("m", '{"name": "m"}', {"1/model.onnx": b"\0weights"})
    with pytest.raises(InvalidArgument, match="is not valid base64"):
        admin.decode_load_request("m", b'{"parameters": {"file:1/a": "abc"}}')
    with pytest.raises(InvalidArgument, match="names no file"):
        admin.decode_load_request("m", b'{"parameters": {"file:": ""}}')
    assert admin.decode_unload_request("m", b"") == UnloadRequest("m")
    assert admin.decode_unload_request(
        "m", b'{"parameters": {"unload_dependents": true}}') == UnloadRequest("m", True)
    with pytest.raises(InvalidArgument, match="unknown unload parameter 'force'"):
        admin.decode_unload_request("m", b'{"parameters": {"force": true}}')


def test_reply_documents() -> None:
    assert json.loads(admin.encode_server_metadata(ServerMetadata("inferd", "1", ("a", "b")))) == {
        "name": "inferd", "version": "1", "extensions": ["a", "b"]}
    metadata = ModelMetadata("m", ("1", "2"), "onnxruntime_onnx",
                             (TensorSpec("x", "FP32", (-1, 3)),), (TensorSpec("y", "FP32", (3,)),))
    assert json.loads(admin.encode_model_metadata(metadata)) == {
        "name": "m", "versions": ["1", "2"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}]}
    index = Index((IndexEntry("never"), IndexEntry("ready", "1", "READY"),
                   IndexEntry("gone", "2", "UNAVAILABLE", "unloaded"),
                   IndexEntry("broken", "", "UNAVAILABLE", "bad config"),
                   IndexEntry("warned", "1", "READY", "", ("x is ignored",))))
    assert json.loads(admin.encode_index(index)) == [
        {"name": "never"},
        {"name": "ready", "version": "1", "state": "READY"},
        {"name": "gone", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "broken", "state": "UNAVAILABLE", "reason": "bad config"},
        {"name": "warned", "version": "1", "state": "READY", "warnings": ["x is ignored"]},
    ]
    unloaded = Index((IndexEntry("gone", "2", "UNAVAILABLE", "unloaded",
                                 memory={"loaded_resident_bytes": 7}),))
    assert json.loads(admin.encode_index(unloaded)) == [
        {"name": "gone", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded",
         "memory": {"loaded_resident_bytes": 7}}]
    stats = Statistics(({"name": "m", "version": "1", "inference_count": 3},))
    assert json.loads(admin.encode_statistics(stats)) == {"model_stats": [
        {"name": "m", "version": "1", "inference_count": 3}]}
    assert json.loads(json_bodies.encode_error('bad "x"')) == {"error": 'bad "x"'}
