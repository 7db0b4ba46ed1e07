"""The kernel wire format: an ``Envelope`` as a list of frames and back.

Frames are ``[VERSION, header, *buffers]``. The header is msgpack of ``(msg_id, kind, src,
dst, reply_to, deadline, trace, body)``, where ``body`` holds the message's field values in
declaration order. A ``Tensor`` anywhere in a message is packed as an ExtType holding
``(name, datatype, shape, buffer_index)`` and its bytes travel as a buffer frame of their own,
never copied on either side, unless the transport takes it (``spill``): the descriptor then
holds the transport's reference in place of the buffer index, and the receiving transport
turns it back into a buffer (``unspill``), as the process link does with shared memory. A
tensor whose bytes stay in a client's CUDA shared memory (``inferd.protocols.device_tensors``)
holds ``("cuda", handle, device, offset, byte size, region)`` there instead. A
nested message is an ExtType holding ``(kind, *values)``. The two kinds of every batch,
``InferBatch`` and ``BatchResult``, travel flat instead (``flat:<kind>``: plain nested arrays,
one pack and one unpack; their layouts are ``inferd.protocols.wire.flat``'s). The codec is
generic over ``MESSAGE_KINDS`` and checks each decoded field against the kind's type hints
(the tables are ``inferd.protocols.wire.kinds``'s; the flat kinds are checked by hand), so a
peer can never hand the kernel a message of the wrong shape. msgpack arrays decode as tuples,
so a list inside a ``dict`` value comes back as a tuple. Anything malformed raises
``InvalidArgument``. This module owns the frame layout, the header, tensor descriptors and
nested messages. Pure: it never touches sockets (routing frames are the transport's business).

The process link (``inferd.kernel.runtime.process_link``) uses a denser form of the same header,
``encode_link``/``decode_link``, since it pays per frame and per message on every request: a
message is one head frame, ``[LINK_VERSION, buffer count (uint32 LE)] + header``, followed by
only its large tensors' frames; a tensor under ``INLINE_BELOW`` bytes travels inside the header
(a msgpack bin in place of the buffer index), so a message of small tensors is a single frame,
and several messages can follow one another in one multipart message (each head says how many
frames are its own). Either decoder takes a bin there as the tensor's bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import numpy as np

from inferd.protocols.device_tensors import (
    DeviceArray,
    device_tensor,
    is_reference,
    reference,
    window_from,
)
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import Envelope, Message, Tensor
from inferd.protocols.tensors import tensor_from_buffer, tensor_to_buffer
from inferd.protocols.wire.flat import FLAT_DECODERS, FLAT_ENCODERS, FLAT_PREFIX, build_flat
from inferd.protocols.wire.kinds import build_message, codec_for_instance

VERSION = b"\x01"
LINK_VERSION = 2
# A tensor smaller than this crosses the process link inside its message's header: copying
# it there costs less than a frame of its own on both sides.
INLINE_BELOW = 16 * 1024
_LINK_HEAD = struct.Struct("<BI")  # LINK_VERSION, how many buffer frames follow the head

_TENSOR_EXT = 1
_MESSAGE_EXT = 2
_HEADER_LENGTH = 8
_BUFFERS_START = 2
_PACKER_BUFFER_BYTES = 4096
# Each nested message costs a C and a Python frame on both sides; unbounded nesting from a
# peer would overflow the C stack, far below Python's recursion limit.
_MAX_NESTING = 32

# The transport's hooks for large tensors: ``Spill`` takes a tensor's bytes and returns a
# small reference (any plain msgpack value but an int), or None to send them as a frame;
# ``Unspill`` turns such a reference back into a buffer.
Spill = Callable[["memoryview | bytes"], Any]
Unspill = Callable[[Any], Any]


# ---------------------------------------------------------------------------------- encode


def _plain_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a value of type {type(value).__name__} cannot travel on the kernel wire")


def _packer(default: Callable[[Any], Any]) -> msgpack.Packer:
    # msgpack's default 1 MiB buffer makes nested packers (one per tensor or nested
    # message) cost tens of microseconds in allocation; headers are small and grow on need.
    return msgpack.Packer(default=default, buf_size=_PACKER_BUFFER_BYTES)


class FrameEncoder:
    """Collects the buffer frames while msgpack walks one message.

    A class rather than a closure: a closure that hands itself to nested packers is a
    reference cycle, which would keep every tensor alive until the garbage collector runs.
    """

    __slots__ = ("depth", "descriptor_packer", "frames", "inline_below", "spill")

    def __init__(self, spill: Spill | None, inline_below: int = 0) -> None:
        self.frames: list[bytes | memoryview] = [VERSION, b""]
        self.spill = spill
        self.inline_below = inline_below
        # Descriptors hold only plain values, so one packer serves them all without reentry.
        self.descriptor_packer = _packer(_plain_scalar)
        self.depth = 0

    def describe(self, tensor: Tensor) -> tuple[str, str, tuple[int, ...], Any]:
        """The tensor's descriptor, its bytes taken as a buffer frame (or by ``spill``); a
        tensor in device memory is described by its window instead of its bytes."""
        if type(tensor.data) is DeviceArray:
            return (tensor.name, tensor.datatype, tensor.shape, reference(tensor.data.window))
        buffer = tensor_to_buffer(tensor)
        where = None if self.spill is None else self.spill(buffer)
        if where is None and len(buffer) < self.inline_below:  # len: buffers are bytes-shaped
            where = buffer
        elif where is None:
            frames = self.frames
            frames.append(buffer)
            where = len(frames) - _BUFFERS_START - 1
        return (tensor.name, tensor.datatype, tensor.shape, where)

    def pack_extension(self, value: Any) -> Any:
        if type(value) is Tensor:
            descriptor = self.describe(value)
            return msgpack.ExtType(_TENSOR_EXT, self.descriptor_packer.pack(descriptor))
        if isinstance(value, Message):
            codec = codec_for_instance(value)
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
    encoder = FrameEncoder(spill)
    encoder.frames[1] = _header(envelope, encoder)
    return encoder.frames


def encode_link(envelope: Envelope, spill: Spill | None, out: list[bytes | memoryview]) -> None:
    """Append ``envelope``'s link frames to ``out``: its head (the header, tensors under
    ``INLINE_BELOW`` bytes inside it), then the frames of its larger tensors that ``spill``
    did not take (views, as ``encode``'s). Nothing is appended when it cannot be encoded."""
    encoder = FrameEncoder(spill, INLINE_BELOW)
    header = _header(envelope, encoder)
    buffers = encoder.frames
    out.append(_LINK_HEAD.pack(LINK_VERSION, len(buffers) - _BUFFERS_START) + header)
    if len(buffers) > _BUFFERS_START:
        out.extend(buffers[_BUFFERS_START:])


def _header(envelope: Envelope, encoder: FrameEncoder) -> bytes:
    body = envelope.body
    kind = type(body).__name__
    try:
        flat = FLAT_ENCODERS.get(type(body))
        # A flat encoder declines (None) before it takes any tensor's frame.
        values = flat(encoder, body) if flat is not None else None
        if values is not None:
            header = (envelope.msg_id, FLAT_PREFIX + kind, envelope.src, envelope.dst,
                      envelope.reply_to, envelope.deadline, envelope.trace, values)
            packed: bytes = encoder.descriptor_packer.pack(header)
            return packed
        header = (envelope.msg_id, kind, envelope.src, envelope.dst, envelope.reply_to,
                  envelope.deadline, envelope.trace, codec_for_instance(body).values_of(body))
        packed = _packer(encoder.pack_extension).pack(header)
        return packed
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidArgument(f"cannot encode {kind}: {error}") from None


# ---------------------------------------------------------------------------------- decode


def _frame_buffer(frame: Any) -> Any:
    if type(frame) is bytes:  # what most heads are: no attribute lookup to fail
        return frame
    return getattr(frame, "buffer", frame)


class FrameDecoder:
    """Turns the header's extension values back into tensors and nested messages.

    A class rather than a closure, for the same reason as ``FrameEncoder``: the frames it holds
    may be large and must be released as soon as decoding ends.
    """

    __slots__ = ("buffer_count", "buffers", "depth", "unspill")

    def __init__(self, buffers: Sequence[Any], unspill: Unspill | None) -> None:
        self.buffers = buffers  # the message's buffer frames, nothing else
        self.unspill = unspill
        self.buffer_count = len(buffers)
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
            return build_message(nested[0], nested[1:])
        raise InvalidArgument(f"unknown extension type {code} in the header")

    def tensor(self, descriptor: Any) -> Tensor:
        """The tensor a ``(name, datatype, shape, where)`` descriptor stands for."""
        if type(descriptor) is not tuple or len(descriptor) != 4:
            raise InvalidArgument("malformed tensor descriptor in the header")
        name, datatype, shape, index = descriptor
        if type(name) is not str or type(datatype) is not str or type(shape) is not tuple:
            raise InvalidArgument("malformed tensor descriptor in the header")
        if type(index) is bytes:  # a small tensor, inline
            return tensor_from_buffer(name, datatype, shape, index)
        if type(index) is not int:
            if is_reference(index):
                return device_tensor(name, datatype, shape, window_from(index))
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
            buffer = _frame_buffer(self.buffers[index])
        return tensor_from_buffer(name, datatype, shape, buffer)

    def tensors(self, descriptors: Any) -> tuple[Tensor, ...]:
        if type(descriptors) is not tuple:
            raise InvalidArgument("malformed tensor list in the header")
        return tuple(map(self.tensor, descriptors))


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
    decoder = FrameDecoder(frames[_BUFFERS_START:], unspill)
    return _envelope(_frame_buffer(frames[1]), decoder)


def link_end(frames: Sequence[Any], start: int) -> int:
    """The index just past the link message whose head is ``frames[start]`` (where the next
    one starts); ``InvalidArgument`` when that is no link head, or its frames are missing."""
    head = _frame_buffer(frames[start])
    if len(head) < _LINK_HEAD.size or head[0] != LINK_VERSION:
        raise InvalidArgument(f"not a link message head (expected version {LINK_VERSION})")
    count: int = _LINK_HEAD.unpack_from(head)[1]
    end = start + 1 + count
    if end > len(frames):
        raise InvalidArgument(f"a link message of {count} buffers has {len(frames) - start - 1}")
    return end


def decode_link(frames: Sequence[Any], start: int, end: int,
                unspill: Unspill | None = None) -> Envelope:
    """The envelope ``encode_link`` put at ``frames[start:end]`` (``end`` from ``link_end``);
    tensors as ``decode`` makes them, a small one over its own copy of its bytes."""
    decoder = FrameDecoder(frames[start + 1:end], unspill)
    return _envelope(memoryview(_frame_buffer(frames[start]))[_LINK_HEAD.size:], decoder)


def _envelope(header_bytes: Any, decoder: FrameDecoder) -> Envelope:
    try:
        header = msgpack.unpackb(header_bytes, use_list=False, ext_hook=decoder.unpack_extension)
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
    body = (build_flat(kind, decoder, values) if kind in FLAT_DECODERS
            else build_message(kind, values))
    return Envelope(msg_id, src, dst, body, reply_to, deadline, trace)
