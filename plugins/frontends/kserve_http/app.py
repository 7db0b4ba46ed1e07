"""The KServe v2 HTTP frontend's ASGI application, served by uvicorn in the main event loop.

Owns one request's way through HTTP: matching its route (``routes``), refusing it while the
server shuts down or when ``--http-restricted-api`` keeps its group from this client, reading
its body under ``--http-max-input-size`` (from ``Content-Length`` before reading, while
reading, and after decompression), calling the handler, compressing an infer response the
client accepts compressed, and writing the response in slices. It is the single place where
this protocol turns exceptions into ``{"error": ...}`` responses with the status of their
error code. No exception may reach uvicorn, and a client's numbers are checked before
anything is allocated from them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio

from inferd.kernel.sdk import CURRENT, log_context
from inferd.plugins.frontends.kserve_http.connection import CONNECTION, ClientWatch
from inferd.plugins.frontends.kserve_http.exchange import (
    OFFLOAD_BYTES,
    HttpRequest,
    HttpResponse,
    failed,
)
from inferd.plugins.frontends.kserve_http.routes import match
from inferd.protocols.kserve_http import content_coding
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    ErrorCode,
    InferdError,
    InvalidArgument,
    http_status,
)
from inferd.protocols.messages import Message
from inferd.protocols.restrictions import Restriction, http_refusal

if TYPE_CHECKING:
    from inferd.kernel.sdk.frontends import DataPlane

logger = logging.getLogger(__name__)
# The numbers libevhtp gives these methods, which Triton's verbose request line prints.
_EVHTP_METHODS = {"GET": 0, "HEAD": 1, "POST": 2, "PUT": 3, "DELETE": 4}
# Responses smaller than this are written in one piece; larger ones part by part, so tensor
# buffers are never copied into one big bytes object.
JOIN_BODY_BELOW = 256 * 1024
# Parts larger than this are written as views of this size: uvicorn waits for the transport's
# buffer to drain between writes, so a client that reads slowly (or never) holds at most
# about one slice in the transport rather than the whole response.
WRITE_SLICE_BYTES = 512 * 1024

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# The body's next piece and whether more follow; raises ``ClientGone`` once the client went.
NextChunk = Callable[[], Awaitable[tuple[bytes | memoryview, bool]]]


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class KserveHttpApp:
    """The ASGI application: routes a request, reads its body, asks the data plane."""

    def __init__(self, dataplane: DataPlane, max_input_size: int,
                 restricted: dict[str, Restriction] | None = None) -> None:
        self.dataplane = dataplane
        self.max_input_size = max_input_size
        self.restricted = restricted or {}
        self.accepting = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        # Our connection (absent under another ASGI server) cancels this task if the client
        # disconnects meanwhile: the request's work stops, nothing is sent.
        watch: ClientWatch | None = scope.get(CONNECTION)
        task = asyncio.current_task()
        if watch is not None:
            watch.answering = task
        try:
            with log_context.request_context("HTTP", scope.get("method", "")):
                await self._answer(scope, receive, send, watch)
        except asyncio.CancelledError:
            if watch is None or not watch.gone or task is None:
                raise
            task.uncancel()  # the client's request was cancelled, not the server
        finally:
            if watch is not None:
                watch.answering = None

    async def _answer(self, scope: Scope, receive: Receive, send: Send,
                      watch: ClientWatch | None) -> None:
        try:
            response = await self._respond(scope, receive)
        except ClientGone:
            return
        except Exception as error:
            response = failed(500, f"{type(error).__name__}: {error}", error)
        if watch is not None and response.stream is None:
            # Its work is done: a send to a client gone fails on its own (uvicorn).
            watch.answering = None
        trace = response.trace
        if trace is not None:
            trace.stamp("HTTP_SEND_START")
            # A streamed body's answers are computed as it is sent: in the request's trace.
            token = CURRENT.set(trace)
        try:
            await self._send(send, response)
        except Exception:
            logger.debug("could not send an HTTP response", exc_info=True)
        if trace is not None:
            CURRENT.reset(token)
            trace.stamp("HTTP_SEND_END")
            trace.end()

    async def _respond(self, scope: Scope, receive: Receive) -> HttpResponse:
        path = bytes(scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        headers = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        query = bytes(scope.get("query_string") or b"").decode("latin-1")

        async def next_chunk() -> tuple[bytes | memoryview, bool]:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            return message.get("body", b""), message.get("more_body", False)

        return await self.respond(scope["method"], path, headers, query, next_chunk)

    async def respond(self, method: str, path: str, headers: dict[str, str], query: str,
                      next_chunk: NextChunk) -> HttpResponse:
        """One request's response, whichever server parsed it: ``path`` undecoded, header
        names in lower case, ``next_chunk`` the body's next piece and whether more follow
        (raising ``ClientGone`` once the client went)."""
        if logger.isEnabledFor(logging.DEBUG):  # log_verbose_level 1 and up: Triton's line
            logger.debug("HTTP request: %s %s", _EVHTP_METHODS.get(method, method), path)
        route = match(path)
        if route is None:
            return failed(404, "Not Found")
        handlers, arguments, group = route
        handler = handlers.get(method)
        if handler is None:
            return failed(405, "Method Not Allowed")
        context = log_context.current()
        if context is not None:  # the handler's name: the path may hold anything
            context.endpoint = f"{method} {handler.__name__}"
        if not self.accepting:
            return failed(503, SHUTTING_DOWN)
        received_ns = time.perf_counter_ns() if self.dataplane.tracer.active else 0
        restriction = self.restricted.get(group)
        if restriction is not None and not restriction.allows(headers.get(restriction.key)):
            return failed(403, http_refusal(restriction))
        try:
            body = await self.read_body(headers, next_chunk) if method == "POST" else b""
            response = await handler(self, HttpRequest(method, arguments, headers, body,
                                                       received_ns, query))
        except InferdError as error:
            return failed(http_status(ErrorCode(error.code)), error.message)
        if response.compressible and response.length:
            response = await self._compressed(response, headers.get("accept-encoding"))
        return response

    async def read_body(self, headers: dict[str, str],
                        next_chunk: NextChunk) -> bytes | memoryview:
        """The whole body, decompressed, refused past ``--http-max-input-size`` before it is
        read (its declared length), as it is read, and as it is decompressed."""
        limit = self.max_input_size
        declared = headers.get("content-length", "").strip()
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise InvalidArgument(
                f"the request body of {int(declared)} bytes is larger than the maximum input "
                f"size of {limit} bytes (--http-max-input-size)"
            )
        decoder = content_coding.BodyDecoder(headers.get("content-encoding"), limit)
        chunks: list[bytes | memoryview] = []
        received = 0
        while True:
            chunk, more = await next_chunk()
            received += len(chunk)
            if received > limit:
                raise InvalidArgument(
                    f"the request body is larger than the maximum input size of {limit} bytes "
                    "(--http-max-input-size)"
                )
            if chunk:
                decoded = decoder.feed(chunk)
                if len(decoded):
                    chunks.append(decoded)
            if not more:
                break
        rest = decoder.finish()
        if rest:
            chunks.append(rest)
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    async def _compressed(self, response: HttpResponse, accept: str | None) -> HttpResponse:
        coding = content_coding.choose_response_coding(accept)
        if coding == content_coding.IDENTITY:
            return response
        if response.length > OFFLOAD_BYTES:
            body = await anyio.to_thread.run_sync(content_coding.compress, response.parts, coding)
        else:
            body = content_coding.compress(response.parts, coding)
        headers = (*response.headers, ("content-encoding", coding))
        return HttpResponse(response.status, (body,), headers, trace=response.trace)

    @staticmethod
    async def _send(send: Send, response: HttpResponse) -> None:
        headers = [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers
        ]
        if response.stream is not None:  # chunked: each event is written as it comes
            await send({"type": "http.response.start", "status": response.status,
                        "headers": headers})
            async for chunk in response.stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        length = response.length
        headers.append((b"content-length", str(length).encode("ascii")))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        parts: list[bytes | memoryview] = [part for part in response.parts if len(part)] or [b""]
        if len(parts) > 1 and length <= JOIN_BODY_BELOW:
            parts = [b"".join(parts)]  # one write (one syscall) instead of one per part
        elif length > WRITE_SLICE_BYTES:
            parts = list(_slices(parts))
        for index, part in enumerate(parts):
            more = index < len(parts) - 1
            await send({"type": "http.response.body", "body": part, "more_body": more})

    async def ask(self, request: Message) -> Message:
        return await self.dataplane.handle(request)


def _slices(parts: list[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """``parts`` with every part over ``WRITE_SLICE_BYTES`` cut into views (no copies)."""
    for part in parts:
        if len(part) <= WRITE_SLICE_BYTES:
            yield part
            continue
        view = memoryview(part).cast("B")
        for offset in range(0, view.nbytes, WRITE_SLICE_BYTES):
            yield view[offset : offset + WRITE_SLICE_BYTES]
