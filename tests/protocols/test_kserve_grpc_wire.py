"""Tests of inferd.protocols.kserve_grpc_wire: requests, split (large) or parsed whole
(small), hold exactly what protobuf parses, a large request's raw contents stay views of the
received bytes, framed responses parse as the messages protobuf would build, and malformed
bytes are reported, never raised."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from inferd.protocols import kserve_grpc_wire as wire

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
