"""Large tensors on the process link through shared memory (inferd.kernel.runtime.link_memory): a
real hub and uplink joined by ZeroMQ in this process, an echo actor behind the uplink, and
the segments watched in /dev/shm."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import numpy as np
import pytest
import zmq

from inferd.kernel.runtime import link_memory
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.process_link import LinkMemory, ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import Envelope, InferRequest, InferResponse, Tensor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not link_memory.SHM_DIR.is_dir(), reason="no /dev/shm"),
]

THRESHOLD = 64 * 1024
LARGE = 256 * 1024 // 4  # FP32 elements: 256 KiB, above the threshold
SMALL = 16


def segments_of(server_pid: int) -> set[str]:
    prefix = f"{link_memory.PREFIX}{server_pid}-"
    return {name for name in os.listdir(link_memory.SHM_DIR) if name.startswith(prefix)}


class Echo(Actor):
    """Answers an InferRequest with its inputs as outputs, keeping nothing."""

    async def on_infer_request(self, request: InferRequest, envelope: Envelope) -> InferResponse:
        return InferResponse(request.model, "1", tuple(request.inputs))


@pytest.fixture
async def linked(tmp_path: Path) -> AsyncIterator[tuple[Router, ProcessLink, ProcessLink]]:
    context = zmq.Context()
    endpoint = f"ipc://{tmp_path}/hub"
    memory = LinkMemory(os.getpid(), threshold=THRESHOLD)
    hub, peer = Router("main"), Router("peer/one")
    hub_link = ProcessLink.hub(hub, context, endpoint, memory)
    peer_link = ProcessLink.uplink(peer, context, endpoint, "peer/one", memory)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hub_link.run)
            tasks.start_soon(peer_link.run)
            await tasks.start(Echo(peer, "peer/one").run)
            await tasks.start(Echo(hub, "hub-echo").run)
            peer.tell("hub-echo", InferRequest("hello", ()))  # makes the peer known
            with anyio.fail_after(5):
                while "peer/one" not in hub_link.peers:
                    await anyio.sleep(0.01)
            yield hub, hub_link, peer_link
            tasks.cancel_scope.cancel()
    finally:
        hub_link.close()
        peer_link.close()
        context.term()


async def wait_for(predicate: Callable[[], object], what: str) -> None:
    with anyio.move_on_after(5):
        while not predicate():
            gc.collect()
            await anyio.sleep(0.01)
        return
    pytest.fail(f"not within 5 s: {what}")


async def test_a_large_tensor_crosses_in_shared_memory_and_comes_back(linked) -> None:  # type: ignore[no-untyped-def]
    hub, hub_link, peer_link = linked
    values = np.arange(LARGE, dtype=np.float32)
    small = np.arange(SMALL, dtype=np.int32)
    request = InferRequest("echo", (
        Tensor("BIG", "FP32", (LARGE,), values), Tensor("SMALL", "INT32", (SMALL,), small),
    ))
    reply = await hub.ask("peer/one", request, timeout=5)
    assert isinstance(reply, InferResponse)
    big, little = reply.outputs
    assert np.array_equal(big.data, values) and np.array_equal(little.data, small)
    # The big tensor went out in a segment of the hub and came back in one of the peer's,
    # which the hub now maps read-only; the small one travelled as a frame.
    assert hub_link.segments.segment_count == 1
    assert peer_link.segments.segment_count == 1
    assert not big.data.flags.writeable
    assert little.data.base is not None and not isinstance(little.data.base, np.ndarray)

    # The peer dropped its views when it replied: the hub's segment is free again, and the
    # peer's comes back once the hub lets go of the reply.
    await wait_for(lambda: not hub_link.segments._lent.get("peer/one"), "hub segment released")
    assert peer_link.segments._lent.get("main")
    del reply, big, little
    await wait_for(lambda: not peer_link.segments._lent.get("main"), "peer segment released")

    # Released segments are reused: a second round trip creates none.
    before = segments_of(os.getpid())
    again = await hub.ask("peer/one", request, timeout=5)
    assert isinstance(again, InferResponse)
    assert np.array_equal(again.outputs[0].data, values)
    assert segments_of(os.getpid()) == before


async def test_segments_are_unlinked_when_the_links_close(tmp_path: Path) -> None:
    context = zmq.Context()
    memory = LinkMemory(os.getpid(), threshold=THRESHOLD)
    hub, peer = Router("main"), Router("peer/two")
    endpoint = f"ipc://{tmp_path}/hub"
    hub_link = ProcessLink.hub(hub, context, endpoint, memory)
    peer_link = ProcessLink.uplink(peer, context, endpoint, "peer/two", memory)
    before = segments_of(os.getpid())
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hub_link.run)
            tasks.start_soon(peer_link.run)
            await tasks.start(Echo(hub, "hub-echo").run)
            tensor = Tensor("BIG", "FP32", (LARGE,), np.ones(LARGE, np.float32))
            reply = await peer.ask("hub-echo", InferRequest("echo", (tensor,)), timeout=5)
            assert isinstance(reply, InferResponse)
            assert np.array_equal(reply.outputs[0].data, tensor.data)
            assert len(segments_of(os.getpid()) - before) == 2
            tasks.cancel_scope.cancel()
    finally:
        hub_link.close()
        peer_link.close()
        context.term()
    assert segments_of(os.getpid()) == before


def test_pool_falls_back_to_frames_below_the_threshold_and_past_its_capacity() -> None:
    pool = link_memory.SegmentPool(os.getpid(), threshold=THRESHOLD, capacity=2 * THRESHOLD)
    try:
        assert pool.spill("p", b"x" * (THRESHOLD - 1)) is None
        first = pool.spill("p", b"a" * THRESHOLD)
        second = pool.spill("p", memoryview(b"b" * THRESHOLD))
        assert first is not None and second is not None and first[0] != second[0]
        assert pool.spill("p", b"c" * THRESHOLD) is None  # full: a frame
        pool.release("p", [first[0]])
        third = pool.spill("p", b"d" * THRESHOLD)
        assert third is not None and third[0] == first[0]  # the freed segment, reused
        with open(link_memory.SHM_DIR / third[0], "rb") as segment:
            assert segment.read(4) == b"dddd"
        pool.forget("p")
        assert pool.spill("p", b"e" * THRESHOLD) is not None
    finally:
        pool.close()
    assert not segments_of(os.getpid()) & {first[0], second[0]}


def test_segment_sizes_are_powers_of_two_from_64_kib() -> None:
    assert link_memory.segment_size(1) == 64 * 1024
    assert link_memory.segment_size(64 * 1024) == 64 * 1024
    assert link_memory.segment_size(64 * 1024 + 1) == 128 * 1024
    assert link_memory.segment_size(1 << 20) == 1 << 20


async def test_views_refuse_references_that_are_not_this_servers_segments() -> None:
    views = link_memory.SegmentViews(os.getpid(), lambda peer, names: None)
    for token in [("inferd-1-2-3", 4), ("../etc/passwd", 4), ("x",), [f"inferd-{os.getpid()}", 1],
                  (f"inferd-{os.getpid()}-{os.getpid()}-999999999", 4)]:
        with pytest.raises(InvalidArgument):
            views.view("p", token)
    pool = link_memory.SegmentPool(os.getpid(), threshold=THRESHOLD, capacity=THRESHOLD)
    try:
        name, _ = pool.spill("p", b"z" * THRESHOLD)  # type: ignore[misc]
        with pytest.raises(InvalidArgument, match="of 65536 bytes"):
            views.view("p", (name, THRESHOLD + 1))
    finally:
        pool.close()


async def test_a_reference_on_a_link_without_views_is_refused() -> None:
    frames = wire.encode(
        Envelope(1, "a", "b", InferRequest("m", (Tensor("T", "FP32", (LARGE,),
                                                         np.zeros(LARGE, np.float32)),))),
        spill=lambda buffer: ("inferd-1-1-1", len(buffer)),
    )
    with pytest.raises(InvalidArgument, match="which this transport cannot read"):
        wire.decode(frames)


def test_stale_and_orphan_segments_are_removed() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    mine = os.getpid()
    names = [f"inferd-{dead_pid}-{dead_pid}-0", f"inferd-{mine}-{dead_pid}-0",
             f"inferd-{mine}-{mine}-99999999"]
    for name in names:
        (link_memory.SHM_DIR / name).write_bytes(b"")
    try:
        assert link_memory.remove_orphans(mine) == [names[1]]
        assert link_memory.remove_stale() == [names[0]]
        assert (link_memory.SHM_DIR / names[2]).exists()  # a live server's, kept
        assert names[2] in link_memory.remove_server_segments(mine)
    finally:
        for name in names:
            (link_memory.SHM_DIR / name).unlink(missing_ok=True)
