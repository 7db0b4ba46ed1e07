"""Property tests that fuzz the request decoders with hostile input (issue 13, point 6): the
kernel wire codec (protocols/wire/codec.py), the KServe HTTP JSON and binary-tensor codec and the
other HTTP bodies (protocols/kserve_http/infer.py, protocols/kserve_http/admin.py, generate.py,
logging_api.py, trace_api.py), and the gRPC framing and conversion
(protocols/kserve_grpc/framing.py, protocols/kserve_grpc/infer.py, protocols/kserve_grpc/inputs.py,
protocols/kserve_grpc/admin.py).

Each decoder gets structured near-valid input (right shapes of documents with wrong types,
wrong sizes, huge or negative dimensions, unknown names, truncated or padded tensor bytes) as
well as raw bytes, and must answer with ``InvalidArgument`` (or, for a trace file,
``Unsupported``) and nothing else; what it accepts must be consistent (each tensor's bytes
are its shape's). test_wire.py, test_kserve_grpc_wire.py and test_kserve_http_codec.py hold
the round trips and the corrupted-header cases; nothing here repeats them.
``INFERD_FUZZ_EXAMPLES`` (default 150) sets the examples per test, for longer runs.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import msgpack
import numpy as np
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from inferd.protocols.kserve_http import generate
from inferd.protocols import logging_api, trace_api
from inferd.protocols.kserve_grpc import infer as grpc_convert
from inferd.protocols.kserve_grpc import admin as grpc_admin
from inferd.protocols.kserve_grpc import framing as grpc_wire
from inferd.protocols.kserve_http import infer as http_codec
from inferd.protocols.kserve_http import admin
from inferd.protocols.errors import InvalidArgument, Unsupported
from inferd.protocols.messages import (
    InferRequest,
    ModelMetadata,
    SharedMemoryInferRequest,
    Tensor,
    TensorSpec,
)
from inferd.protocols.wire.codec import VERSION, decode

EXAMPLES = int(os.environ.get("INFERD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMIT = 1 << 16  # a small --http-max-input-size, so the size checks are reached often
DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "BF16", "FP32", "FP64", "BYTES"]

names = st.sampled_from(["INPUT0", "INPUT1", "x", "", "OUTPUT0"]) | st.text(max_size=6)
datatypes = st.sampled_from(DATATYPES) | st.text(max_size=6)
dimensions = st.one_of(st.integers(-2, 20), st.sampled_from([2**31, 2**40, 2**63 - 1, 2**64]))
shapes = st.lists(dimensions, max_size=4)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=True), st.text(max_size=8),
                    st.sampled_from(["NaN", "Infinity", "-Infinity"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                           max_leaves=40)
parameter_values = st.one_of(scalars, json_values)
parameter_keys = st.sampled_from([
    "binary_data_size", "binary_data", "binary_data_output", "classification",
    "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset", "priority",
    "timeout", "sequence_id", "sequence_start", "triton_x", "other",
])
parameter_maps = st.dictionaries(parameter_keys, parameter_values, max_size=3)


def allowed(error: Exception) -> bool:
    return isinstance(error, (InvalidArgument, Unsupported))


@st.composite
def tensor_data(draw: st.DrawFn, shape: list[int]) -> Any:
    """Values that fit the shape when it is small and valid, anything otherwise."""
    if all(0 <= d <= 6 for d in shape) and draw(st.booleans()):
        count = math.prod(shape) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        element = draw(st.sampled_from([st.integers(-300, 300), st.floats(width=32),
                                        st.booleans(), st.text(max_size=3), scalars]))
        values = draw(st.lists(element, min_size=max(count, 0), max_size=max(count, 0)))
        return values if draw(st.booleans()) or len(shape) < 2 else [values]
    return draw(json_values)


@st.composite
def well_formed_input(draw: st.DrawFn) -> dict[str, Any]:
    """An input entry a model could take: values of its datatype, as many as its shape says."""
    datatype = draw(st.sampled_from(DATATYPES))
    shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    element = (st.booleans() if datatype == "BOOL"
               else st.text(max_size=4) if datatype == "BYTES"
               else st.integers(0, 100) if datatype[0] in "UI"
               else st.floats(-1e3, 1e3, width=32))
    count = math.prod(shape)
    return {"name": draw(names), "shape": shape, "datatype": datatype,
            "data": draw(st.lists(element, min_size=count, max_size=count))}


@st.composite
def http_infer_bodies(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """An infer body (JSON header, maybe followed by tensor bytes) and the header-length
    header a client might send with it: well-formed inputs with one thing changed, or
    inputs with anything anywhere."""
    inputs = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            entry = draw(well_formed_input())
            if draw(st.booleans()):
                entry[draw(st.sampled_from(["shape", "datatype", "data", "parameters"]))] = (
                    draw(json_values))
            inputs.append(entry)
            continue
        shape = draw(shapes)
        entry = {"name": draw(names), "shape": shape, "datatype": draw(datatypes)}
        if draw(st.booleans()):
            entry["data"] = draw(tensor_data(shape))
        if draw(st.booleans()):
            entry["parameters"] = draw(parameter_maps)
            if draw(st.booleans()):
                entry["parameters"]["binary_data_size"] = draw(st.integers(-1, 400))
        if draw(st.integers(0, 9)) == 0:
            entry[draw(st.text(max_size=5))] = draw(scalars)
        if draw(st.integers(0, 9)) == 0:
            del entry[draw(st.sampled_from(["name", "shape", "datatype"]))]
        inputs.append(entry)
    document: dict[str, Any] = {"inputs": inputs}
    if draw(st.integers(0, 3)) == 0:
        document["outputs"] = draw(st.lists(
            st.fixed_dictionaries({"name": names}, optional={"parameters": parameter_maps}),
            max_size=3))
    if draw(st.integers(0, 3)) == 0:
        document["parameters"] = draw(parameter_maps)
    if draw(st.booleans()):
        document["id"] = draw(st.text(max_size=4) | scalars)
    if draw(st.integers(0, 9)) == 0:
        document = draw(json_values)
    header = json.dumps(document, allow_nan=True).encode()
    if draw(st.integers(0, 2)):
        return header, None  # plain JSON, the usual case
    tail = draw(st.binary(max_size=400))
    length = draw(st.one_of(st.just(str(len(header))), st.integers(0, len(header) + 500).map(str),
                            st.text(max_size=4)))
    return header + tail, length


def check_accepted(request: InferRequest | SharedMemoryInferRequest) -> None:
    if currently_in_test_context():  # --hypothesis-show-statistics: how often they get past
        event("accepted")
    inner = request.request if isinstance(request, SharedMemoryInferRequest) else request
    for tensor in inner.inputs:
        assert isinstance(tensor, Tensor)
        assert all(d >= 0 for d in tensor.shape)
        if tensor.datatype != "BYTES":
            assert tensor.data.size == math.prod(tensor.shape)
            assert tensor.data.nbytes <= LIMIT


# ------------------------------------------------------------------ kernel wire codec


msgpack_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
              st.text(max_size=8), st.binary(max_size=8)),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(
        st.text(max_size=6) | st.integers(-5, 5), inner, max_size=4),
    max_leaves=30)


@FUZZ
@given(st.lists(msgpack_values, min_size=0, max_size=10),
       st.lists(st.binary(max_size=64), max_size=4))
def test_wire_headers_of_any_msgpack_raise_only_invalid_argument(
        fields: list[Any], buffers: list[bytes]) -> None:
    """Headers that msgpack parses: an envelope of the right length with fields of any type,
    then any tensor frames."""
    header = msgpack.packb(fields, use_bin_type=True)
    try:
        decode([VERSION, header, *buffers])
    except Exception as error:  # noqa: BLE001 - the property is about which ones
        assert isinstance(error, InvalidArgument), repr(error)


@FUZZ
@given(st.lists(st.binary(max_size=80), max_size=6))
def test_wire_frames_of_any_bytes_raise_only_invalid_argument(frames: list[bytes]) -> None:
    try:
        decode(frames)
    except Exception as error:  # noqa: BLE001
        assert isinstance(error, InvalidArgument), repr(error)


# ------------------------------------------------------------------ KServe HTTP bodies


@FUZZ
@given(http_infer_bodies())
def test_http_infer_bodies_raise_only_invalid_argument(case: tuple[bytes, str | None]) -> None:
    body, length_header = case
    try:
        length = http_codec.parse_header_length(length_header, len(body))
        request, _ = http_codec.decode_infer_request("m", "", body, length, LIMIT)
    except Exception as error:  # noqa: BLE001
        assert allowed(error), repr(error)
        return
    check_accepted(request)


@FUZZ
@given(st.binary(max_size=300), st.data())
def test_http_infer_bodies_of_any_bytes_raise_only_invalid_argument(
        body: bytes, data: st.DataObject) -> None:
    length = data.draw(st.none() | st.integers(0, len(body)))
    try:
        request, _ = http_codec.decode_infer_request("m", "1", body, length, LIMIT)
    except Exception as error:  # noqa: BLE001
        assert allowed(error), repr(error)
        return
    check_accepted(request)


generate_metadata = ModelMetadata("m", ("1",), "python", (
    TensorSpec("text", "BYTES", (-1,)), TensorSpec("x", "FP32", (2, -1)),
    TensorSpec("n", "INT64", (1,))), (TensorSpec("y", "FP32", (-1,)),))


@FUZZ
@given(json_values | st.dictionaries(st.sampled_from(["text", "x", "n", "id", "parameters",
                                                      "other"]), json_values, max_size=5),
       st.sampled_from(["index", "load", "unload", "register", "logging", "trace", "generate"]))
def test_other_http_bodies_raise_only_client_errors(document: Any, decoder: str) -> None:
    body = json.dumps(document, allow_nan=True).encode()
    try:
        if decoder == "index":
            admin.decode_index_request(body)
        elif decoder == "load":
            admin.decode_load_request("m", json.dumps({"parameters": document}).encode())
        elif decoder == "unload":
            admin.decode_unload_request("m", json.dumps({"parameters": document}).encode())
        elif decoder == "register":
            admin.decode_shared_memory_register("r", body)
        elif decoder == "logging":
            logging_api.decode_http_request(body)
        elif decoder == "trace":
            trace_api.decode_http_update("m", body)
        else:
            generate.decode_generate_request("m", "", body, generate_metadata, LIMIT)
    except Exception as error:  # noqa: BLE001
        assert allowed(error), repr(error)


@FUZZ
@given(st.binary(max_size=200))
def test_http_bodies_of_any_bytes_raise_only_client_errors(body: bytes) -> None:
    for decode_body in (admin.decode_index_request,
                        lambda b: admin.decode_load_request("m", b),
                        lambda b: admin.decode_unload_request("m", b),
                        lambda b: admin.decode_shared_memory_register("r", b),
                        logging_api.decode_http_request,
                        lambda b: trace_api.decode_http_update("m", b),
                        lambda b: generate.decode_generate_request("m", "", b,
                                                                   generate_metadata, LIMIT)):
        try:
            decode_body(body)
        except Exception as error:  # noqa: BLE001
            assert allowed(error), repr(error)


# ------------------------------------------------------------------ gRPC


TYPED_FIELDS = ["bool_contents", "int_contents", "int64_contents", "uint_contents",
                "uint64_contents", "fp32_contents", "fp64_contents", "bytes_contents"]
FIELD_VALUES = {
    "bool_contents": st.booleans(), "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": st.integers(-(2**63), 2**63 - 1), "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1), "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(), "bytes_contents": st.binary(max_size=6),
}


def set_grpc_parameter(parameters: Any, key: str, draw: st.DrawFn) -> None:
    values = {"bool_param": st.booleans(), "int64_param": st.integers(-(2**63), 2**63 - 1),
              "string_param": st.text(max_size=6), "double_param": st.floats(),
              "uint64_param": st.integers(0, 2**64 - 1), "bytes_param": st.binary(max_size=8)}
    fields = parameters[key].DESCRIPTOR.fields_by_name  # the repository's lack some kinds
    kind = draw(st.sampled_from([k for k in values if k in fields] + ["none"]))
    if kind == "none":
        parameters[key].SetInParent()
    else:
        setattr(parameters[key], kind, draw(values[kind]))


@st.composite
def grpc_infer_requests(draw: st.DrawFn) -> tuple[bytes, service_pb2.ModelInferRequest]:
    request = service_pb2.ModelInferRequest(model_name="m", id=draw(st.text(max_size=4)))
    for key in draw(st.lists(parameter_keys, max_size=3, unique=True)):
        set_grpc_parameter(request.parameters, key, draw)
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        shape = draw(st.lists(st.integers(-2, 12) | st.sampled_from([2**40, 2**63 - 1]),
                              max_size=3))
        tensor = request.inputs.add(name=draw(names), datatype=draw(datatypes), shape=shape)
        for key in draw(st.lists(parameter_keys, max_size=2, unique=True)):
            set_grpc_parameter(tensor.parameters, key, draw)
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=120)))
        elif draw(st.booleans()):
            field = draw(st.sampled_from(TYPED_FIELDS))
            getattr(tensor.contents, field).extend(
                draw(st.lists(FIELD_VALUES[field], max_size=12)))
    if raw and draw(st.integers(0, 4)) == 0:
        request.raw_input_contents.append(draw(st.binary(max_size=20)))  # one too many
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(name=draw(names))
        for key in draw(st.lists(parameter_keys, max_size=2, unique=True)):
            set_grpc_parameter(output.parameters, key, draw)
    return request.SerializeToString(), request


@FUZZ
@given(grpc_infer_requests())
def test_grpc_infer_requests_raise_only_invalid_argument(
        case: tuple[bytes, service_pb2.ModelInferRequest]) -> None:
    """Through the server's own path: split the bytes, then convert the message."""
    data, _ = case
    parsed = grpc_wire.parse_infer_request(data)
    assert parsed.error == ""
    try:
        request = grpc_convert.decode_infer_request(parsed.header, parsed.raw_input_contents,
                                                    LIMIT)
    except Exception as error:  # noqa: BLE001
        assert isinstance(error, InvalidArgument), repr(error)
        return
    check_accepted(request)


@FUZZ
@given(grpc_infer_requests(), st.data())
def test_grpc_corrupted_bytes_are_reported_never_raised(
        case: tuple[bytes, service_pb2.ModelInferRequest], data: st.DataObject) -> None:
    encoded = bytearray(case[0])
    for _ in range(data.draw(st.integers(1, 3))):
        if encoded:
            encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    encoded = encoded[: data.draw(st.integers(0, len(encoded)))]
    parsed = grpc_wire.parse_infer_request(bytes(encoded))
    if parsed.error:
        assert parsed.raw_input_contents == ()
        return
    try:
        grpc_convert.decode_infer_request(parsed.header, parsed.raw_input_contents, LIMIT)
    except Exception as error:  # noqa: BLE001
        assert isinstance(error, InvalidArgument), repr(error)


@FUZZ
@given(st.dictionaries(st.sampled_from(["config", "file:1/model.py", "file:", "unload_dependents",
                                        "other"]), st.none(), max_size=3), st.data())
def test_grpc_repository_requests_raise_only_invalid_argument(
        keys: dict[str, None], data: st.DataObject) -> None:
    load = service_pb2.RepositoryModelLoadRequest(model_name="m")
    unload = service_pb2.RepositoryModelUnloadRequest(model_name="m")
    for key in keys:
        set_grpc_parameter(load.parameters, key, data.draw)
        set_grpc_parameter(unload.parameters, key, data.draw)
    for convert, message in ((grpc_admin.decode_load_request, load),
                             (grpc_admin.decode_unload_request, unload)):
        try:
            convert(message)
        except Exception as error:  # noqa: BLE001
            assert isinstance(error, InvalidArgument), repr(error)


def test_a_valid_request_of_each_kind_is_accepted() -> None:
    """The strategies reach the accepting paths too (else the properties say little)."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "INT32",
                                   "data": [1, 2]}]}).encode()
    request, _ = http_codec.decode_infer_request("m", "", body, None, LIMIT)
    check_accepted(request)
    message = service_pb2.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP32", shape=[2])
    message.raw_input_contents.append(np.ones(2, np.float32).tobytes())
    parsed = grpc_wire.parse_infer_request(message.SerializeToString())
    check_accepted(grpc_convert.decode_infer_request(parsed.header, parsed.raw_input_contents))
