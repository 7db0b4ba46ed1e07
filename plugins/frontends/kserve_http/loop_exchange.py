"""One request on a ``loop_connection``: what its head said and how its body arrives
(``Exchange``), and its answer (``answer``): the app's ``respond`` called directly, then the
response written by hand: its head and a small body in one write, a large body in slices
that wait for the client to read, a stream as chunks. The app's own ``__call__`` does the
same for uvicorn through ASGI messages.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from inferd.kernel.sdk import CURRENT, log_context
from inferd.plugins.frontends.kserve_http.app import (
    JOIN_BODY_BELOW,
    WRITE_SLICE_BYTES,
    ClientGone,
)
from inferd.plugins.frontends.kserve_http.exchange import HttpResponse, failed
from inferd.plugins.frontends.kserve_http.guard import STATUS_LINE

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_http.loop_connection import LoopHttpConnection

logger = logging.getLogger(__name__)

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Exchange:
    """One request: its head, as the app reads it, and its body as it arrives."""

    __slots__ = ("body", "buffered", "disconnected", "expect_continue", "headers",
                 "keep_alive", "method", "more_body", "path", "query", "response_complete",
                 "_waiter")

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], *,
                 keep_alive: bool, expect_continue: bool) -> None:
        self.method = method
        self.path = path  # undecoded, as the routes match it
        self.query = query
        self.headers = headers  # names in lower case
        self.keep_alive = keep_alive
        self.expect_continue = expect_continue
        self.body: list[bytes] = []  # arrived, not yet read
        self.buffered = 0
        self.more_body = True
        self.response_complete = False
        self.disconnected = False
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """Body bytes arrived, the body ended or the client went: a waiting reader reads."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def next_chunk(self, connection: LoopHttpConnection) -> tuple[bytes, bool]:
        """The body's next piece (all that arrived since the last) and whether more follow."""
        if self.expect_continue:
            self.expect_continue = False
            transport = connection.transport
            if transport is not None and not transport.is_closing():
                transport.write(_CONTINUE)
        while not self.body and self.more_body and not self.disconnected:
            connection.resume_reading()
            waiter = self._waiter = connection.loop.create_future()
            await waiter
        if self.disconnected or self.response_complete:
            raise ClientGone
        body = self.body
        chunk = body[0] if len(body) == 1 else b"".join(body)
        self.body = []
        self.buffered = 0
        return chunk, self.more_body


async def answer(connection: LoopHttpConnection, exchange: Exchange) -> None:
    """Answer ``exchange``; a client that goes meanwhile cancels this (its work stops)."""
    try:
        with log_context.request_context("HTTP", exchange.method):
            await _answer(connection, exchange)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if connection.transport is None or not connection.gone or task is None:
            raise
        task.uncancel()  # the client's request was cancelled, not the server
    finally:
        connection.response_complete(exchange)


async def _answer(connection: LoopHttpConnection, exchange: Exchange) -> None:
    try:
        response = await connection.app.respond(
            exchange.method, exchange.path, exchange.headers, exchange.query,
            functools.partial(exchange.next_chunk, connection))
    except ClientGone:
        return
    except Exception as error:
        response = failed(500, f"{type(error).__name__}: {error}", error)
    if response.stream is None:
        connection.answering = None  # its work is done: a write to a client gone just fails
    trace = response.trace
    if trace is not None:
        trace.stamp("HTTP_SEND_START")
        token = CURRENT.set(trace)  # a streamed body's answers are computed as it is sent
    try:
        await _write(connection, exchange, response)
    except Exception:
        logger.debug("could not send an HTTP response", exc_info=True)
    if trace is not None:
        CURRENT.reset(token)
        trace.stamp("HTTP_SEND_END")
        trace.end()


def _head(status: int, response: HttpResponse, keep_alive: bool, length: int | None) -> bytes:
    lines = [STATUS_LINE.get(status) or f"HTTP/1.1 {status} \r\n".encode("ascii")]
    for name, value in response.headers:
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    if length is None:
        lines.append(b"transfer-encoding: chunked\r\n")
    else:
        lines.append(b"content-length: %d\r\n" % length)
    if not keep_alive:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


async def _write(connection: LoopHttpConnection, exchange: Exchange,
                 response: HttpResponse) -> None:
    transport = connection.transport
    if transport is None or transport.is_closing() or exchange.disconnected:
        return
    with_body = exchange.method != "HEAD"
    if response.stream is not None:  # chunked: each event is written as it comes
        transport.write(_head(response.status, response, exchange.keep_alive, None))
        async for chunk in response.stream:
            await connection.drain()
            if transport.is_closing():
                return
            if chunk and with_body:
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        if with_body:
            transport.write(b"0\r\n\r\n")
        return
    length = response.length
    head = _head(response.status, response, exchange.keep_alive, length)
    parts = [part for part in response.parts if len(part)] if with_body else []
    if length <= JOIN_BODY_BELOW or not parts:
        transport.write(b"".join((head, *parts)))  # one write, one system call
        return
    transport.write(head)
    for part in parts:
        view = memoryview(part).cast("B")
        for offset in range(0, view.nbytes, WRITE_SLICE_BYTES):
            # A client that reads slowly (or never) holds about one slice in the transport.
            await connection.drain()
            if transport.is_closing():
                return
            transport.write(view[offset : offset + WRITE_SLICE_BYTES])
