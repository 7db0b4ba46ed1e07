"""The KServe HTTP frontend's own HTTP/1.1 connection (``--http-implementation loop``): the
httptools parser in an asyncio protocol that hands each request straight to the app's
``respond`` and writes its response itself, without uvicorn's ASGI scope, receive and send.

A small request costs the parser's callbacks, one task and one write: no scope dictionary,
no ASGI message per body piece and per response part, no ``asyncio.Event`` per request.
Every guard of uvicorn's guarded protocol (``connection.GuardedHttpProtocol``) holds here
alike, with the same statuses and words: the head bound, the chunk cap, the header, body and
keep-alive deadlines (checked by the shared ``ConnectionSweeper``), a client that leaves a
response unread, the connection cap and who makes room at it, answers in pipelining order
with a parse error answered after them, and answers owed to a client that half-closed.
How one request is answered and written is ``loop_exchange``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

import httptools

from inferd.plugins.frontends.kserve_http.connection import (
    MAX_HEAD_BYTES,
    HttpLimits,
)
from inferd.plugins.frontends.kserve_http.guard import ClientGuard, close_response
from inferd.plugins.frontends.kserve_http.loop_exchange import Exchange, answer

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_http.app import KserveHttpApp

# A body that piles up unread past this pauses reading (uvicorn's figure).
HIGH_WATER_BYTES = 64 << 10
_HEAD_TOO_LARGE = f"the request line and headers are larger than {MAX_HEAD_BYTES} bytes"
# Ranks connections by when they last began to wait for their client (see connection.py).
_WAIT_ORDER = itertools.count()


class _Refused(Exception):
    """Raised inside a parser callback once ``_parse_refusal`` says why."""


class LoopHttpConnection(ClientGuard, asyncio.Protocol):
    """One client's connection: parses its requests, answers them in order, one at a time."""

    def __init__(self, app: KserveHttpApp, limits: HttpLimits,
                 connections: set[LoopHttpConnection]) -> None:
        self.app = app
        self.limits = limits
        self.connections = connections
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.current: Exchange | None = None  # the request parsed last
        self.pipeline: deque[Exchange] = deque()  # parsed, waiting for the one answered
        self.answering: asyncio.Task[None] | None = None
        self.gone = False  # the connection closed: a cancelled answer is the client's doing
        self.read_paused = False
        self.write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._in_head = False
        self._head_bytes = 0
        self._head_size = 0  # the exact size of a head whose headers the parser gave
        self._began_in_chunk = False
        self._chunks = 0
        self._parse_refusal: str | None = None
        self._idle_since = 0.0
        self._wait_rank = 0
        self._body_progress = 0.0
        self._write_blocked_since: float | None = None
        # None while serving; a 400 waiting for the responses in flight; b"" once refused.
        self._refusal: bytes | None = None
        self._peer_done = False

    # ---------------------------------------------------------------- connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        if len(self.connections) >= self.limits.max_connections and not self._make_room():
            self._refusal = b""
            transport.write(close_response(  # type: ignore[attr-defined]
                503, f"the server has its maximum of {self.limits.max_connections} HTTP "
                "connections open (--http-max-connections)"))
            transport.close()
            return
        self.connections.add(self)
        self._begin_waiting()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.gone = True
        current = self.current
        if current is not None and not current.response_complete:
            current.disconnected = True
            current.wake()
        self._resume_writing()
        answering, self.answering = self.answering, None
        if answering is not None:
            answering.cancel()

    def eof_received(self) -> bool | None:
        current = self.current
        received = (current is not None and not current.response_complete
                    and not current.more_body)
        if received or self.pipeline:
            self._peer_done = True  # the answer is still owed: keep the transport open
            return True
        return None

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # the parser has failed or the connection is refused: drop the rest
        self._began_in_chunk = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol to upgrade to: the request was answered as plain HTTP
        except httptools.HttpParserError:
            self._refuse_parse("Invalid HTTP request received.")
            return
        transport = self.transport
        if (not self._in_head or self._began_in_chunk or transport is None
                or transport.is_closing()):
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._parse_refusal = _HEAD_TOO_LARGE
            self._refuse_parse("")

    # ---------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0
        self._began_in_chunk = True
        self._chunks = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value)
        # llhttp keeps trailing whitespace, which RFC 9110 excludes from the value.
        self._headers[name.lower().decode("latin-1")] = value.rstrip(b" \t").decode("latin-1")

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_size > MAX_HEAD_BYTES:
            self._parse_refusal = _HEAD_TOO_LARGE
            raise _Refused
        self._body_progress = self.loop.time()
        parser = self.parser
        url = self._url
        if url[:1] == b"/" and b"#" not in url:
            path, _, query = url.partition(b"?")
        else:
            parsed = httptools.parse_url(url)
            path, query = parsed.path, parsed.query or b""
        headers = self._headers
        exchange = Exchange(
            parser.get_method().decode("ascii"), path.decode("latin-1"),
            query.decode("latin-1"), headers,
            keep_alive=parser.get_http_version() != "1.0" and parser.should_keep_alive(),
            expect_continue=headers.get("expect", "").lower() == "100-continue")
        previous = self.current
        self.current = exchange
        if previous is None or previous.response_complete:
            self._start(exchange)
        else:
            self.pause_reading()
            self.pipeline.appendleft(exchange)

    def on_body(self, body: bytes) -> None:
        self._body_progress = self.loop.time()
        exchange = self.current
        if exchange is None or exchange.response_complete:
            return
        exchange.body.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > HIGH_WATER_BYTES:
            self.pause_reading()
        exchange.wake()

    def on_chunk_header(self) -> None:
        # The start of each chunk of a chunked body, the empty one that ends it included.
        self._chunks += 1
        limit = self.limits.max_request_chunks
        if self._chunks > limit + 1:
            self._parse_refusal = (f"Chunked request body exceeds maximum of {limit} non-empty "
                                   "chunks. Send fewer or larger HTTP chunks.")
            raise _Refused

    def on_message_complete(self) -> None:
        exchange = self.current
        if exchange is None or exchange.response_complete:
            return
        exchange.more_body = False
        exchange.wake()

    # ---------------------------------------------------------------- answers

    def _start(self, exchange: Exchange) -> None:
        self.answering = self.loop.create_task(answer(self, exchange))

    def response_complete(self, exchange: Exchange) -> None:
        """Called by ``answer`` once ``exchange``'s response is written (or the client went)."""
        exchange.response_complete = True
        exchange.wake()
        self.answering = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not exchange.keep_alive:
            transport.close()
            return
        if self.pipeline:
            self.resume_reading()
            self._start(self.pipeline.pop())
            return
        if self._refusal is not None or self._peer_done:
            if self._refusal:
                transport.write(self._refusal)
            transport.close()
            return
        self.resume_reading()
        self._begin_waiting()

    def _begin_waiting(self) -> None:
        self._idle_since = self.loop.time()
        self._wait_rank = next(_WAIT_ORDER)

    def _refuse_parse(self, message: str) -> None:
        """Answer 400 the request that did not parse: at once, or after those in flight."""
        response = close_response(400, self._parse_refusal or message
                                  or "Invalid HTTP request received.")
        current = self.current
        transport = self.transport
        assert transport is not None
        if current is not None and not current.response_complete and current.more_body:
            # The request whose body was being parsed can never complete. One waiting in the
            # pipeline is dropped (the one before it keeps its answer); one being answered
            # has its body's reader told the client went.
            in_flight = current in self.pipeline
            if in_flight:
                self.pipeline.remove(current)
            else:
                current.disconnected = True
                current.wake()
        else:
            in_flight = bool(self.pipeline) or (current is not None
                                                and not current.response_complete)
        if in_flight:
            self._refusal = response
            self.pause_reading()
            return
        self._refusal = b""
        transport.write(response)
        transport.close()

    def shutdown(self) -> None:
        """The server stops: close at once when idle, else after the answers in flight."""
        transport = self.transport
        if transport is not None and self.waiting_for_client():
            transport.close()
            return
        for exchange in (self.current, *self.pipeline):
            if exchange is not None:
                exchange.keep_alive = False

    # ---------------------------------------------------------------- flow control

    def pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused and self.transport is not None:
            self.read_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._write_blocked_since = self.loop.time()

    def resume_writing(self) -> None:
        self._resume_writing()

    def _resume_writing(self) -> None:
        self.write_paused = False
        self._write_blocked_since = None
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def drain(self) -> None:
        """Return once the transport takes writes again (or the connection is gone)."""
        if self.write_paused:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await self._drained

    # ---------------------------------------------------------------- ClientGuard's view

    def _in_flight(self) -> Exchange | None:
        return self.current

    def _reading_paused(self) -> bool:
        return self.read_paused

    def _abandon(self, request: Any) -> None:
        request.disconnected = True
        request.wake()
