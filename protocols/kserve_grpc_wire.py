"""Protobuf wire framing of the two KServe gRPC messages that carry tensor bytes, so those
bytes are never copied by protobuf.

A received ``ModelInferRequest`` of ``SPLIT_FROM_BYTES`` or more is split at the wire level:
its ``raw_input_contents`` (field 7) become views of the received bytes and only the rest, a
few hundred bytes of names, shapes and parameters, is parsed by protobuf. A smaller one is
parsed whole by protobuf's C runtime (upb), which copies its few raw bytes faster than the
split finds them. A ``ModelInferResponse`` (or the
``ModelStreamInferResponse`` around one) is written as its small header message followed by
one ``raw_output_contents`` field (field 6) per output, joined into the outgoing bytes in a
single copy. Protobuf parses fields in any order, so this is exactly the message tritonclient
expects. Owns the framing only: which fields mean what is ``inferd.protocols.kserve_grpc``'s.
Pure: no I/O. Parsing never raises; a malformed message is a ``ParsedInferRequest`` with
``error`` set, so the RPC can answer INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

# Field keys: (field number << 3) | wire type, wire type 2 being length-delimited.
_RAW_INPUT_CONTENTS_KEY = (7 << 3) | 2
_RAW_OUTPUT_CONTENTS_KEY = bytes([(6 << 3) | 2])
_STREAM_INFER_RESPONSE_KEY = bytes([(2 << 3) | 2])
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
# Below this a whole-message parse by upb (copying the raw contents) costs less than the
# split: 5 against 13-20 µs for simple's 2 x 64 B up to 4 KiB inputs, even at 64 KiB, where
# the copies start to cost (bench/bench_compiled.py measures both).
SPLIT_FROM_BYTES = 32 << 10


@dataclass(frozen=True, slots=True)
class ParsedInferRequest:
    """A received ``ModelInferRequest``: ``header`` holds every field but
    ``raw_input_contents``, which are views of the received bytes, in order. ``error``
    says why the bytes are not a ModelInferRequest (``header`` is then empty)."""

    header: Any
    raw_input_contents: tuple[memoryview, ...] = ()
    error: str = ""


def _read_varint(data: memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    for position in range(offset, min(offset + _MAX_VARINT_BYTES, len(data))):
        byte = data[position]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position + 1
        shift += 7
    raise ValueError("a varint is truncated or longer than 10 bytes")


def _split(data: memoryview) -> tuple[list[memoryview], list[memoryview]]:
    """(the spans of every field but raw_input_contents, the raw_input_contents values)."""
    header_spans: list[memoryview] = []
    raw_contents: list[memoryview] = []
    span_start = offset = 0
    total = len(data)
    while offset < total:
        field_start = offset
        key, offset = _read_varint(data, offset)
        wire_type = key & 7
        if wire_type == _VARINT:
            _, offset = _read_varint(data, offset)
        elif wire_type == _FIXED64:
            offset += 8
        elif wire_type == _FIXED32:
            offset += 4
        elif wire_type == _LENGTH_DELIMITED:
            length, offset = _read_varint(data, offset)
            value_start, offset = offset, offset + length
            if key == _RAW_INPUT_CONTENTS_KEY and offset <= total:
                header_spans.append(data[span_start:field_start])
                raw_contents.append(data[value_start:offset])
                span_start = offset
        else:
            raise ValueError(f"field {key >> 3} has the unsupported wire type {wire_type}")
        if offset > total:
            raise ValueError(f"field {key >> 3} runs past the end of the message")
    header_spans.append(data[span_start:])
    return header_spans, raw_contents


def parse_infer_request(data: bytes) -> ParsedInferRequest:
    """Split received ``ModelInferRequest`` bytes (the gRPC request deserializer)."""
    if len(data) < SPLIT_FROM_BYTES:
        return _parse_whole(data)
    view = memoryview(data)
    try:
        header_spans, raw_contents = _split(view)
        header = service_pb2.ModelInferRequest.FromString(b"".join(header_spans))
    except (ValueError, DecodeError) as error:
        return ParsedInferRequest(
            service_pb2.ModelInferRequest(), error=f"malformed ModelInferRequest: {error}"
        )
    return ParsedInferRequest(header, tuple(raw_contents))


def _parse_whole(data: bytes) -> ParsedInferRequest:
    try:
        header = service_pb2.ModelInferRequest.FromString(data)
    except DecodeError as error:
        return ParsedInferRequest(
            service_pb2.ModelInferRequest(), error=f"malformed ModelInferRequest: {error}"
        )
    raw_contents = tuple(memoryview(content) for content in header.raw_input_contents)
    header.ClearField("raw_input_contents")  # as the split leaves it: the views hold them
    return ParsedInferRequest(header, raw_contents)


def _varint(value: int) -> bytes:
    encoded = bytearray()
    while value > 0x7F:
        encoded.append((value & 0x7F) | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


def _response_parts(header: Any, raw_output_contents: Sequence[Any]) -> list[Any]:
    parts: list[Any] = [header.SerializeToString()]
    for buffer in raw_output_contents:
        parts += (_RAW_OUTPUT_CONTENTS_KEY, _varint(memoryview(buffer).nbytes), buffer)
    return parts


def serialize_infer_response(header: Any, raw_output_contents: Sequence[Any]) -> bytes:
    """The bytes of a ``ModelInferResponse``: ``header`` (without raw contents) followed by
    ``raw_output_contents`` (bytes-like, one per output in ``header.outputs`` order)."""
    return b"".join(_response_parts(header, raw_output_contents))


def serialize_stream_response(header: Any, raw_output_contents: Sequence[Any]) -> bytes:
    """The bytes of a ``ModelStreamInferResponse`` whose ``infer_response`` is the
    ``ModelInferResponse`` that ``serialize_infer_response`` would write."""
    parts = _response_parts(header, raw_output_contents)
    size = sum(memoryview(part).nbytes for part in parts)
    return b"".join([_STREAM_INFER_RESPONSE_KEY, _varint(size), *parts])


def serialize_reply(reply: Any) -> bytes:
    """The response serializer of the RPCs that return framed bytes: those pass through, and
    a reply that carries no tensors (an error, an empty final response) is serialized by
    protobuf."""
    if isinstance(reply, (bytes, bytearray)):
        return bytes(reply)
    serialized: bytes = reply.SerializeToString()
    return serialized
