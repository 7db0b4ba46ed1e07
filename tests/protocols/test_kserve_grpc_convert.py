"""Tests of inferd.protocols.kserve_grpc.infer (with kserve_grpc.inputs and kserve_grpc.admin)
without a server: requests built as tritonclient builds them decode to the right tensors and
parameters, responses decode in tritonclient's ``InferResult``, and every malformed request is
refused with a message naming the problem."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2

from inferd.protocols.kserve_grpc import infer as convert
from inferd.protocols.kserve_grpc import admin
from inferd.protocols.kserve_grpc import framing as wire
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    Index,
    IndexEntry,
    InferRequest,
    InferResponse,
    ModelConfigReply,
    ModelMetadata,
    ServerMetadata,
    Statistics,
    Tensor,
    TensorSpec,
)
from inferd.protocols.tensors import DATATYPES, from_numpy, numpy_dtype

shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)


def request_with(*tensors: Tensor, raw: bool = True) -> Any:
    request = service_pb2.ModelInferRequest(model_name="m", model_version="2", id="x")
    for tensor in tensors:
        request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if raw:
            if tensor.datatype == "BYTES":
                content = b"".join(struct.pack("<I", len(item)) + item for item in tensor.data.flat)
            else:
                content = tensor.data.astype(numpy_dtype(tensor.datatype)).tobytes()
            request.raw_input_contents.append(content)
    return request


def arrays_of(datatype: str) -> st.SearchStrategy[np.ndarray]:
    if datatype == "BYTES":
        return hnp.arrays(np.object_, shapes, elements=st.binary(max_size=12))
    return hnp.arrays(numpy_dtype(datatype), shapes)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), datatype=st.sampled_from(DATATYPES))
def test_raw_inputs_decode_to_the_same_tensors(data: st.DataObject, datatype: str) -> None:
    array = data.draw(arrays_of(datatype))
    tensor = Tensor("INPUT0", datatype, array.shape, array)
    request = decoded(request_with(tensor))
    assert (request.model, request.version, request.id) == ("m", "2", "x")
    assert request.inputs == (tensor,)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), datatype=st.sampled_from(DATATYPES))
def test_responses_read_back_in_tritonclient(data: st.DataObject, datatype: str) -> None:
    array = data.draw(arrays_of(datatype))
    response = InferResponse("m", "3", (Tensor("OUT", datatype, array.shape, array),), id="r")
    framed = wire.serialize_infer_response(*convert.encode_infer_response(response))
    written = convert.serialize_infer_response(response)  # without protobuf: the same message
    proto = service_pb2.ModelInferResponse.FromString(framed)
    assert service_pb2.ModelInferResponse.FromString(written) == proto
    assert (proto.model_name, proto.model_version, proto.id) == ("m", "3", "r")
    assert len(proto.raw_output_contents) == 1
    result = grpcclient.InferResult(proto).as_numpy("OUT")
    if datatype == "BF16":
        result = result.view(np.uint16)
    if datatype == "BYTES":
        assert result.tolist() == array.tolist()
    else:
        np.testing.assert_array_equal(result, array)


def test_client_built_request_decodes() -> None:
    first = grpcclient.InferInput("A", [2, 2], "FP32")
    first.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(2, 2))
    second = grpcclient.InferInput("B", [3], "BYTES")
    second.set_data_from_numpy(np.array(["", "é", "abc"], dtype=np.object_))
    request = service_pb2.ModelInferRequest(model_name="m", id="i")
    for tensor in (first, second):
        request.inputs.append(tensor._get_tensor())
        request.raw_input_contents.append(tensor._get_content())
    request.outputs.add(name="OUT")
    message = decoded(request)
    assert message.inputs[0].data.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert message.inputs[1].data.tolist() == [b"", "é".encode(), b"abc"]
    assert message.outputs == ("OUT",)


@pytest.mark.parametrize(
    ("datatype", "field", "values"),
    [
        ("BOOL", "bool_contents", [True, False]),
        ("INT8", "int_contents", [-128, 127]),
        ("INT16", "int_contents", [-32768, 32767]),
        ("INT32", "int_contents", [-(2**31), 2**31 - 1]),
        ("INT64", "int64_contents", [-(2**63), 2**63 - 1]),
        ("UINT8", "uint_contents", [0, 255]),
        ("UINT16", "uint_contents", [0, 65535]),
        ("UINT32", "uint_contents", [0, 2**32 - 1]),
        ("UINT64", "uint64_contents", [0, 2**64 - 1]),
        ("FP32", "fp32_contents", [1.5, -2.0]),
        ("FP64", "fp64_contents", [1e300, -0.5]),
        ("BYTES", "bytes_contents", [b"", b"\xff"]),
    ],
)
def test_typed_contents(datatype: str, field: str, values: list[Any]) -> None:
    request = service_pb2.ModelInferRequest(model_name="m")
    getattr(request.inputs.add(name="I", datatype=datatype, shape=[2]).contents, field).extend(
        values
    )
    (tensor,) = convert.decode_infer_request(request).inputs
    assert tensor == from_numpy("I", np.array(values, dtype=numpy_dtype(datatype)), datatype)


def test_parameters() -> None:
    request = request_with(from_numpy("I", np.ones(2, np.float32)))
    request.parameters["priority"].uint64_param = 3
    request.parameters["timeout"].int64_param = 500
    request.parameters["sequence_id"].string_param = "s"
    request.parameters["sequence_start"].bool_param = True
    request.parameters["flag"].bool_param = False
    request.parameters["count"].int64_param = -4
    request.parameters["ratio"].double_param = 0.25
    request.parameters["name"].string_param = "n"
    request.parameters[convert.EMPTY_FINAL_RESPONSE].bool_param = True
    message = decoded(request)
    assert (message.priority, message.timeout_us) == (3, 500)
    assert message.parameters == {
        "sequence_id": "s", "sequence_start": True, "flag": False, "count": -4,
        "ratio": 0.25, "name": "n",
    }
    assert convert.empty_final_response_requested(request) is True
    assert convert.empty_final_response_requested(request_with()) is False


def test_response_parameters() -> None:
    response = InferResponse("m", "1", (), parameters={
        "b": True, "i": -3, "u": 2**64 - 1, "f": 0.5, "s": "t", "other": [1, 2],
    })
    header, raw_contents = convert.encode_infer_response(response)
    assert raw_contents == []
    parameters = header.parameters
    assert parameters["b"].bool_param is True
    assert parameters["i"].int64_param == -3
    assert parameters["u"].uint64_param == 2**64 - 1
    assert parameters["f"].double_param == 0.5
    assert parameters["s"].string_param == "t"
    assert parameters["other"].string_param == "[1, 2]"


def decoded(request: Any) -> Any:
    """What ``request`` decodes to, by protobuf's path and, for a plain request, by the
    scan's (``inferd.protocols.kserve_grpc.framing.scan_plain_infer_request``), which must agree."""
    by_protobuf = convert.decode_infer_request(request)
    plain = wire.scan_plain_infer_request(request.SerializeToString())
    if plain is not None:
        assert convert.decode_plain_infer_request(plain) == by_protobuf
    return by_protobuf


def refused(request: Any, error_type: type[Exception] = InvalidArgument) -> str:
    with pytest.raises(error_type) as error:
        convert.decode_infer_request(request)
    plain = wire.scan_plain_infer_request(request.SerializeToString())
    if plain is not None:  # the scan's path refuses it with the same words
        with pytest.raises(error_type) as plain_error:
            convert.decode_plain_infer_request(plain)
        assert str(plain_error.value) == str(error.value)
    return str(error.value)


def test_malformed_inputs_are_refused() -> None:
    tensor = from_numpy("I", np.ones(4, np.int32))
    short = request_with(tensor)
    short.raw_input_contents[0] = b"\x00" * 15
    assert "needs 16 bytes, received 15" in refused(short)

    extra = request_with(tensor)
    extra.raw_input_contents.append(b"")
    assert "expected 1 raw_input_contents (one per input, in input order)" in refused(extra)

    both = request_with(tensor)
    both.inputs[0].contents.int_contents.extend([1, 1, 1, 1])
    assert refused(both) == (
        "contents field must not be specified when using raw_input_contents for 'I' for model 'm'"
    )

    missing = request_with(tensor, raw=False)
    assert refused(missing) == "unable to find data for input tensor 'I' for model 'm' in request."

    unknown = request_with(tensor)
    unknown.inputs[0].datatype = "FP8"
    assert refused(unknown) == "input 'I' for model 'm' has unknown datatype 'FP8'"

    negative = request_with(tensor)
    negative.inputs[0].shape[0] = -4
    assert "negative dimension" in refused(negative)

    overflow = request_with(tensor)
    del overflow.inputs[0].shape[:]
    overflow.inputs[0].shape.extend([2**40, 2**40])
    assert "too many elements" in refused(overflow)

    fp16 = service_pb2.ModelInferRequest(model_name="m")
    fp16.inputs.add(name="H", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
    assert "has no typed contents field; send it in raw_input_contents" in refused(fp16)

    wrong_field = service_pb2.ModelInferRequest(model_name="m")
    wrong_field.inputs.add(name="W", datatype="INT64", shape=[1]).contents.int_contents.append(1)
    assert "int_contents cannot hold datatype 'INT64', expected int64_contents" in refused(
        wrong_field
    )

    out_of_range = service_pb2.ModelInferRequest(model_name="m")
    out_of_range.inputs.add(name="U", datatype="UINT8", shape=[1]).contents.uint_contents.append(
        256
    )
    assert "outside the range of UINT8" in refused(out_of_range)

    truncated = service_pb2.ModelInferRequest(model_name="m")
    truncated.inputs.add(name="S", datatype="BYTES", shape=[1])
    truncated.raw_input_contents.append(b"\x09\x00\x00\x00abc")
    assert "BYTES data is truncated" in refused(truncated)


def test_malformed_parameters_are_refused() -> None:
    def with_parameter(key: str, choice: str, value: Any) -> Any:
        request = request_with(from_numpy("I", np.ones(1, np.int32)))
        setattr(request.parameters[key], choice, value)
        return request

    assert refused(with_parameter("triton_other", "bool_param", True)).startswith(
        "parameter keys starting with 'triton_' are reserved for Triton usage"
    )
    assert refused(with_parameter(convert.EMPTY_FINAL_RESPONSE, "string_param", "yes")) == (
        "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
        "bool_param."
    )
    assert refused(with_parameter("priority", "int64_param", -1)) == (
        "invalid value for 'priority', expected value >= 0."
    )
    assert refused(with_parameter("timeout", "double_param", 1.0)) == (
        "invalid value type for 'timeout' parameter, expected int64_param."
    )
    assert refused(with_parameter("sequence_end", "int64_param", 1)) == (
        "invalid value type for 'sequence_end' parameter, expected bool_param."
    )
    empty = request_with(from_numpy("I", np.ones(1, np.int32)))
    empty.parameters["nothing"].SetInParent()
    assert refused(empty) == "parameter 'nothing' has no value"


def test_a_shared_memory_region_needs_its_size() -> None:
    shared = request_with(from_numpy("I", np.ones(1, np.int32)))
    shared.inputs[0].parameters["shared_memory_region"].string_param = "r"
    assert "'shared_memory_byte_size' must be specified along with 'shared_memory_region'" in (
        refused(shared))


def test_classification_counts_by_output_with_tritons_refusals() -> None:
    classify = request_with(from_numpy("I", np.ones(1, np.int32)))
    classify.outputs.add(name="O").parameters["classification"].int64_param = 3
    classify.outputs.add(name="P")
    decoded = convert.decode_infer_request(classify)
    assert isinstance(decoded, InferRequest)
    assert (decoded.outputs, decoded.classification) == (("O", "P"), {"O": 3})
    classify.outputs[0].parameters["classification"].int64_param = 0
    assert refused(classify) == "invalid value for 'classification' parameter, expected >= 0"
    classify.outputs[0].parameters["classification"].string_param = "3"
    assert refused(classify) == (
        "invalid value type for 'classification' parameter, expected int64_param")


def test_stream_responses() -> None:
    request = service_pb2.ModelInferRequest(model_name="m", model_version="1", id="q")
    response = InferResponse("m", "1", (from_numpy("O", np.ones(2, np.int32)),), id="q")
    streamed = service_pb2.ModelStreamInferResponse.FromString(
        wire.serialize_stream_response(*convert.encode_infer_response(response, final=True))
    )
    assert streamed.error_message == ""
    assert streamed.infer_response.parameters[convert.FINAL_RESPONSE].bool_param is True
    assert streamed.infer_response.raw_output_contents == [np.ones(2, "<i4").tobytes()]
    error = convert.encode_stream_error(request, "boom")
    assert (error.error_message, error.infer_response.id) == ("boom", "q")
    final = convert.encode_empty_final_response(request)
    assert final.infer_response.id == "q"
    assert not final.infer_response.outputs
    assert final.infer_response.parameters[convert.FINAL_RESPONSE].bool_param is True


def test_information_replies() -> None:
    metadata = admin.encode_server_metadata(ServerMetadata("inferd", "1", ("a", "b")))
    assert list(metadata.extensions) == ["a", "b"]
    model = admin.encode_model_metadata(ModelMetadata(
        "m", ("1", "2"), "onnxruntime_onnx", (TensorSpec("I", "FP32", (-1, 3)),),
        (TensorSpec("O", "INT64", (2,)),),
    ))
    assert (model.inputs[0].name, list(model.inputs[0].shape)) == ("I", [-1, 3])
    assert model.outputs[0].datatype == "INT64"
    config = admin.encode_model_config(ModelConfigReply(json.dumps({
        "name": "m", "max_batch_size": 8, "input": [{"name": "I", "data_type": "TYPE_FP32",
        "dims": [16]}], "inferd_extra": 1,
    }))).config
    assert (config.name, config.max_batch_size, list(config.input[0].dims)) == ("m", 8, [16])
    duration = {"count": 2, "ns": 10}
    stats = admin.encode_statistics(Statistics(({
        "name": "m", "version": "1", "last_inference": 5, "inference_count": 4,
        "execution_count": 2, "inference_stats": {"success": duration, "queue": duration},
        "batch_stats": [{"batch_size": 2, "compute_infer": duration}], "steps": {},
    },))).model_stats[0]
    assert (stats.inference_count, stats.inference_stats.success.ns) == (4, 10)
    assert stats.batch_stats[0].compute_infer.count == 2
    index = admin.encode_index(Index((IndexEntry("a"), IndexEntry("b", "1", "READY", ""))))
    assert [(e.name, e.version, e.state) for e in index.models] == [("a", "", ""),
                                                                   ("b", "1", "READY")]
    # No field for warnings in the proto: a READY version's reason carries them, unless it
    # has a reason of its own.
    index = admin.encode_index(Index((IndexEntry("w", "1", "READY", "", ("x", "y")),
                                      IndexEntry("e", "1", "READY", "failed", ("x",)))))
    assert [e.reason for e in index.models] == ["x; y", "failed"]


def test_repository_requests() -> None:
    load = service_pb2.RepositoryModelLoadRequest(model_name="m")
    load.parameters["config"].string_param = "{}"
    load.parameters["file:1/model.onnx"].bytes_param = b"\x01"
    assert admin.decode_load_request(load).files == {"1/model.onnx": b"\x01"}
    assert admin.decode_load_request(load).config == "{}"
    load.parameters["other"].string_param = "x"
    with pytest.raises(InvalidArgument, match="unknown parameter 'other'"):
        admin.decode_load_request(load)
    unload = service_pb2.RepositoryModelUnloadRequest(model_name="m")
    unload.parameters["unload_dependents"].bool_param = True
    assert admin.decode_unload_request(unload).unload_dependents is True
    assert admin.decode_index_request(service_pb2.RepositoryIndexRequest(ready=True)).ready_only
