"""The clocks of a loop gRPC server's connection (``loop_connection``): what it does when
nothing happens.

Owns, as the ``ConnectionTimers`` part of each ``Connection``: the handshake deadline (no
HTTP/2 set-up in time: closed), keepalive pings (sent when nothing was heard for a keepalive
period, at most ``max_pings_without_data`` of them while no DATA goes out; one unanswered
within its timeout closes the connection), the idle GOAWAY (no call for ``max_idle``), and
output that stops moving (a client that leaves what the server wrote unread past
``write_timeout_secs``: GOAWAY ``ENHANCE_YOUR_CALM`` and closed). It reads and writes no
frame of a call; the connection arms and clears these clocks as its calls come and go.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from inferd.protocols.http2 import connection as http2

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_grpc.loop_server import LoopServer

logger = logging.getLogger(__name__)


class ConnectionTimers:
    """The clocks, over the connection's own state (declared here, set by ``Connection``)."""

    server: LoopServer
    loop: asyncio.AbstractEventLoop
    h2: http2.Connection
    transport: asyncio.Transport | None
    calls: dict[int, Any]
    peer: str
    writing_paused: bool

    def flush(self) -> None:
        raise NotImplementedError

    def goaway(self) -> None:
        raise NotImplementedError

    def _abort(self) -> None:
        raise NotImplementedError

    def _init_timers(self) -> None:
        self._heard = True  # a frame arrived since the last keepalive check
        self._handshake: asyncio.TimerHandle | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._progress_seen = 0
        self._pings_without_data = 0  # keepalive pings sent since DATA last went out
        self._data_at_last_ping = 0
        self._stall: asyncio.TimerHandle | None = None
        self._progress = 0  # moves whenever output leaves: DATA sent, or writing resumed

    def _start_timers(self) -> None:
        """A connection accepted: the handshake's deadline, keepalive, and idle from now."""
        server = self.server
        self._handshake = self.loop.call_later(server.handshake_timeout, self._handshake_expired)
        self._keepalive = self.loop.call_later(server.keepalive_time, self._check_alive)
        self._became_idle()

    def _stop_timers(self) -> None:
        for timer in (self._handshake, self._keepalive, self._ping_timeout, self._idle,
                      self._stall):
            if timer is not None:
                timer.cancel()

    def _check_stall(self) -> None:
        self._stall = None
        if not (self.writing_paused or self.h2.blocked_bytes):
            return
        if self._progress + self.h2.data_sent == self._progress_seen:
            logger.debug("gRPC connection %s: output unread for %g s", self.peer,
                         self.server.limits.write_timeout_secs)
            self.h2.goaway(http2.ENHANCE_YOUR_CALM, "output unread")
            self.flush()
            if self.transport is not None:
                self.transport.abort()
            return
        self.flush()

    def _handshake_expired(self) -> None:
        self._handshake = None
        logger.debug("gRPC connection %s: no HTTP/2 set-up within %g s", self.peer,
                     self.server.handshake_timeout)
        if self.transport is not None:
            self.transport.abort()

    def _check_alive(self) -> None:
        server = self.server
        limit = server.limits.max_pings_without_data
        if self.h2.data_sent != self._data_at_last_ping:
            self._data_at_last_ping = self.h2.data_sent
            self._pings_without_data = 0
        if self._heard:
            self._heard = False
        elif self._ping_timeout is None and (not limit or self._pings_without_data < limit):
            self._pings_without_data += 1
            self.h2.ping(b"inferd\x00\x00")
            self.flush()
            self._ping_timeout = self.loop.call_later(server.keepalive_timeout,
                                                      self._ping_unanswered)
        self._keepalive = self.loop.call_later(server.keepalive_time, self._check_alive)

    def _ping_unanswered(self) -> None:
        self._ping_timeout = None
        logger.debug("gRPC connection %s: keepalive ping unanswered", self.peer)
        if self.transport is not None:
            self.transport.abort()

    def _became_idle(self) -> None:
        self._idle_since = self.loop.time()
        if self._idle is None:
            self._idle = self.loop.call_later(self.server.max_idle, self._idle_check)

    def _idle_check(self) -> None:
        self._idle = None
        if self.calls:
            return
        left = self._idle_since + self.server.max_idle - self.loop.time()
        if left > 0:
            self._idle = self.loop.call_later(left, self._idle_check)
            return
        self.goaway()
        self._abort()
