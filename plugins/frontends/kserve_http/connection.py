"""The HTTP connection under the KServe frontend: uvicorn's httptools protocol, guarded against
clients that are slow, silent, too many, or send what does not parse.

Owns what one connection may take of the server (``HttpLimits``: the head size, the chunks
of a body, the head, body and keep-alive timeouts, the time a client may leave a response
unread, the connection cap, and which connection makes room for a new one at the cap) and one
periodic sweep per server that enforces the deadlines, so no timer is armed per request, and
the coalescing of a response's writes into one system call. A client that disconnects while
its request is answered cancels the task answering it (``ClientWatch.answering``, which the
app sets through the scope's ``CONNECTION`` entry), so a queued inference leaves its queue:
no task per request watches for it. It knows nothing of routes, bodies or models: the ASGI app in
``frontend`` does.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferd.plugins.frontends.kserve_http import (
    DEFAULT_BODY_TIMEOUT_SECS,
    DEFAULT_HEADER_TIMEOUT_SECS,
    DEFAULT_KEEP_ALIVE_TIMEOUT_SECS,
)
from inferd.plugins.frontends.kserve_http.guard import ClientGuard, close_response

# The request line and headers together; uvicorn's parser would otherwise buffer them unbounded.
MAX_HEAD_BYTES = 64 << 10
# Triton's cap on the non-empty chunks of one chunked request body. Each chunk costs a call
# into Python from the parser and a piece for the app to join, whatever its size: a body sent
# a byte a chunk would cost many times what the same bytes cost unchunked.
MAX_REQUEST_CHUNKS = 1 << 16
# The scope entry that gives the app its connection's ``ClientWatch``.
CONNECTION = "inferd.connection"
# Ranks connections by when they last began to wait for their client. The loop's clock cannot:
# uvloop's is libuv's, in milliseconds and read once per turn, so connections answered in the
# same millisecond would tie and the cap could close a newer one than the longest idle.
_WAIT_ORDER = itertools.count()


class ClientWatch:
    """What the app and its connection share about the request in flight: the task answering
    it (set by the app), cancelled by the connection if the client goes; ``gone`` tells that
    cancellation from any other. It holds no reference to the connection, so a scope that
    holds it makes no reference cycle (the connection would then outlive its requests)."""

    __slots__ = ("answering", "gone")

    def __init__(self) -> None:
        self.answering: asyncio.Task[Any] | None = None
        self.gone = False


class _Refused(Exception):
    """Raised inside a parser callback once the connection's ``_parse_refusal`` says why;
    httptools reports it as a parse error, which uvicorn answers through ``send_400_response``."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one connection may take of the server: time for a head, for each next piece of a
    body or of a response the client reads, and without any request, how many
    connections may be open, and how many non-empty chunks one chunked request body may have."""

    header_timeout_secs: float = DEFAULT_HEADER_TIMEOUT_SECS
    body_timeout_secs: float = DEFAULT_BODY_TIMEOUT_SECS
    max_connections: int = 1024
    keep_alive_timeout_secs: float = DEFAULT_KEEP_ALIVE_TIMEOUT_SECS
    max_request_chunks: int = MAX_REQUEST_CHUNKS

    @property
    def sweep_interval_secs(self) -> float:
        # Deadlines are checked by one periodic sweep per server rather than a timer per
        # request, so a timeout fires up to this much late.
        shortest = min(self.header_timeout_secs, self.body_timeout_secs,
                       self.keep_alive_timeout_secs)
        return min(1.0, max(0.05, shortest / 4))


_HEAD_TOO_LARGE = f"the request line and headers are larger than {MAX_HEAD_BYTES} bytes"


class CoalescedTransport:
    """A transport whose small writes made in one turn of the event loop leave as one.

    uvicorn writes a response's head and its body separately: two system calls, the larger
    part of a small response's cost on a virtual machine. Here small writes wait in a list
    until the loop's next turn (or the next large write, or ``close``) and go out joined; a
    write of ``WRITE_THROUGH_BYTES`` or more goes at once, behind them, so flow control
    still sees every large body as it is written. Everything else is the real transport's.
    """

    WRITE_THROUGH_BYTES = 64 << 10

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes | bytearray | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) >= self.WRITE_THROUGH_BYTES:
            self.flush()
            self._transport.write(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpProtocol(ClientGuard, HttpToolsProtocol):
    """uvicorn's httptools protocol, hardened against hostile clients.

    * The request line plus headers are bounded (uvicorn would buffer them without limit): a
      head over ``MAX_HEAD_BYTES`` gets a 400. A head that completes is measured exactly; one
      still arriving is counted chunk by chunk (from the chunk after the one it began in, whose
      offset the parser does not tell), so at most one chunk more than the limit is buffered.
    * A chunked request body may have ``max_request_chunks`` non-empty chunks (Triton's cap,
      its status and words): one more is answered 400 and the connection closed. The parser
      tells each chunk's start, not its size, so the chunk whose start passes the count is
      the one after the last allowed one, or the empty one that ends the body; a body that
      is not chunked never reaches this count.
    * Time is bounded (``HttpLimits``, checked by ``ConnectionSweeper``): a connection that
      begins no request is closed (silently) after the keep-alive timeout from its opening
      or the previous response, a head must complete within the header timeout of the same
      moment (else 408), each next piece of a body must come within the body timeout (408),
      and a client whose unread response fills the write buffer for longer than the body
      timeout is dropped.
    * At ``max_connections`` a new connection takes the place of the one that has waited
      longest without a request being answered (idle, or still sending its head), so idle
      or slow clients never lock others out; only when every connection has a request in
      flight is the new one answered 503 at once and closed.
    * A parse error after complete requests (garbage, or an invalid pipelined request) is
      answered 400 only once those requests are answered, in order; uvicorn closes at once.
    * A client that half-closes after a complete request still gets its answer: uvicorn lets
      the transport close on EOF, dropping the response.
    """

    def __init__(self, *args: Any, limits: HttpLimits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits or HttpLimits()
        self._in_head = False
        self._head_bytes = 0
        self._began_in_chunk = False
        self._chunks = 0  # chunk starts (the ending empty chunk's included) of this request
        self._parse_refusal: str | None = None  # why a parser callback stopped the parser
        self._idle_since = 0.0  # when the connection opened or last finished a response
        self._wait_rank = 0  # the same moment's place in _WAIT_ORDER
        self._body_progress = 0.0  # when the body being read last made progress
        self._write_blocked_since: float | None = None
        # None while serving; a 400 waiting for the responses in flight; b"" once refused.
        self._refusal: bytes | None = None
        self._peer_done = False  # the client half-closed: close once in-flight work is answered
        self.watch = ClientWatch()

    # ---------------------------------------------------------------- connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections and not self._make_room():
            # Refused before uvicorn counts or sets it up; connection_lost only needs these.
            self.transport = transport
            self._refusal = b""
            transport.write(close_response(
                503, f"the server has its maximum of {self.limits.max_connections} HTTP "
                "connections open (--http-max-connections)"
            ))
            transport.close()
            return
        super().connection_made(CoalescedTransport(transport, self.loop))  # type: ignore[arg-type]
        self._begin_waiting()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        watch = self.watch
        answering, watch.answering = watch.answering, None
        if answering is not None:
            watch.gone = True
            answering.cancel()

    def eof_received(self) -> bool | None:  # type: ignore[override]
        cycle = self.cycle
        received = cycle is not None and not cycle.response_complete and not cycle.more_body
        if received or self.pipeline:
            # asyncio closes the transport unless told otherwise; the answer is still owed.
            self._peer_done = True
            return True
        transport = self.transport
        if isinstance(transport, CoalescedTransport):
            # The real transport closes as this returns, under the coalescing one: a response
            # completed in this turn of the loop, still waiting to be joined, goes out first.
            transport.flush()
        return None

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # the parser has failed or the connection is refused: drop the rest
        self._began_in_chunk = False
        super().data_received(data)
        if self._refusal is not None:
            return
        if not self._in_head or self._began_in_chunk or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._parse_refusal = _HEAD_TOO_LARGE
            self.send_400_response("")

    # ---------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]  # an ASGI extension key
        scope[CONNECTION] = self.watch
        self._in_head = True
        self._head_bytes = 0
        self._began_in_chunk = True
        self._chunks = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        size = len(self.url) + sum(len(name) + len(value) for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._parse_refusal = _HEAD_TOO_LARGE
            raise _Refused
        self._body_progress = self.loop.time()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_progress = self.loop.time()
        super().on_body(body)

    def on_chunk_header(self) -> None:
        # Called by httptools at the start of each chunk of a chunked body, the empty one that
        # ends it included; every chunk before this one had bytes.
        self._chunks += 1
        limit = self.limits.max_request_chunks
        if self._chunks > limit + 1:
            self._parse_refusal = (f"Chunked request body exceeds maximum of {limit} non-empty "
                                   "chunks. Send fewer or larger HTTP chunks.")
            raise _Refused

    def on_response_complete(self) -> None:
        if self.transport.is_closing() or self.pipeline:
            super().on_response_complete()
            return
        if self._refusal is not None or self._peer_done:
            self.server_state.total_requests += 1
            if self._refusal:
                self.transport.write(self._refusal)
            self.transport.close()
            return
        super().on_response_complete()
        self._begin_waiting()

    def _begin_waiting(self) -> None:
        self._idle_since = self.loop.time()
        self._wait_rank = next(_WAIT_ORDER)

    def send_400_response(self, msg: str) -> None:
        message = self._parse_refusal or msg or "Invalid HTTP request received."
        response = close_response(400, message)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and cycle.more_body:
            # The request whose body was being parsed can never complete. A request waits in
            # the pipeline only behind one still being answered, which keeps its answer; one
            # not waiting there has its app reading the body, which must stop.
            pipeline = self.pipeline
            in_flight = any(entry[0] is cycle for entry in pipeline)
            if in_flight:
                self.pipeline = deque(entry for entry in pipeline if entry[0] is not cycle)
            else:
                cycle.disconnected = True
                cycle.message_event.set()
        else:
            in_flight = bool(self.pipeline) or (cycle is not None and not cycle.response_complete)
        if in_flight:
            self._refusal = response
            self.flow.pause_reading()
            return
        self._refusal = b""
        self.transport.write(response)
        self.transport.close()

    # ---------------------------------------------------------------- flow control

    def pause_writing(self) -> None:
        if self.flow is not None:  # None on a refused connection
            self._write_blocked_since = self.loop.time()
            super().pause_writing()

    def resume_writing(self) -> None:
        if self.flow is not None:
            self._write_blocked_since = None
            super().resume_writing()

    # ---------------------------------------------------------------- ClientGuard's view

    def _in_flight(self) -> Any:
        return self.cycle

    def _reading_paused(self) -> bool:
        return bool(self.flow.read_paused)

    def _abandon(self, request: Any) -> None:
        request.disconnected = True
        request.message_event.set()


class ConnectionSweeper:
    """One timer per server that checks every connection's deadlines each
    ``limits.sweep_interval_secs``: no timer is armed or cancelled per request."""

    def __init__(self, connections: set[Any], limits: HttpLimits) -> None:
        self.connections = connections
        self.limits = limits
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_later(limits.sweep_interval_secs, self.run)

    def run(self) -> None:
        now = self.loop.time()
        for connection in list(self.connections):
            check = getattr(connection, "check_deadlines", None)  # either server's connection
            if check is not None:
                check(now)
        self.handle = self.loop.call_later(self.limits.sweep_interval_secs, self.run)

    def stop(self) -> None:
        self.handle.cancel()
