"""The kernel wire format: an ``Envelope`` as a list of frames and back.

Frames are ``[VERSION, header, *buffers]``. The header is msgpack of ``(msg_id, kind, src,
dst, reply_to, deadline, trace, body)``, where ``body`` holds the message's field values in
declaration order. A ``Tensor`` anywhere in a message is packed as an ExtType holding
``(name, datatype, shape, buffer_index)`` and its bytes travel as a buffer frame of their own,
never copied on either side, unless the transport takes it (``spill``): the descriptor then
holds the transport's reference in place of the buffer index, and the receiving transport
turns it back into a buffer (``unspill``), as the process link does with shared memory. A
nested message is an ExtType holding ``(kind, *values)``. The two kinds of every batch,
``InferBatch`` and ``BatchResult``, travel flat instead (``flat:<kind>``: plain nested arrays,
one pack and one unpack; see "flat kinds" below). The codec is generic over
``MESSAGE_KINDS`` and checks each decoded field against the kind's type hints (the flat kinds
by hand), so a peer can never hand the kernel a message of the wrong shape. msgpack arrays decode
as tuples, so a list inside a ``dict`` value comes back as a tuple. Anything malformed raises
``InvalidArgument``. Pure: this module never touches sockets (routing frames are the
transport's business).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import Any

import msgpack
import numpy as np

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    MESSAGE_KINDS,
    BatchResult,
    Envelope,
    Failure,
    InferBatch,
    InferRequest,
    InferResponse,
    Message,
    Tensor,
)
from inferd.protocols.tensors import tensor_from_buffer, tensor_to_buffer

VERSION = b"\x01"

_TENSOR_EXT = 1
_MESSAGE_EXT = 2
_HEADER_LENGTH = 8
_BUFFERS_START = 2
_PACKER_BUFFER_BYTES = 4096
# Each nested message costs a C and a Python frame on both sides; unbounded nesting from a
# peer would overflow the C stack, far below Python's recursion limit.
_MAX_NESTING = 32

_Check = Callable[[Any], bool]
# The transport's hooks for large tensors: ``Spill`` takes a tensor's bytes and returns a
# small reference (any plain msgpack value but an int), or None to send them as a frame;
# ``Unspill`` turns such a reference back into a buffer.
Spill = Callable[["memoryview | bytes"], Any]
Unspill = Callable[[Any], Any]


# ------------------------------------------------------------------- per-kind field tables


def _field_getter(names: tuple[str, ...]) -> Callable[[Message], tuple[Any, ...]]:
    if not names:
        return lambda message: ()
    if len(names) == 1:
        get_one = attrgetter(names[0])
        return lambda message: (get_one(message),)
    return attrgetter(*names)


def _instance_types(hint: Any) -> tuple[type, ...] | None:
    """The classes ``isinstance`` needs to check ``hint``, when one call is enough."""
    if hint is float:
        return (int, float)
    if hint in (str, bytes, bool, int, Tensor, type(None)) or (
        isinstance(hint, type) and issubclass(hint, Message)
    ):
        return (hint,)
    if hint in (tuple, dict):
        return (hint,)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        classes: list[type] = []
        for alternative in typing.get_args(hint):
            alternative_classes = _instance_types(alternative)
            if alternative_classes is None:
                return None
            classes.extend(alternative_classes)
        return tuple(classes)
    return None


def _compile_check(hint: Any, where: str) -> _Check | None:
    """A predicate for values of type ``hint``; ``None`` when any value is acceptable."""
    if hint is Any:
        return None
    classes = _instance_types(hint)
    if classes is not None:
        return lambda value: isinstance(value, classes)
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        alternatives = [_compile_check(argument, where) for argument in arguments]
        if any(alternative is None for alternative in alternatives):
            return None
        checks = typing.cast("list[_Check]", alternatives)
        return lambda value: any(check(value) for check in checks)
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        item_classes = _instance_types(arguments[0])
        if item_classes is not None:
            # map() keeps the per-item loop in C: these tuples hold a batch's tensors.
            return lambda value: (
                type(value) is tuple and all(map(isinstance, value, repeat(item_classes)))
            )
        item_check = _compile_check(arguments[0], where)
        if item_check is None:
            return lambda value: type(value) is tuple
        return lambda value: type(value) is tuple and all(map(item_check, value))
    if origin is tuple and arguments:
        item_checks = [_compile_check(argument, where) or _accept_any for argument in arguments]
        size = len(item_checks)
        return lambda value: (
            type(value) is tuple
            and len(value) == size
            and all(check(item) for check, item in zip(item_checks, value, strict=True))
        )
    if origin is dict and len(arguments) == 2 and arguments[0] is str:
        value_check = _compile_check(arguments[1], where)
        return lambda value: (
            isinstance(value, dict)
            and all(
                isinstance(key, str) and (value_check is None or value_check(item))
                for key, item in value.items()
            )
        )
    raise TypeError(f"{where}: type {hint!r} cannot travel on the kernel wire")


def _accept_any(value: Any) -> bool:
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class _KindCodec:
    kind: type[Message]
    field_names: tuple[str, ...]
    values_of: Callable[[Message], tuple[Any, ...]]
    checks: tuple[tuple[int, str, _Check], ...]


def _build_codec(message_class: type[Message]) -> _KindCodec:
    # Every message kind is a dataclass; the Message marker base cannot say so to mypy.
    kind_fields = dataclasses.fields(message_class)  # type: ignore[arg-type]
    names = tuple(field.name for field in kind_fields)
    hints = typing.get_type_hints(message_class)
    checks = []
    for position, name in enumerate(names):
        check = _compile_check(hints[name], f"{message_class.__name__}.{name}")
        if check is not None:
            checks.append((position, name, check))
    return _KindCodec(message_class, names, _field_getter(names), tuple(checks))


_CODECS_BY_NAME: dict[str, _KindCodec] = {
    name: _build_codec(message_class) for name, message_class in MESSAGE_KINDS.items()
}
_CODECS_BY_CLASS: dict[type, _KindCodec] = {codec.kind: codec for codec in _CODECS_BY_NAME.values()}


# ---------------------------------------------------------------------------------- encode


def _codec_for_instance(message: Message) -> _KindCodec:
    codec = _CODECS_BY_CLASS.get(type(message))
    if codec is None:
        raise InvalidArgument(f"{type(message).__name__} is not a registered message kind")
    return codec


def _plain_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a value of type {type(value).__name__} cannot travel on the kernel wire")


def _packer(default: Callable[[Any], Any]) -> msgpack.Packer:
    # msgpack's default 1 MiB buffer makes nested packers (one per tensor or nested
    # message) cost tens of microseconds in allocation; headers are small and grow on need.
    return msgpack.Packer(default=default, buf_size=_PACKER_BUFFER_BYTES)


class _Encoder:
    """Collects the buffer frames while msgpack walks one message.

    A class rather than a closure: a closure that hands itself to nested packers is a
    reference cycle, which would keep every tensor alive until the garbage collector runs.
    """

    __slots__ = ("depth", "descriptor_packer", "frames", "spill")

    def __init__(self, spill: Spill | None) -> None:
        self.frames: list[bytes | memoryview] = [VERSION, b""]
        self.spill = spill
        # Descriptors hold only plain values, so one packer serves them all without reentry.
        self.descriptor_packer = _packer(_plain_scalar)
        self.depth = 0

    def describe(self, tensor: Tensor) -> tuple[str, str, tuple[int, ...], Any]:
        """The tensor's descriptor, its bytes taken as a buffer frame (or by ``spill``)."""
        buffer = tensor_to_buffer(tensor)
        where = None if self.spill is None else self.spill(buffer)
        if where is None:
            frames = self.frames
            frames.append(buffer)
            where = len(frames) - _BUFFERS_START - 1
        return (tensor.name, tensor.datatype, tensor.shape, where)

    def pack_extension(self, value: Any) -> Any:
        if type(value) is Tensor:
            descriptor = self.describe(value)
            return msgpack.ExtType(_TENSOR_EXT, self.descriptor_packer.pack(descriptor))
        if isinstance(value, Message):
            codec = _codec_for_instance(value)
            fields = (codec.kind.__name__, *codec.values_of(value))
            if self.depth >= _MAX_NESTING:
                raise InvalidArgument(f"messages are nested more than {_MAX_NESTING} deep")
            self.depth += 1
            try:
                packed = _packer(self.pack_extension).pack(fields)
            finally:
                self.depth -= 1
            return msgpack.ExtType(_MESSAGE_EXT, packed)
        return _plain_scalar(value)


def encode(envelope: Envelope, spill: Spill | None = None) -> list[bytes | memoryview]:
    """``[VERSION, header, *buffers]``; tensor buffers are views of the tensors' arrays,
    which must therefore stay unchanged until the frames are sent. ``spill`` may take any
    tensor's bytes instead of a buffer frame."""
    body = envelope.body
    kind = type(body).__name__
    encoder = _Encoder(spill)
    try:
        flat = _FLAT_ENCODERS.get(type(body))
        # A flat encoder declines (None) before it takes any tensor's frame.
        values = flat(encoder, body) if flat is not None else None
        if values is not None:
            header = (envelope.msg_id, _FLAT_PREFIX + kind, envelope.src, envelope.dst,
                      envelope.reply_to, envelope.deadline, envelope.trace, values)
            encoder.frames[1] = encoder.descriptor_packer.pack(header)
            return encoder.frames
        header = (envelope.msg_id, kind, envelope.src, envelope.dst, envelope.reply_to,
                  envelope.deadline, envelope.trace, _codec_for_instance(body).values_of(body))
        encoder.frames[1] = _packer(encoder.pack_extension).pack(header)
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidArgument(f"cannot encode {kind}: {error}") from None
    return encoder.frames


# ---------------------------------------------------------------------------------- decode


def _build_message(kind: Any, values: tuple[Any, ...]) -> Message:
    codec = _CODECS_BY_NAME.get(kind) if isinstance(kind, str) else None
    if codec is None:
        raise InvalidArgument(f"unknown message kind {kind!r}")
    if type(values) is not tuple or len(values) != len(codec.field_names):
        raise InvalidArgument(
            f"{kind} needs {len(codec.field_names)} field values, got "
            f"{len(values) if type(values) is tuple else type(values).__name__}"
        )
    for position, name, check in codec.checks:
        if not check(values[position]):
            raise InvalidArgument(
                f"{kind}.{name} has a value of the wrong type ({type(values[position]).__name__})"
            )
    return codec.kind(*values)


def _frame_buffer(frame: Any) -> Any:
    return getattr(frame, "buffer", frame)


class _Decoder:
    """Turns the header's extension values back into tensors and nested messages.

    A class rather than a closure, for the same reason as ``_Encoder``: the frames it holds
    may be large and must be released as soon as decoding ends.
    """

    __slots__ = ("buffer_count", "depth", "frames", "unspill")

    def __init__(self, frames: Sequence[Any], unspill: Unspill | None) -> None:
        self.frames = frames
        self.unspill = unspill
        self.buffer_count = len(frames) - _BUFFERS_START
        self.depth = 0

    def unpack_extension(self, code: int, data: bytes) -> Any:
        if code == _TENSOR_EXT:
            return self.tensor(msgpack.unpackb(data, use_list=False))
        if code == _MESSAGE_EXT:
            if self.depth >= _MAX_NESTING:
                raise InvalidArgument(f"messages are nested more than {_MAX_NESTING} deep")
            self.depth += 1
            try:
                nested = msgpack.unpackb(data, use_list=False, ext_hook=self.unpack_extension)
            finally:
                self.depth -= 1
            if type(nested) is not tuple or not nested:
                raise InvalidArgument("malformed nested message in the header")
            return _build_message(nested[0], nested[1:])
        raise InvalidArgument(f"unknown extension type {code} in the header")

    def tensor(self, descriptor: Any) -> Tensor:
        """The tensor a ``(name, datatype, shape, where)`` descriptor stands for."""
        if type(descriptor) is not tuple or len(descriptor) != 4:
            raise InvalidArgument("malformed tensor descriptor in the header")
        name, datatype, shape, index = descriptor
        if type(name) is not str or type(datatype) is not str or type(shape) is not tuple:
            raise InvalidArgument("malformed tensor descriptor in the header")
        if type(index) is not int:
            if self.unspill is None:
                raise InvalidArgument(
                    f"tensor '{name}' refers to {index!r}, which this transport cannot read"
                )
            buffer = self.unspill(index)
        elif not 0 <= index < self.buffer_count:
            raise InvalidArgument(
                f"tensor '{name}' refers to buffer {index!r} but the message has "
                f"{self.buffer_count} buffers"
            )
        else:
            buffer = _frame_buffer(self.frames[_BUFFERS_START + index])
        return tensor_from_buffer(name, datatype, shape, buffer)

    def tensors(self, descriptors: Any) -> tuple[Tensor, ...]:
        if type(descriptors) is not tuple:
            raise InvalidArgument("malformed tensor list in the header")
        return tuple(map(self.tensor, descriptors))


# ------------------------------------------------------------------------------ flat kinds
#
# ``InferBatch`` and ``BatchResult`` cross the executor link once per batch, so they skip the
# generic walk (a nested packer and an ExtType per request and per tensor, each unpacked by a
# hook): their values are packed as plain nested arrays in one call and rebuilt by hand, with
# the same checks, from one unpack. The header names them ``flat:<kind>``; one whose
# parameters hold more than plain values (a tensor, a message, an array) takes the generic
# layout under its own name. The layouts follow the dataclasses' field order, which the
# assertions below pin: a field added to one of these kinds must be added here too.

_FLAT_PREFIX = "flat:"
_PLAIN_PARAMETER = frozenset({str, int, float, bool, bytes, type(None)})

_REQUEST_FIELDS = ("model", "inputs", "version", "id", "outputs", "parameters", "priority",
                   "timeout_us", "classification")
_RESPONSE_FIELDS = ("model", "version", "outputs", "id", "parameters")
assert _CODECS_BY_CLASS[InferRequest].field_names == _REQUEST_FIELDS
assert _CODECS_BY_CLASS[InferResponse].field_names == _RESPONSE_FIELDS
assert _CODECS_BY_CLASS[InferBatch].field_names == ("model", "version", "instance", "requests")
assert _CODECS_BY_CLASS[BatchResult].field_names == ("results", "compute_ns", "started_ns")
assert _CODECS_BY_CLASS[Failure].field_names == ("code", "message")


def _plain(parameters: dict[str, Any]) -> bool:
    return not parameters or all(type(v) in _PLAIN_PARAMETER for v in parameters.values())


def _flat_infer_batch(encoder: _Encoder, batch: InferBatch) -> tuple[Any, ...] | None:
    if not all(_plain(r.parameters) for r in batch.requests):
        return None
    describe = encoder.describe
    requests = tuple(
        (r.model, tuple(map(describe, r.inputs)), r.version, r.id, r.outputs, r.parameters,
         r.priority, r.timeout_us, r.classification)
        for r in batch.requests
    )
    return (batch.model, batch.version, batch.instance, requests)


def _flat_batch_result(encoder: _Encoder, result: BatchResult) -> tuple[Any, ...] | None:
    if not all(_plain(r.parameters) for r in result.results if type(r) is InferResponse):
        return None
    describe = encoder.describe
    results = tuple(
        (r.model, r.version, tuple(map(describe, r.outputs)), r.id, r.parameters)
        if isinstance(r, InferResponse) else (r.code, r.message)  # a Failure: two values
        for r in result.results
    )
    return (results, result.compute_ns, result.started_ns)


def _infer_batch_from(decoder: _Decoder, values: tuple[Any, ...]) -> InferBatch:
    model, version, instance, requests = values
    _expect_types(("model", model, str), ("version", version, int),
                  ("instance", instance, int), ("requests", requests, tuple))
    tensors = decoder.tensors
    built = []
    for fields in requests:
        (name, inputs, version_text, request_id, outputs, parameters, priority, timeout,
         classification) = fields
        _expect_types(("model", name, str), ("version", version_text, str),
                      ("id", request_id, str), ("outputs", outputs, tuple),
                      ("parameters", parameters, dict), ("priority", priority, int),
                      ("timeout_us", timeout, int), ("classification", classification, dict))
        _expect_names("outputs", outputs)
        _expect_names("parameters", parameters)
        _expect_names("classification", classification)
        built.append(InferRequest(name, tensors(inputs), version_text, request_id, outputs,
                                  parameters, priority, timeout, classification))
    return InferBatch(model, version, instance, tuple(built))


def _batch_result_from(decoder: _Decoder, values: tuple[Any, ...]) -> BatchResult:
    results, compute_ns, started_ns = values
    _expect_types(("results", results, tuple), ("compute_ns", compute_ns, tuple),
                  ("started_ns", started_ns, int))
    if len(compute_ns) != 3 or not all(type(ns) is int for ns in compute_ns):
        raise InvalidArgument("BatchResult.compute_ns must be three integers")
    tensors = decoder.tensors
    built: list[InferResponse | Failure] = []
    for fields in results:
        if type(fields) is tuple and len(fields) == 2:
            code, message = fields
            _expect_types(("code", code, str), ("message", message, str))
            built.append(Failure(code, message))
            continue
        model, version, outputs, response_id, parameters = fields
        _expect_types(("model", model, str), ("version", version, str),
                      ("id", response_id, str), ("parameters", parameters, dict))
        _expect_names("parameters", parameters)
        built.append(InferResponse(model, version, tensors(outputs), response_id, parameters))
    return BatchResult(tuple(built), compute_ns, started_ns)


def _expect_types(*fields: tuple[str, Any, type]) -> None:
    for name, value, expected in fields:
        if type(value) is not expected:
            raise InvalidArgument(
                f"field '{name}' has a value of the wrong type ({type(value).__name__})"
            )


def _expect_names(field: str, values: tuple[Any, ...] | dict[Any, Any]) -> None:
    if not all(type(value) is str for value in values):
        raise InvalidArgument(f"field '{field}' holds a name that is not a string")


_FLAT_ENCODERS: dict[type, Callable[[_Encoder, Any], tuple[Any, ...] | None]] = {
    InferBatch: _flat_infer_batch,
    BatchResult: _flat_batch_result,
}
_FLAT_DECODERS: dict[str, Callable[[_Decoder, tuple[Any, ...]], Message]] = {
    _FLAT_PREFIX + "InferBatch": _infer_batch_from,
    _FLAT_PREFIX + "BatchResult": _batch_result_from,
}


def _build_flat(kind: str, decoder: _Decoder, values: Any) -> Message:
    build = _FLAT_DECODERS[kind]
    kind = kind.removeprefix(_FLAT_PREFIX)
    if type(values) is not tuple:
        raise InvalidArgument(f"malformed {kind}: expected an array of field values")
    try:
        return build(decoder, values)
    except InvalidArgument as error:
        raise InvalidArgument(f"malformed {kind}: {error.message}") from None
    except (TypeError, ValueError) as error:  # a wrong count of values to unpack
        raise InvalidArgument(f"malformed {kind}: {error}") from None


def decode(frames: Sequence[Any], unspill: Unspill | None = None) -> Envelope:
    """The envelope ``encode`` produced. Frames may be ``bytes``, ``memoryview`` or objects
    with a ``.buffer`` (zmq frames received with ``copy=False``); tensors are numpy views
    of their frames (read-only when the frame is), or of what ``unspill`` returns for a
    tensor the sender's transport took."""
    if len(frames) < _BUFFERS_START:
        raise InvalidArgument(f"a kernel message needs at least 2 frames, got {len(frames)}")
    version = _frame_buffer(frames[0])
    if version != VERSION:
        shown = bytes(version[:4]) if isinstance(version, (bytes, memoryview)) else version
        raise InvalidArgument(f"unsupported wire version {shown!r}, expected {VERSION!r}")
    decoder = _Decoder(frames, unspill)
    try:
        header = msgpack.unpackb(
            _frame_buffer(frames[1]), use_list=False, ext_hook=decoder.unpack_extension
        )
    except InvalidArgument:
        raise
    # msgpack reports malformed input with many exception types (ValueError, TypeError,
    # UnicodeDecodeError, its own ExtraData/StackError, RecursionError for deep nesting);
    # callers are promised InvalidArgument only.
    except Exception as error:
        raise InvalidArgument(
            f"malformed message header: {type(error).__name__}: {error}"
        ) from None
    if type(header) is not tuple or len(header) != _HEADER_LENGTH:
        raise InvalidArgument("malformed message header: expected an 8-item array")
    msg_id, kind, src, dst, reply_to, deadline, trace, values = header
    if (
        type(msg_id) is not int
        or type(src) is not str
        or type(dst) is not str
        or not (reply_to is None or type(reply_to) is int)
        or not (deadline is None or type(deadline) in (int, float))
        or not (trace is None or type(trace) is str)
    ):
        raise InvalidArgument("malformed message header: an envelope field has the wrong type")
    body = (_build_flat(kind, decoder, values) if kind in _FLAT_DECODERS
            else _build_message(kind, values))
    return Envelope(msg_id, src, dst, body, reply_to, deadline, trace)
