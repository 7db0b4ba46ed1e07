"""Tests of the process link's dense form of the kernel wire (``wire.encode_link`` and
``wire.decode_link``): every kind round-trips, alone or several to a multipart message; small
tensors travel inside the header and large ones as frames of their own, still zero-copy; and a
malformed head or header raises InvalidArgument and nothing else."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    MESSAGE_KINDS,
    BatchResult,
    Envelope,
    InferBatch,
    InferRequest,
    InferResponse,
)
from inferd.protocols.tensors import from_numpy
from tests.protocols.test_wire import any_tensor, envelopes_of, messages_of


def encoded(*envelopes: Envelope, spill: wire.Spill | None = None) -> list[Any]:
    frames: list[Any] = []
    for envelope in envelopes:
        wire.encode_link(envelope, spill, frames)
    return frames


def decoded(frames: list[Any], unspill: wire.Unspill | None = None) -> list[Envelope]:
    """Every envelope of a multipart message, as the process link walks it."""
    envelopes, start = [], 0
    while start < len(frames):
        end = wire.link_end(frames, start)
        envelopes.append(wire.decode_link(frames, start, end, unspill))
        start = end
    return envelopes


def request_with(*arrays: np.ndarray) -> Envelope:
    inputs = tuple(from_numpy(f"in{i}", array) for i, array in enumerate(arrays))
    return Envelope(3, "scheduler", "executor/cpu", InferRequest("m", inputs), deadline=2.5)


@pytest.mark.parametrize("kind", sorted(MESSAGE_KINDS))
@given(data=st.data())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_message_kind_round_trips(kind: str, data: st.DataObject) -> None:
    envelope = data.draw(envelopes_of(messages_of(MESSAGE_KINDS[kind])))
    assert decoded(encoded(envelope)) == [envelope]


@given(st.lists(st.lists(any_tensor, max_size=3), min_size=1, max_size=4))
@settings(deadline=None)
def test_several_envelopes_share_one_multipart_message(batches: list[list[Any]]) -> None:
    envelopes = [Envelope(i, "a", "b", InferRequest("m", tuple(inputs)), reply_to=i)
                 for i, inputs in enumerate(batches)]
    frames = [zmq.Frame(bytes(frame)) for frame in encoded(*envelopes)]
    assert decoded(frames) == envelopes


def test_small_tensors_travel_inside_the_header_frame() -> None:
    frames = encoded(request_with(np.arange(4, dtype=np.float32), np.ones(16, np.int32)))
    assert len(frames) == 1
    assert frames[0][0] == wire.LINK_VERSION


def test_large_tensors_take_frames_of_their_own_without_a_copy() -> None:
    small = np.arange(3, dtype=np.int8)
    large = np.arange(wire.INLINE_BELOW, dtype=np.uint8)
    envelope = request_with(large, small, large)
    frames = encoded(envelope, envelope)
    assert len(frames) == 6  # two messages: a head and two large tensors each
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), large)
    received = [zmq.Frame(frame) for frame in frames]
    first, second = decoded(received)
    assert first == envelope and second == envelope
    assert np.shares_memory(first.body.inputs[2].data,  # type: ignore[attr-defined]
                            np.frombuffer(received[2].buffer, np.uint8))


def test_a_spilled_tensor_travels_as_the_transports_reference() -> None:
    taken: list[bytes] = []

    def spill(buffer: memoryview | bytes) -> Any:
        taken.append(bytes(buffer))
        return ("segment", len(taken) - 1)

    array = np.arange(5, dtype=np.int64)
    frames = encoded(request_with(array), spill=spill)
    assert len(frames) == 1 and taken == [array.tobytes()]
    tensor = decoded(frames, lambda where: taken[where[1]])[0].body.inputs[0]  # type: ignore[attr-defined]
    assert np.array_equal(tensor.data, array)


def test_batches_keep_their_flat_layout() -> None:
    request = InferRequest("m", (from_numpy("x", np.ones(2, np.float32)),), id="1")
    response = InferResponse("m", "1", (from_numpy("y", np.zeros(2, np.float32)),), id="1")
    envelopes = [Envelope(1, "s", "e", InferBatch("m", 1, 7, (request, request))),
                 Envelope(2, "e", "s", BatchResult((response,), (1, 2, 3), 4), reply_to=1)]
    frames = encoded(*envelopes)
    assert len(frames) == 2
    assert b"flat:InferBatch" in bytes(frames[0]) and b"flat:BatchResult" in bytes(frames[1])
    assert decoded(frames) == envelopes


def test_public_decode_takes_an_inline_tensor() -> None:
    """A bin in place of a buffer index is the tensor's bytes in either form."""
    head = encoded(request_with(np.arange(3, dtype=np.int16)))[0]
    envelope = wire.decode([wire.VERSION, bytes(head)[5:]])
    assert np.array_equal(envelope.body.inputs[0].data, [0, 1, 2])  # type: ignore[attr-defined]


@pytest.mark.parametrize(("frames", "message"), [
    ([b""], "not a link message head"),
    ([b"\x01\x00\x00\x00\x00"], "not a link message head"),
    ([b"\x02\x02\x00\x00\x00", b"x"], "a link message of 2 buffers has 1"),
])
def test_a_malformed_head_is_refused(frames: list[bytes], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        wire.link_end(frames, 0)


def test_an_inline_tensor_of_the_wrong_size_is_refused() -> None:
    request = InferRequest("m", (from_numpy("x", np.arange(3, dtype=np.int32)),))
    head = bytes(encoded(Envelope(1, "s", "e", InferBatch("m", 1, 7, (request,))))[0])
    header = msgpack.unpackb(head[5:], use_list=False)
    (model, inputs, *rest), = header[7][3]
    (name, datatype, shape, data), = inputs
    assert data == np.arange(3, dtype=np.int32).tobytes()
    forged = (*header[:7], (*header[7][:3], ((model, ((name, datatype, shape, data[:-1]),),
                                               *rest),)))
    with pytest.raises(InvalidArgument, match="malformed InferBatch"):
        decoded([head[:5] + msgpack.packb(forged)])


@given(st.binary(max_size=200))
def test_arbitrary_heads_raise_only_invalid_argument(payload: bytes) -> None:
    frames = [b"\x02\x00\x00\x00\x00" + payload]
    try:
        decoded(frames)
    except InvalidArgument:
        pass
