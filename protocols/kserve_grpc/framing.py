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
expects. Owns the framing only: which fields mean what is ``inferd.protocols.kserve_grpc.infer``'s.
Pure: no I/O. Parsing never raises; a malformed message is a ``ParsedInferRequest`` with
``error`` set, so the RPC can answer INVALID_ARGUMENT.

The common request, what perf_analyzer and most clients send (names, datatypes and shapes of
inputs whose bytes are all in ``raw_input_contents``, requested outputs by name, parameters
of the request but of no tensor), is read straight from its bytes by
``scan_plain_infer_request`` into a ``PlainInferRequest``, with no protobuf objects at all;
any other request, and any byte sequence the scan does not fully understand, goes to
protobuf, whose answer is the reference. ``serialize_plain_infer_response`` writes the
matching response (outputs without parameters) the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
import struct
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
_DOUBLE = struct.Struct("<d")
# Below this a whole-message parse by upb (copying the raw contents) costs less than the
# split: 5 against 13-20 µs for simple's 2 x 64 B up to 4 KiB inputs, even at 64 KiB, where
# the copies start to cost (bench/performance/compiled.py measures both).
SPLIT_FROM_BYTES = 32 << 10


@dataclass(frozen=True, slots=True)
class ParsedInferRequest:
    """A received ``ModelInferRequest``: ``header`` holds every field but
    ``raw_input_contents``, which are views of the received bytes, in order. ``error``
    says why the bytes are not a ModelInferRequest (``header`` is then empty)."""

    header: Any
    raw_input_contents: tuple[memoryview, ...] = ()
    error: str = ""
    plain: PlainInferRequest | None = None
    """The request as ``scan_plain_infer_request`` read it (``header`` is then None)."""

    @property
    def model_name(self) -> str:
        return self.plain.model_name if self.plain is not None else str(self.header.model_name)


@dataclass(frozen=True, slots=True)
class PlainInput:
    """One input of a ``PlainInferRequest``: its bytes are the request's raw contents at
    the same index."""

    name: str
    datatype: str
    shape: list[int]


@dataclass(frozen=True, slots=True)
class PlainInferRequest:
    """A ``ModelInferRequest`` without typed contents or parameters of an input or output,
    every input's bytes in ``raw_input_contents`` (one per input, views of the received
    bytes). ``parameters`` maps each request parameter's key to the name of the
    ``InferParameter`` field it sets ("" for none) and its value."""

    model_name: str
    model_version: str
    id: str
    parameters: dict[str, tuple[str, Any]]
    inputs: list[PlainInput]
    outputs: list[str]
    raw_input_contents: list[memoryview]


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


def parse_infer_request(data: bytes, *, plain: bool = False) -> ParsedInferRequest:
    """Split received ``ModelInferRequest`` bytes (the gRPC request deserializer); with
    ``plain``, a plain request is read without protobuf (``scan_plain_infer_request``)."""
    if plain:
        scanned = scan_plain_infer_request(data)
        if scanned is not None:
            return ParsedInferRequest(None, plain=scanned)
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


class _NotPlain(Exception):
    """The bytes hold something ``scan_plain_infer_request`` leaves to protobuf."""


def scan_plain_infer_request(data: bytes) -> PlainInferRequest | None:
    """The request ``data`` holds when it is a plain one (``PlainInferRequest``), else None:
    a request with parameters or typed contents, a field this scan does not know, or bytes
    that are not a well-formed message are protobuf's to parse (and to refuse)."""
    try:
        return _scan_plain(data)
    except (_NotPlain, UnicodeDecodeError):
        return None


def _varint_at(data: bytes, offset: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while offset < end and shift < 64:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
    raise _NotPlain()


def _field_at(data: bytes, offset: int, end: int) -> tuple[int, int, int]:
    """(field number, value start, value end) of the length-delimited field at ``offset``."""
    key, offset = _varint_at(data, offset, end)
    if key & 7 != _LENGTH_DELIMITED:
        raise _NotPlain()
    length, offset = _varint_at(data, offset, end)
    if offset + length > end:
        raise _NotPlain()
    return key >> 3, offset, offset + length


def _scan_plain(data: bytes) -> PlainInferRequest | None:
    view = memoryview(data)
    model_name = model_version = request_id = ""
    parameters: dict[str, tuple[str, Any]] = {}
    inputs: list[PlainInput] = []
    outputs: list[str] = []
    raw_contents: list[memoryview] = []
    offset = 0
    end = len(data)
    while offset < end:
        field, start, offset = _field_at(data, offset, end)
        if field == 7:
            raw_contents.append(view[start:offset])
        elif field == 5:
            inputs.append(_scan_input(data, start, offset))
        elif field == 6:
            outputs.append(_scan_output(data, start, offset))
        elif field == 1:
            model_name = data[start:offset].decode()
        elif field == 2:
            model_version = data[start:offset].decode()
        elif field == 3:
            request_id = data[start:offset].decode()
        elif field == 4:
            key, value = _scan_parameter(data, start, offset)
            parameters[key] = value
        else:  # a field this scan does not know
            return None
    if not inputs or len(raw_contents) != len(inputs):
        return None  # protobuf's path words the refusal
    return PlainInferRequest(model_name, model_version, request_id, parameters, inputs,
                             outputs, raw_contents)


# InferParameter's oneof: field number -> (name, wire type)
_PARAMETER_CHOICES = {1: ("bool_param", _VARINT), 2: ("int64_param", _VARINT),
                      3: ("string_param", _LENGTH_DELIMITED), 4: ("double_param", _FIXED64),
                      5: ("uint64_param", _VARINT)}


def _scan_parameter(data: bytes, offset: int, end: int) -> tuple[str, tuple[str, Any]]:
    """(key, (choice, value)) of one entry of the request's ``parameters`` map."""
    key = ""
    choice: tuple[str, Any] = ("", None)
    while offset < end:
        field, start, offset = _field_at(data, offset, end)
        if field == 1:
            key = data[start:offset].decode()
        elif field == 2:
            choice = _scan_parameter_value(data, start, offset)
        else:
            raise _NotPlain()
    return key, choice


def _scan_parameter_value(data: bytes, offset: int, end: int) -> tuple[str, Any]:
    choice: tuple[str, Any] = ("", None)  # the last field of the oneof set wins
    while offset < end:
        key, offset = _varint_at(data, offset, end)
        known = _PARAMETER_CHOICES.get(key >> 3)
        if known is None or key & 7 != known[1]:
            raise _NotPlain()
        name = known[0]
        if name == "double_param":
            if offset + 8 > end:
                raise _NotPlain()
            choice = (name, _DOUBLE.unpack_from(data, offset)[0])
            offset += 8
        elif name == "string_param":
            length, offset = _varint_at(data, offset, end)
            if offset + length > end:
                raise _NotPlain()
            choice = (name, data[offset:offset + length].decode())
            offset += length
        else:
            number, offset = _varint_at(data, offset, end)
            if name == "bool_param":
                choice = (name, number != 0)
            elif name == "int64_param":
                choice = (name, _int64(number))
            else:
                choice = (name, number)
    return choice


def _scan_input(data: bytes, offset: int, end: int) -> PlainInput:
    name = datatype = ""
    shape: list[int] = []
    while offset < end:
        key, offset = _varint_at(data, offset, end)
        if key == (3 << 3) | _VARINT:  # one unpacked shape element
            dim, offset = _varint_at(data, offset, end)
            shape.append(_int64(dim))
            continue
        if key & 7 != _LENGTH_DELIMITED:
            raise _NotPlain()
        length, offset = _varint_at(data, offset, end)
        start, offset = offset, offset + length
        if offset > end:
            raise _NotPlain()
        field = key >> 3
        if field == 1:
            name = data[start:offset].decode()
        elif field == 2:
            datatype = data[start:offset].decode()
        elif field == 3:  # packed shape
            while start < offset:
                dim, start = _varint_at(data, start, offset)
                shape.append(_int64(dim))
        else:  # parameters, typed contents or an unknown field
            raise _NotPlain()
    return PlainInput(name, datatype, shape)


def _scan_output(data: bytes, offset: int, end: int) -> str:
    name = ""
    while offset < end:
        field, start, offset = _field_at(data, offset, end)
        if field != 1:  # parameters (shared memory, classification) or an unknown field
            raise _NotPlain()
        name = data[start:offset].decode()
    return name


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def serialize_plain_infer_response(
    model_name: str, model_version: str, response_id: str,
    outputs: Sequence[tuple[str, str, Sequence[int]]], raw_output_contents: Sequence[Any],
) -> bytes:
    """The bytes of a ``ModelInferResponse`` without parameters: ``outputs`` are (name,
    datatype, shape) and ``raw_output_contents`` their bytes, in the same order."""
    head = bytearray()
    _put_text(head, 1, model_name)
    _put_text(head, 2, model_version)
    _put_text(head, 3, response_id)
    for name, datatype, shape in outputs:
        tensor = bytearray()
        _put_text(tensor, 1, name)
        _put_text(tensor, 2, datatype)
        if shape:
            packed = bytearray()
            for dim in shape:
                packed += _varint(dim & 0xFFFFFFFFFFFFFFFF)
            _put_bytes(tensor, 3, packed)
        _put_bytes(head, 5, tensor)
    parts: list[Any] = [head]
    for buffer in raw_output_contents:
        parts += (_RAW_OUTPUT_CONTENTS_KEY, _varint(memoryview(buffer).nbytes), buffer)
    return b"".join(parts)


def _put_text(out: bytearray, field: int, text: str) -> None:
    if text:  # proto3 leaves empty strings out
        _put_bytes(out, field, text.encode())


def _put_bytes(out: bytearray, field: int, value: bytes | bytearray) -> None:
    out.append((field << 3) | _LENGTH_DELIMITED)
    out += _varint(len(value))
    out += value


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
