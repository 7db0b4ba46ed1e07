"""The client guards both HTTP servers share: the connection cap's choice of whom to close,
the sweeper's deadlines, and the responses that end a connection.

``GuardedHttpProtocol`` (uvicorn's httptools protocol, ``connection``) and
``LoopHttpConnection`` (inferd's own, ``loop_connection``) keep the same bookkeeping under the
same names (``_in_head``, ``_idle_since``, ``_wait_rank``, ``_body_progress``,
``_write_blocked_since``, ``_refusal``, ``pipeline``) and differ only in how they hold the
request being read; ``ClientGuard`` reaches that through three small methods each defines.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

from inferd.protocols import json_bodies

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_http.connection import HttpLimits

STATUS_LINE = {
    status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode("latin-1")
    for status in HTTPStatus
}


def close_response(status: int, message: str) -> bytes:
    """A whole ``{"error": message}`` response after which the connection closes."""
    body = json_bodies.encode_error(message)
    return (STATUS_LINE[status] + b"content-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode("ascii")
            + body)


class InFlight(Protocol):
    """What the guards read of the request being read or answered."""

    response_complete: bool
    more_body: bool


class ClientGuard:
    """The connection cap's eviction and the client deadlines, over the bookkeeping both
    protocols keep (see the module's docstring)."""

    transport: Any
    limits: HttpLimits
    connections: Any
    pipeline: Any
    _in_head: bool
    _idle_since: float
    _wait_rank: int
    _body_progress: float
    _write_blocked_since: float | None
    _refusal: bytes | None

    def _in_flight(self) -> InFlight | None:
        """The request parsed last, or None."""
        raise NotImplementedError

    def _reading_paused(self) -> bool:
        """Whether the server stopped reading (its own flow control, not the client's
        delay)."""
        raise NotImplementedError

    def _abandon(self, request: Any) -> None:
        """Tell the request's reader that no more body is coming."""
        raise NotImplementedError

    def _make_room(self) -> bool:
        """Close the connection that has waited longest without a request in flight (idle or
        in its head); False if every open connection is answering a request."""
        waiting = [c for c in self.connections
                   if isinstance(c, ClientGuard) and c.waiting_for_client()]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c._wait_rank)
        self.connections.discard(oldest)  # counted out now: its close completes later
        if oldest._in_head:
            oldest._expire(f"the server has its maximum of {self.limits.max_connections} HTTP "
                           "connections open and closed this one, whose request head was "
                           "incomplete, for a new one (--http-max-connections)")
        else:
            oldest.transport.close()
        return True

    def waiting_for_client(self) -> bool:
        """Open, no request being answered, nothing refused: idle or receiving a head."""
        transport = self.transport
        if transport is None or transport.is_closing() or self._refusal is not None:
            return False
        current = self._in_flight()
        return not self.pipeline and (current is None or current.response_complete)

    def check_deadlines(self, now: float) -> None:
        """Close this connection if its client is too slow; called by ``ConnectionSweeper``."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        limits = self.limits
        blocked = self._write_blocked_since
        if blocked is not None and now - blocked > limits.body_timeout_secs:
            transport.abort()  # a client that does not read would never take a 408 either
            return
        if self._refusal is not None:
            return  # a 400 waits for the answers in flight; it closes the connection after
        current = self._in_flight()
        if (current is not None and not current.response_complete) or self.pipeline:
            if current is None or not current.more_body or current.response_complete:
                return  # the request is being answered: no client deadline
            if self._reading_paused():
                self._body_progress = now  # we stopped reading: not the client's delay
            elif now - self._body_progress > limits.body_timeout_secs:
                self._abandon(current)
                self._expire(f"no request body bytes arrived for {limits.body_timeout_secs:g} s "
                             "(--http-body-timeout-secs)")
            return
        waited = now - self._idle_since
        if self._in_head:
            if waited > limits.header_timeout_secs:
                self._expire(f"the request head did not complete within "
                             f"{limits.header_timeout_secs:g} s (--http-header-timeout-secs)")
        elif waited > limits.keep_alive_timeout_secs:
            transport.close()

    def _expire(self, message: str) -> None:
        self._refusal = b""
        self.transport.write(close_response(408, message))
        self.transport.close()
