"""Tests of the KServe HTTP frontend's ASGI app and HTTP protocol, driven without sockets: the
route table, body limits, the one place errors become responses, and the bounded head."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from inferd.kernel.observability.tracing import disabled_tracer
from inferd.plugins.frontends.kserve_http import app as asgi
from inferd.plugins.frontends.kserve_http.connection import GuardedHttpProtocol, HttpLimits
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable
from inferd.protocols.messages import (
    Ack,
    HealthStatus,
    Index,
    IndexEntry,
    Message,
    ServerMetadata,
)


class FakeDataPlane:
    """Answers from a table by request kind, or raises what the table holds."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.requests: list[Message] = []
        self.tracer = disabled_tracer()

    async def handle(self, request: Message) -> Message:
        self.requests.append(request)
        answer = self.answers[type(request).__name__]
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


def call(app: asgi.KserveHttpApp, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None, chunk: int = 1 << 20) -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages = [
        {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    response_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    content = b"".join(bytes(m.get("body", b"")) for m in sent[1:])
    assert int(response_headers["content-length"]) == len(content)
    return start["status"], response_headers, content


def make_app(limit: int = 1 << 20, **answers: Any) -> tuple[asgi.KserveHttpApp, FakeDataPlane]:
    dataplane = FakeDataPlane(answers)
    return asgi.KserveHttpApp(dataplane, limit), dataplane  # type: ignore[arg-type]


def test_routes_methods_and_shutting_down() -> None:
    app, dataplane = make_app(
        ServerMetadataRequest=ServerMetadata("inferd", "1", ("binary_tensor_data",)),
        HealthRequest=HealthStatus(False),
        ModelReadyRequest=HealthStatus(False),
    )
    status, headers, body = call(app, "GET", "/v2")
    assert (status, headers["content-type"]) == (200, "application/json")
    assert json.loads(body)["extensions"] == ["binary_tensor_data"]
    assert call(app, "GET", "/v2/health/ready")[0::2] == (400, b"")
    assert call(app, "GET", "/v2/models/a%2Fb/ready")[0::2] == (
        400, b'{"error":"Model version not ready"}')
    assert dataplane.requests[-1].model == "a/b"  # type: ignore[attr-defined]
    assert call(app, "GET", "/v2/models/m/versions/x")[0::2] == (404, b'{"error":"Not Found"}')
    assert call(app, "PUT", "/v2")[0::2] == (405, b'{"error":"Method Not Allowed"}')
    app.accepting = False
    assert call(app, "GET", "/v2")[0::2] == (503, b'{"error":"server is shutting down"}')


def test_errors_become_responses() -> None:
    app, _ = make_app(
        ModelMetadataRequest=NotFound("Request for unknown model: 'm' is not found"),
        ModelConfigRequest=Unavailable("busy"),
        StatisticsRequest=RuntimeError("boom"),
    )
    assert call(app, "GET", "/v2/models/m")[0::2] == (
        404, b'{"error":"Request for unknown model: \'m\' is not found"}')
    assert call(app, "GET", "/v2/models/m/config")[0::2] == (503, b'{"error":"busy"}')
    assert call(app, "GET", "/v2/models/stats")[0::2] == (500, b'{"error":"RuntimeError: boom"}')


def test_body_limits_and_decoding() -> None:
    app, dataplane = make_app(limit=100, IndexRequest=Index((IndexEntry("m"),)),
                              LoadRequest=Ack(), UnloadRequest=InvalidArgument("no"))
    status, _, body = call(app, "POST", "/v2/repository/index", b"{}",
                           {"Content-Length": "101"})
    assert (status, json.loads(body)["error"]) == (
        400, ("the request body of 101 bytes is larger than the maximum input size of 100 bytes"
             " (--http-max-input-size)"))
    status, _, body = call(app, "POST", "/v2/repository/index", b" " * 150, chunk=10)
    assert status == 400 and "larger than the maximum input size" in json.loads(body)["error"]
    status, _, body = call(app, "POST", "/v2/repository/index", gzip.compress(b" " * 1000),
                           {"Content-Encoding": "gzip"})
    assert status == 400 and "decompresses to more than" in json.loads(body)["error"]
    status, _, body = call(app, "POST", "/v2/repository/index",
                           gzip.compress(b'{"ready": true}'), {"Content-Encoding": "gzip"}, chunk=3)
    assert (status, json.loads(body)) == (200, [{"name": "m"}])
    assert dataplane.requests[-1].ready_only is True  # type: ignore[attr-defined]
    assert call(app, "POST", "/v2/repository/models/m/load")[0::2] == (200, b"")
    assert call(app, "POST", "/v2/repository/models/m/unload")[0::2] == (400, b'{"error":"no"}')


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, *args: Any, **kwargs: Any) -> None:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.mark.parametrize("pieces", [
    [b"GET /v2 HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n"],
    [b"GET /v2 HTTP/1.1\r\nX: "] + [b"a" * 10_000] * 20,
], ids=["whole", "streamed"])
def test_a_huge_head_is_refused(pieces: list[bytes]) -> None:
    async def scenario() -> FakeTransport:
        config = uvicorn.Config(lambda *a: None, http=GuardedHttpProtocol,
                                lifespan="off", log_config=None, log_level="critical")
        config.load()
        protocol = GuardedHttpProtocol(config=config, server_state=ServerState(),
                                                 app_state={})
        transport = FakeTransport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for piece in pieces:
            if transport.closed:
                break
            protocol.data_received(piece)
        return transport

    transport = asyncio.run(scenario())
    assert transport.closed
    response = b"".join(transport.written)
    assert response.startswith(b"HTTP/1.1 400 ")
    assert response.endswith(b'{"error":"the request line and headers are larger than 65536 bytes"}')


# ------------------------------------------------------------------ chunks of a request body

CHUNK_CAP = 3
TOO_MANY_CHUNKS = (b'{"error":"Chunked request body exceeds maximum of 3 non-empty chunks. '
                   b'Send fewer or larger HTTP chunks."}')


def chunked(*chunks: bytes, path: bytes = b"/echo") -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" % path
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


class EchoApp:
    """Answers 200 with the request's body once it is all read; ``/wait`` first waits for
    ``release``. Records the bodies it read and whether it saw the client go."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.bodies: list[bytes] = []
        self.disconnects = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnects += 1
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        if scope["path"] == "/wait":
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def guarded_connection(app: EchoApp) -> tuple[GuardedHttpProtocol, FakeTransport]:
    config = uvicorn.Config(app, http=GuardedHttpProtocol, lifespan="off", log_config=None,
                            log_level="critical")
    config.load()
    protocol = GuardedHttpProtocol(config=config, server_state=ServerState(), app_state={},
                                   limits=HttpLimits(max_request_chunks=CHUNK_CAP))
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def answers(transport: FakeTransport) -> int:
    return b"".join(transport.written).count(b"HTTP/1.1 200")


async def until(condition: Any) -> None:
    """Let the loop run (a bounded number of turns, no clock) until ``condition()``."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the connection never got there")


def test_a_body_of_the_cap_in_chunks_is_read_each_time_and_one_more_chunk_is_refused() -> None:
    async def scenario() -> tuple[EchoApp, bytes, bool]:
        app = EchoApp()
        protocol, transport = guarded_connection(app)
        # The count starts again with each request of a connection.
        for answered in (1, 2):
            protocol.data_received(chunked(b"ab", b"c", b"d"))
            await until(lambda answered=answered: answers(transport) == answered)
        for piece in (chunked(b"a", b"b", b"c", b"d")[:-5], b"0\r\n\r\n"):
            protocol.data_received(piece)  # the ending chunk is the one past the count
            await until(lambda: app.bodies == [b"abcd"] * 2)
        await until(lambda: transport.closed)
        return app, b"".join(transport.written), transport.closed

    app, written, closed = asyncio.run(scenario())
    assert app.bodies == [b"abcd", b"abcd"] and app.disconnects == 1
    assert written.count(b"HTTP/1.1 200") == 2
    refusal = written.split(b"abcd")[-1]
    assert refusal.startswith(b"HTTP/1.1 400 ") and refusal.endswith(TOO_MANY_CHUNKS)
    assert closed


def test_tiny_chunks_are_counted_however_they_arrive() -> None:
    async def scenario() -> tuple[EchoApp, bytes]:
        app = EchoApp()
        protocol, transport = guarded_connection(app)
        request = chunked(*[b"x"] * 100)
        for byte in range(len(request)):  # a byte a read: chunks never whole in one
            if transport.closed:
                break
            protocol.data_received(request[byte : byte + 1])
            await asyncio.sleep(0)
        await until(lambda: transport.closed)
        return app, b"".join(transport.written)

    app, written = asyncio.run(scenario())
    assert app.bodies == [] and app.disconnects == 1
    assert written.startswith(b"HTTP/1.1 400 ") and written.endswith(TOO_MANY_CHUNKS)


def test_a_request_pipelined_before_too_many_chunks_is_answered_first() -> None:
    async def scenario() -> tuple[EchoApp, list[bytes], bytes]:
        app = EchoApp()
        protocol, transport = guarded_connection(app)
        first = b"POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nfirst"
        protocol.data_received(first + chunked(b"a", b"b", b"c", b"d", b"e"))
        await until(lambda: app.bodies == [b"first"])
        before = list(transport.written)  # the first is still being answered
        app.release.set()
        await until(lambda: transport.closed)
        return app, before, b"".join(transport.written)

    app, before, written = asyncio.run(scenario())
    assert before == []
    assert written.startswith(b"HTTP/1.1 200 ") and b"first" in written
    refusal = written.split(b"first", 1)[1]
    assert refusal.startswith(b"HTTP/1.1 400 ") and refusal.endswith(TOO_MANY_CHUNKS)
    assert app.bodies == [b"first"]  # the refused request's app never ran
