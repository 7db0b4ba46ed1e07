"""A ZeroMQ socket driven directly by the asyncio event loop, for the per-request path.

pyzmq's ``zmq.asyncio`` wraps every call in futures and flag enums; on small machines that
costs about a hundred microseconds per message, several times the socket work itself. This
wrapper registers the socket's file descriptor with ``loop.add_reader`` and drains whole
messages without blocking. The descriptor is edge-triggered (it signals "something changed",
not "a message is waiting"), so the socket's ``EVENTS`` are re-checked after every send as
well as on every wake-up; missing that is the classic way to lose a message. Sends never
block: sockets here have no high-water mark. Frames go through pyzmq's compiled ``send`` and
``recv`` with plain-int flags, not ``send_multipart``/``recv_multipart``: those add a Python
layer per frame and enum arithmetic per call, which on this path cost more than the socket
work itself. Small frames are copied into the message (cheaper than a zero-copy ``Frame``
with its release callback); large ones are sent without a copy. Owns socket I/O only, no
message format. It lives in the kernel, beside the router (the process link) and the zmq
frontend that read through it: ``inferd.protocols`` stays pure, formats with no sockets.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import zmq
from zmq.backend import Socket as _CompiledSocket

__all__ = ["LoopSocket"]

Frames = list[Any]  # zmq.Frame, or bytes for the first ``copy_first`` of a message

_SEND = _CompiledSocket.send
_RECV = _CompiledSocket.recv
# Only integer options (EVENTS, RCVMORE) are read through it.
_GET = cast("Callable[[_CompiledSocket, int], int]", _CompiledSocket.get)
_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_POLLIN = int(zmq.POLLIN)
# Below this many bytes a frame is copied into its message: pyzmq's own default threshold.
COPY_BELOW = 65536

log = logging.getLogger(__name__)


class LoopSocket:
    """``socket`` read by the running loop. Each received message goes to ``on_message`` when
    given (called on the loop, must not block), otherwise to ``recv``'s queue. The first
    ``copy_first`` frames of each message arrive as ``bytes``, the others as zero-copy
    ``zmq.Frame``s: for frames known to be small (a routing id, a header) a copy costs less
    than a ``Frame`` object and the view its reader makes of it."""

    def __init__(self, socket: zmq.Socket[Any],
                 on_message: Callable[[Frames], None] | None = None, *,
                 copy_first: int = 0) -> None:
        self.socket = socket
        self._on_message = on_message
        self._copy_first = copy_first
        self._received: collections.deque[Frames] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_scheduled = False
        self._closed = False

    def start(self) -> None:
        """Begin reading on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.socket.FD, self._drain)
        self._schedule_drain()

    def send(self, frames: Sequence[Any]) -> None:
        socket = self.socket
        last = len(frames) - 1
        for index, frame in enumerate(frames):
            size = frame.nbytes if isinstance(frame, memoryview) else len(frame)
            _SEND(socket, frame, _MORE if index < last else _NOBLOCK, copy=size < COPY_BELOW)
        self._schedule_drain()  # a send can consume the descriptor's edge for a pending read

    async def recv(self) -> Frames:
        """The next message (only when no ``on_message`` callback was given)."""
        while not self._received:
            if self._closed:
                raise zmq.ZMQError(zmq.ENOTSOCK, "socket closed")
            assert self._loop is not None, "start() the socket first"
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._received.popleft()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.socket.FD)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self.socket.close(linger=0)

    def _schedule_drain(self) -> None:
        if self._loop is not None and not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self._closed:
            return
        socket = self.socket
        copy_first = self._copy_first
        while _GET(socket, _EVENTS) & _POLLIN:
            frames = [_RECV(socket, _NOBLOCK, copy=copy_first > 0)]
            while _GET(socket, _RCVMORE):
                frames.append(_RECV(socket, _NOBLOCK, copy=len(frames) < copy_first))
            if self._on_message is not None:
                try:
                    self._on_message(frames)
                except Exception:  # a bad message must not stop the draining
                    log.exception("message handler failed")
            else:
                self._received.append(frames)
                if self._waiter is not None and not self._waiter.done():
                    self._waiter.set_result(None)
