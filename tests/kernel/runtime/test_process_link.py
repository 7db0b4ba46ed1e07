"""The process link's framing, seen from a raw ZeroMQ peer: what the hub sends a peer in one
turn of the event loop leaves as one multipart message, the envelopes in order, small tensors
inside their headers; a burst from the peer is delivered whole; a malformed message is
dropped and the link keeps serving; and what was queued for a peer that died never reaches
its next process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
import zmq
import zmq.asyncio

from inferd.kernel.runtime.process_link import ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols.wire import codec as wire
from inferd.protocols.messages import (
    Envelope,
    ExecutorHello,
    HealthRequest,
    InferRequest,
)
from inferd.protocols.tensors import from_numpy

pytestmark = pytest.mark.anyio

PEER = "executor/raw"


class RawPeer:
    """An executor's end of the link made of a bare DEALER: what it sends and receives is
    exactly the frames on the socket."""

    def __init__(self, socket: zmq.asyncio.Socket) -> None:
        self.socket = socket

    async def send(self, *envelopes: Envelope) -> None:
        frames: list[Any] = []
        for envelope in envelopes:
            wire.encode_link(envelope, None, frames)
        await self.socket.send_multipart(frames)

    async def receive(self) -> list[Envelope]:
        """The envelopes of the next multipart message."""
        with anyio.fail_after(5):
            frames = await self.socket.recv_multipart(copy=False)
        envelopes, start = [], 0
        while start < len(frames):
            end = wire.link_end(frames, start)
            envelopes.append(wire.decode_link(frames, start, end))
            start = end
        return envelopes


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[tuple[Router, ProcessLink, RawPeer, list[Envelope]]]:
    """A hub router and link, a raw peer known to it (its hello sent), and what the hub's
    ``sink`` actor received."""
    context = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/hub"
    router = Router("main")
    link = ProcessLink.hub(router, context, endpoint)
    received: list[Envelope] = []
    router.register("sink", received.append)
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, PEER.encode())
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    peer = RawPeer(socket)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(link.run)
            await peer.send(Envelope(1, PEER, "sink", ExecutorHello(PEER, 1, ())))
            with anyio.fail_after(5):
                while PEER not in link.peers:
                    await anyio.sleep(0.01)
            yield router, link, peer, received
            tasks.cancel_scope.cancel()
    finally:
        link.close()
        socket.close()
        context.term()


async def test_what_one_turn_sends_a_peer_leaves_as_one_message(hub) -> None:  # type: ignore[no-untyped-def]
    router, _, peer, _ = hub
    small = from_numpy("x", np.arange(4, dtype=np.float32))
    for index in range(5):  # one turn of the loop: no await between them
        router.tell(PEER, InferRequest("m", (small,), id=str(index)))
    envelopes = await peer.receive()
    assert [envelope.body.id for envelope in envelopes] == ["0", "1", "2", "3", "4"]  # type: ignore[attr-defined]
    assert all(envelope.body.inputs == (small,) for envelope in envelopes)  # type: ignore[attr-defined]
    router.tell(PEER, HealthRequest("next turn"))
    assert [envelope.body for envelope in await peer.receive()] == [HealthRequest("next turn")]


async def test_large_tensors_keep_frames_of_their_own_in_a_burst(hub) -> None:  # type: ignore[no-untyped-def]
    router, link, peer, _ = hub
    link.segments.enabled = False  # as with --link-shm-threshold 0: frames, not segments
    large = from_numpy("big", np.arange(wire.INLINE_BELOW, dtype=np.int32))
    small = from_numpy("small", np.ones(3, np.int8))
    router.tell(PEER, InferRequest("m", (large, small), id="a"))
    router.tell(PEER, InferRequest("m", (small,), id="b"))
    first, second = await peer.receive()
    assert first.body.inputs == (large, small) and second.body.inputs == (small,)  # type: ignore[attr-defined]


async def test_a_burst_from_a_peer_is_delivered_whole_and_in_order(hub) -> None:  # type: ignore[no-untyped-def]
    _, _, peer, received = hub
    await peer.send(*(Envelope(i, PEER, "sink", HealthRequest(str(i))) for i in range(2, 6)))
    with anyio.fail_after(5):
        while len(received) < 5:
            await anyio.sleep(0.01)
    assert [envelope.body for envelope in received[1:]] == [
        HealthRequest(str(i)) for i in range(2, 6)]


async def test_a_malformed_message_is_dropped_and_the_link_keeps_serving(hub) -> None:  # type: ignore[no-untyped-def]
    _, _, peer, received = hub
    good = Envelope(7, PEER, "sink", HealthRequest("after"))
    broken: list[Any] = []
    wire.encode_link(good, None, broken)
    await peer.socket.send_multipart([b"\x02\x00\x00\x00\x00garbage", *broken])  # bad header
    await peer.socket.send_multipart([b"not a head", *broken])  # the rest is unreadable
    await peer.send(good)
    with anyio.fail_after(5):
        while len(received) < 3:
            await anyio.sleep(0.01)
    assert [envelope.body for envelope in received[1:]] == [HealthRequest("after")] * 2


async def test_what_was_queued_for_a_dead_peer_never_reaches_its_next_process(hub) -> None:  # type: ignore[no-untyped-def]
    router, link, peer, _ = hub
    router.tell(PEER, HealthRequest("for the dead one"))
    link.forget(PEER, "its process died")  # in the same turn, before the queue left
    await peer.send(Envelope(9, PEER, "sink", ExecutorHello(PEER, 2, ())))
    with anyio.fail_after(5):
        while PEER not in link.peers:
            await anyio.sleep(0.01)
    router.tell(PEER, HealthRequest("for the new one"))
    assert [envelope.body for envelope in await peer.receive()] == [
        HealthRequest("for the new one")]
