"""The link between processes: one ZeroMQ socket per process carrying the router's envelopes.

Owns the socket and the peers on it. The main process binds a ROUTER (the hub); each executor
process connects a DEALER (its uplink) whose routing id is its address, so an envelope the
router cannot deliver in its own process crosses here, and what arrives is handed back to the
router. It encodes and decodes with the pure codec of ``inferd.protocols.wire``, moves large
tensors through shared memory segments (``inferd.kernel.runtime.link_memory``) and releases them
between the links, and remembers why a peer went, so an ask to it fails with that reason. It
never routes within a process and never turns an exception into a reply (both are
``inferd.kernel.runtime.router``'s).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import zmq

from inferd.kernel.runtime import link_memory
from inferd.kernel.sdk.loop_socket import LoopSocket
from inferd.protocols import wire
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
        self.socket = LoopSocket(socket, self._receive)
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
        """Queue ``envelope`` for another process; False if no peer has that address."""
        if self.is_hub:
            peer = envelope.dst
            if peer not in self.peers:
                return False
            head: list[Any] = [peer.encode(), b""]
        else:
            peer, head = _HUB, [b""]
        spill = self._spill_to(peer) if self.segments.enabled else None
        self.socket.send([*head, *wire.encode(envelope, spill)])  # no high-water mark
        return True

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
        self.socket.start()
        await anyio.sleep_forever()

    def _receive(self, frames: list[zmq.Frame]) -> None:
        if self.is_hub:
            peer = bytes(frames[0].buffer).decode()
            payload = frames[2:]
        else:
            peer, payload = _HUB, frames[1:]
        try:
            envelope = wire.decode(payload, self._view_from(peer))
        except InvalidArgument as error:
            log.error("malformed message from %s dropped: %s", peer, error)
            return
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
        self.closed = True
        self.socket.close()
        self.segments.close()


def _tune(socket: zmq.Socket[Any]) -> None:
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
