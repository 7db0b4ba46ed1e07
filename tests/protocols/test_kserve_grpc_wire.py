"""Tests of inferd.protocols.kserve_grpc.framing: requests, split (large) or parsed whole
(small), hold exactly what protobuf parses, a large request's raw contents stay views of the
received bytes, framed responses parse as the messages protobuf would build, and malformed
bytes are reported, never raised."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from inferd.protocols.kserve_grpc import framing as wire

names = st.text(max_size=8)


@st.composite
def infer_requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(
        model_name=draw(names), model_version=draw(names), id=draw(names)
    )
    for key in draw(st.lists(names, max_size=3, unique=True)):
        request.parameters[key].int64_param = draw(st.integers(-(2**63), 2**63 - 1))
    for index in range(draw(st.integers(0, 4))):
        request.inputs.add(name=f"I{index}", datatype="UINT8", shape=[draw(st.integers(0, 300))])
        request.raw_input_contents.append(draw(st.binary(max_size=300)))
    for name in draw(st.lists(names, max_size=2)):
        request.outputs.add(name=name)
    return request


@settings(max_examples=100, deadline=None)
@given(infer_requests(), st.booleans())
def test_split_requests_hold_the_same_fields(
    request: service_pb2.ModelInferRequest, large: bool
) -> None:
    if large:  # past the size from which requests are split rather than parsed whole
        request.inputs.add(name="LARGE", datatype="UINT8", shape=[wire.SPLIT_FROM_BYTES])
        request.raw_input_contents.append(b"\x07" * wire.SPLIT_FROM_BYTES)
    data = request.SerializeToString()
    parsed = wire.parse_infer_request(data)
    assert parsed.error == ""
    assert [bytes(raw) for raw in parsed.raw_input_contents] == list(request.raw_input_contents)
    assert not parsed.header.raw_input_contents
    expected = service_pb2.ModelInferRequest()
    expected.CopyFrom(request)
    del expected.raw_input_contents[:]
    assert parsed.header == expected


def test_raw_contents_are_views_of_the_received_bytes() -> None:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.raw_input_contents.append(b"\x01" * wire.SPLIT_FROM_BYTES)
    data = request.SerializeToString()
    (raw,) = wire.parse_infer_request(data).raw_input_contents
    assert isinstance(raw, memoryview) and raw.obj is data


def test_malformed_bytes_are_reported() -> None:
    good = service_pb2.ModelInferRequest(model_name="m")
    good.raw_input_contents.append(b"abcdef" * wire.SPLIT_FROM_BYTES)
    data = good.SerializeToString()
    padding = b"\x00" * wire.SPLIT_FROM_BYTES  # large enough to be split
    for malformed, problem in [
        (data[:-2], "runs past the end of the message"),
        (b"\x80" * 11 + padding, "varint is truncated or longer than 10 bytes"),
        (b"\x0b" + padding, "unsupported wire type 3"),
        (b"\x0a\x02\xff\xfe" + padding, "malformed ModelInferRequest"),  # name not UTF-8
        # small ones are parsed whole, by protobuf
        (data[:40], "malformed ModelInferRequest"),
        (b"\x0b", "malformed ModelInferRequest"),
        (b"\x0a\x02\xff\xfe", "malformed ModelInferRequest"),
    ]:
        parsed = wire.parse_infer_request(malformed)
        assert problem in parsed.error, (malformed[:16], parsed.error)
        assert parsed.raw_input_contents == ()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=4), names)
def test_framed_responses_parse_as_protobuf_builds_them(raws: list[bytes], name: str) -> None:
    header = service_pb2.ModelInferResponse(model_name=name, id="x")
    for index, _ in enumerate(raws):
        header.outputs.add(name=f"O{index}", datatype="UINT8", shape=[1])
    header.parameters["p"].bool_param = True
    expected = service_pb2.ModelInferResponse()
    expected.CopyFrom(header)
    expected.raw_output_contents.extend(raws)
    views = [memoryview(np.frombuffer(raw, np.uint8)) for raw in raws]
    framed = wire.serialize_infer_response(header, views)
    assert service_pb2.ModelInferResponse.FromString(framed) == expected
    streamed = service_pb2.ModelStreamInferResponse.FromString(
        wire.serialize_stream_response(header, views)
    )
    assert streamed == service_pb2.ModelStreamInferResponse(infer_response=expected)


def test_replies_without_tensors_are_serialized_by_protobuf() -> None:
    reply = service_pb2.ModelStreamInferResponse(error_message="boom")
    assert wire.serialize_reply(reply) == reply.SerializeToString()
    assert wire.serialize_reply(b"framed") == b"framed"


texts = st.text(max_size=6)
dims = st.integers(-(2**63), 2**63 - 1)


@st.composite
def plain_requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    """A request as perf_analyzer sends one: inputs in raw contents, no parameters."""
    request = service_pb2.ModelInferRequest(
        model_name=draw(texts), model_version=draw(texts), id=draw(texts)
    )
    for key in draw(st.lists(texts, max_size=3, unique=True)):
        parameter = request.parameters[key]
        choice = draw(st.sampled_from(["bool_param", "int64_param", "string_param",
                                       "double_param", "uint64_param", ""]))
        if choice == "":
            parameter.SetInParent()
        else:
            value = draw({"bool_param": st.booleans(), "int64_param": dims,
                          "string_param": texts, "uint64_param": st.integers(0, 2**64 - 1),
                          "double_param": st.floats(allow_nan=False)}[choice])
            setattr(parameter, choice, value)
    for _ in range(draw(st.integers(1, 3))):
        request.inputs.add(name=draw(texts), datatype=draw(texts),
                           shape=draw(st.lists(dims, max_size=3)))
        request.raw_input_contents.append(draw(st.binary(max_size=64)))
    for name in draw(st.lists(texts, max_size=2)):
        request.outputs.add(name=name)
    return request


@settings(max_examples=200, deadline=None)
@given(plain_requests())
def test_a_plain_request_is_read_as_protobuf_parses_it(
    request: service_pb2.ModelInferRequest,
) -> None:
    data = request.SerializeToString()
    parsed = wire.parse_infer_request(data, plain=True)
    plain = parsed.plain
    assert plain is not None and parsed.header is None
    assert parsed.model_name == request.model_name
    assert (plain.model_name, plain.model_version, plain.id) == (
        request.model_name, request.model_version, request.id)
    assert [(t.name, t.datatype, t.shape) for t in plain.inputs] == [
        (t.name, t.datatype, list(t.shape)) for t in request.inputs]
    assert plain.outputs == [output.name for output in request.outputs]
    expected_parameters = {}
    for key, parameter in request.parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        expected_parameters[key] = (choice or "", choice and getattr(parameter, choice))
    assert plain.parameters == expected_parameters
    assert [bytes(raw) for raw in plain.raw_input_contents] == list(request.raw_input_contents)
    assert all(raw.obj is data for raw in plain.raw_input_contents)


def test_shapes_sent_unpacked_are_read_too() -> None:
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="I", datatype="INT8")
    # field 3 as single varints, which parsers accept beside the packed form
    fields = tensor.SerializeToString() + b"\x18\x02\x18\x7f"
    data = b"\x0a\x01m" + b"\x2a" + bytes([len(fields)]) + fields + b"\x3a\x00"
    assert service_pb2.ModelInferRequest.FromString(data).inputs[0].shape == [2, 127]
    plain = wire.scan_plain_infer_request(data)
    assert plain is not None and plain.inputs[0].shape == [2, 127]


def _with(change: str) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="I", datatype="INT32", shape=[1])
    request.raw_input_contents.append(b"\x00" * 4)
    output = request.outputs.add(name="O")
    if change == "input parameter":
        tensor.parameters["shared_memory_region"].string_param = "r"
    elif change == "typed contents":
        tensor.contents.int_contents.append(1)
    elif change == "output parameter":
        output.parameters["classification"].int64_param = 1
    elif change == "raw contents missing":
        del request.raw_input_contents[:]
    elif change == "no inputs":
        del request.inputs[:]
        del request.raw_input_contents[:]
    data = request.SerializeToString()
    if change == "unknown field":
        data += b"\x48\x01"
    elif change == "name not UTF-8":
        data = b"\x0a\x02\xff\xfe" + data
    elif change == "truncated":
        data = data[:-3]
    return data


def test_anything_else_is_left_to_protobuf() -> None:
    assert wire.scan_plain_infer_request(_with("nothing")) is not None
    for change in ("input parameter", "typed contents",
                   "output parameter", "raw contents missing", "no inputs", "unknown field",
                   "name not UTF-8", "truncated"):
        data = _with(change)
        assert wire.scan_plain_infer_request(data) is None, change
        parsed = wire.parse_infer_request(data, plain=True)
        assert parsed.plain is None and (parsed.header is not None or parsed.error), change


@settings(max_examples=100, deadline=None)
@given(texts, texts, texts,
       st.lists(st.tuples(texts, texts, st.lists(dims, max_size=3), st.binary(max_size=40)),
                max_size=3))
def test_a_plain_response_parses_as_protobuf_builds_it(
    model: str, version: str, response_id: str,
    outputs: list[tuple[str, str, list[int], bytes]],
) -> None:
    expected = service_pb2.ModelInferResponse(model_name=model, model_version=version,
                                              id=response_id)
    for name, datatype, shape, raw in outputs:
        expected.outputs.add(name=name, datatype=datatype, shape=shape)
        expected.raw_output_contents.append(raw)
    written = wire.serialize_plain_infer_response(
        model, version, response_id, [(name, datatype, shape) for name, datatype, shape, _ in outputs],
        [memoryview(raw) for *_, raw in outputs],
    )
    assert service_pb2.ModelInferResponse.FromString(written) == expected
