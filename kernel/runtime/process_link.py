"""The link between processes: one ZeroMQ socket per process carrying the router's envelopes.

Owns the socket and the peers on it. The main process binds a ROUTER (the hub); each executor
process connects a DEALER (its uplink) whose routing id is its address, so an envelope the
router cannot deliver in its own process crosses here, and what arrives is handed back to the
router. It encodes and decodes with the pure codec of ``inferd.protocols.wire.codec`` (its dense
link form: one frame per message unless a tensor is large), batches what it sends: every envelope
for a peer queued in one turn of the event loop leaves as one multipart message at its end, so
a burst of requests (or of their replies) costs ZeroMQ one message and one wake-up of each side
instead of one each, and moves large
tensors through shared memory segments (``inferd.kernel.runtime.link_memory``) and releases them
between the links, and remembers why a peer went, so an ask to it fails with that reason. It
never routes within a process and never turns an exception into a reply (both are
``inferd.kernel.runtime.router``'s).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import zmq

from inferd.kernel.runtime import link_memory
from inferd.kernel.sdk.loop_socket import LoopSocket
from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import Envelope, ExecutorHello, ReleaseSegments

if TYPE_CHECKING:
    from inferd.kernel.runtime.router import Router

log = logging.getLogger(__name__)

_HUB = "main"  # the peer name an executor's link gives the main process


@dataclass(frozen=True, slots=True)
class LinkMemory:
    """How the link moves large tensors: through shared memory segments from
    ``threshold`` bytes up (0: never), at most ``capacity`` bytes of them per process."""

    server_pid: int
    threshold: int = link_memory.DEFAULT_THRESHOLD
    capacity: int = link_memory.DEFAULT_CAPACITY


class ProcessLink:
    """The ZeroMQ socket joining this process to the others.

    In the main process it is a ROUTER (``bind``): a peer becomes reachable under its
    address once it has sent its first message. In an executor it is a DEALER (``connect``)
    that sends everything not local to the hub. Tensors from ``memory.threshold`` bytes up
    cross in shared memory segments (``inferd.kernel.runtime.link_memory``); the links release
    them to each other, no actor sees that.
    """

    def __init__(
        self, router: Router, socket: zmq.Socket[Any], *, is_hub: bool, memory: LinkMemory
    ) -> None:
        self.router = router
        # The routing id (at the hub) and the first message's head arrive as bytes.
        self.socket = LoopSocket(socket, self._receive, copy_first=2 if is_hub else 1)
        self.is_hub = is_hub
        self.peers: set[str] = set()
        self.gone: dict[str, str] = {}
        self.memory = memory
        self.segments = link_memory.SegmentPool(
            memory.server_pid, threshold=memory.threshold, capacity=memory.capacity
        )
        self.views = link_memory.SegmentViews(memory.server_pid, self._send_release)
        self.closed = False
        # One bound hook per peer, not one per message: this is every request's path.
        self._spills: dict[str, wire.Spill] = {}
        self._views: dict[str, wire.Unspill] = {}
        # What this loop turn sent, by peer: the frames of one multipart message each (the
        # hub's start with the peer's routing id), sent when the turn ends (``_flush``).
        self._outboxes: dict[str, list[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False

    @classmethod
    def hub(
        cls,
        router: Router,
        context: zmq.Context[Any],
        endpoint: str,
        memory: LinkMemory | None = None,
    ) -> ProcessLink:
        socket = context.socket(zmq.ROUTER)
        _tune(socket)
        socket.bind(endpoint)
        link = cls(router, socket, is_hub=True, memory=memory or LinkMemory(os.getpid()))
        router.attach(link)
        return link

    @classmethod
    def uplink(
        cls,
        router: Router,
        context: zmq.Context[Any],
        endpoint: str,
        identity: str,
        memory: LinkMemory,
    ) -> ProcessLink:
        socket = context.socket(zmq.DEALER)
        _tune(socket)
        socket.setsockopt(zmq.IDENTITY, identity.encode())
        socket.connect(endpoint)
        link = cls(router, socket, is_hub=False, memory=memory)
        router.attach(link)
        return link

    def send(self, envelope: Envelope) -> bool:
        """Queue ``envelope`` for another process; False if no peer has that address. It
        leaves with the others queued for that peer in this turn of the loop (at once before
        ``run``)."""
        if self.is_hub:
            peer = envelope.dst
            if peer not in self.peers:
                return False
        else:
            peer = _HUB
        outbox = self._outboxes.get(peer)
        if outbox is None:
            outbox = self._outboxes[peer] = [peer.encode()] if self.is_hub else []
            if not self._flush_scheduled:
                self._flush_scheduled = True
                if self._loop is not None:
                    self._loop.call_soon(self._flush)
        spill = self._spill_to(peer) if self.segments.enabled else None
        wire.encode_link(envelope, spill, outbox)
        if self._loop is None:
            self._flush()
        return True

    def _flush(self) -> None:
        """Send each peer's queued envelopes as one multipart message (no high-water mark:
        never blocks)."""
        self._flush_scheduled = False
        if self.closed:
            return
        outboxes, self._outboxes = self._outboxes, {}
        first = 1 if self.is_hub else 0
        for frames in outboxes.values():
            if len(frames) > first:  # not when its only envelope could not be encoded
                self.socket.send(frames)

    def _spill_to(self, peer: str) -> wire.Spill:
        spill = self._spills.get(peer)
        if spill is None:
            spill = self._spills[peer] = partial(self.segments.spill, peer)
        return spill

    def _view_from(self, peer: str) -> wire.Unspill:
        view = self._views.get(peer)
        if view is None:
            view = self._views[peer] = partial(self.views.view, peer)
        return view

    def forget(self, peer: str, reason: str) -> None:
        """``peer``'s process died: messages for it now fail with ``reason``, the segments it
        held are free again and those it owned are unlinked."""
        self.peers.discard(peer)
        self.gone[peer] = reason
        self._outboxes.pop(peer, None)  # never to the next process of that name
        self.segments.forget(peer)
        self.views.forget(peer)
        removed = link_memory.remove_orphans(self.memory.server_pid)
        if removed:
            log.info("removed %d shared memory segment(s) of %s", len(removed), peer)

    def _send_release(self, peer: str, names: tuple[str, ...]) -> None:
        if self.closed:  # views outlived the link: their owner unlinks the segments anyway
            return
        dst = peer if self.is_hub else _HUB
        self.send(Envelope(0, self.router.name, dst, ReleaseSegments(names)))

    async def run(self) -> None:
        """Receive until cancelled (messages arrive through ``_receive`` on the loop)."""
        self._loop = asyncio.get_running_loop()
        self.socket.start()
        await anyio.sleep_forever()

    def _receive(self, frames: list[Any]) -> None:
        """One multipart message: one or more envelopes (``wire.link_end`` says where each
        ends), after the sender's routing id at the hub."""
        if self.is_hub:
            peer = frames[0].decode()
            start = 1
        else:
            peer, start = _HUB, 0
        view = self._view_from(peer)
        while start < len(frames):
            try:
                end = wire.link_end(frames, start)
            except InvalidArgument as error:  # where the next one starts is unknown
                log.error("malformed message from %s dropped: %s", peer, error)
                return
            try:
                envelope = wire.decode_link(frames, start, end, view)
            except InvalidArgument as error:
                log.error("malformed message from %s dropped: %s", peer, error)
            else:
                self._accept(peer, envelope)
            start = end

    def _accept(self, peer: str, envelope: Envelope) -> None:
        if self.is_hub and (peer not in self.gone or type(envelope.body) is ExecutorHello):
            # A message a dead process sent just before it died can be read after its death
            # was noted: it must not make the name reachable again, or what is sent there
            # vanishes in the ROUTER and no ask to it is ever failed. Its next process's
            # first message, its hello, does.
            self.peers.add(peer)
            self.gone.pop(peer, None)
        if type(envelope.body) is ReleaseSegments:
            self.segments.release(peer, envelope.body.names)
            return
        self.router.deliver(envelope, from_link=True)

    def close(self) -> None:
        if not self.closed:
            self._flush()  # what this turn sent still leaves (a Shutdown's reply)
        self.closed = True
        self.socket.close()
        self.segments.close()


def _tune(socket: zmq.Socket[Any]) -> None:
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
