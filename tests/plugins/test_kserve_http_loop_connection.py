"""The loop HTTP connection (``--http-implementation loop``) driven without sockets: each guard
the uvicorn path has (tests/plugins/test_kserve_http_frontend.py) holds here alike, and what
this connection writes itself (pipelined answers in order, a half-closed client answered,
large bodies in slices that wait for the client, HEAD without a body, 100-continue) is
right. The e2e suites (test_http_hostile.py and the rest) run both servers over sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from inferd.plugins.frontends.kserve_http.app import ClientGone
from inferd.plugins.frontends.kserve_http.connection import HttpLimits
from inferd.plugins.frontends.kserve_http.exchange import HttpResponse
from inferd.plugins.frontends.kserve_http.loop_connection import LoopHttpConnection
from inferd.plugins.frontends.kserve_http.loop_exchange import WRITE_SLICE_BYTES

CHUNK_CAP = 3
TOO_MANY_CHUNKS = (b'{"error":"Chunked request body exceeds maximum of 3 non-empty chunks. '
                   b'Send fewer or larger HTTP chunks."}')
LIMITS = HttpLimits(max_request_chunks=CHUNK_CAP, max_connections=2, header_timeout_secs=10,
                    body_timeout_secs=30, keep_alive_timeout_secs=5)


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.reading = True

    def write(self, data: bytes | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def output(self) -> bytes:
        return b"".join(self.written)


class EchoApp:
    """The app's ``respond``: 200 with the body once it is all read (``/wait`` first waits
    for ``release``, ``/big`` answers ``big`` instead); records bodies and departures."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.bodies: list[bytes] = []
        self.disconnects = 0
        self.big = b""

    async def respond(self, method: str, path: str, headers: dict[str, str], query: str,
                      next_chunk: Callable[[], Awaitable[tuple[bytes, bool]]]) -> HttpResponse:
        body = b""
        more = method == "POST"
        while more:
            try:
                chunk, more = await next_chunk()
            except ClientGone:
                self.disconnects += 1
                raise
            body += chunk
        self.bodies.append(body)
        if path == "/wait":
            await self.release.wait()
        return HttpResponse(200, (self.big if path == "/big" else body,))


def connect(app: EchoApp, connections: set[Any] | None = None
            ) -> tuple[LoopHttpConnection, FakeTransport]:
    connection = LoopHttpConnection(app, LIMITS, set() if connections is None else connections)  # type: ignore[arg-type]
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


async def until(condition: Callable[[], Any]) -> None:
    """Let the loop run (a bounded number of turns, no clock) until ``condition()``."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the connection never got there")


def chunked(*chunks: bytes, path: bytes = b"/echo") -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" % path
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def post(body: bytes, path: bytes = b"/echo", extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path, len(body), extra, body))


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())  # type: ignore[arg-type]


@pytest.mark.parametrize("pieces", [
    [b"GET /v2 HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n"],
    [b"GET /v2 HTTP/1.1\r\nX: "] + [b"a" * 10_000] * 20,
], ids=["whole", "streamed"])
def test_a_huge_head_is_refused(pieces: list[bytes]) -> None:
    async def scenario() -> FakeTransport:
        connection, transport = connect(EchoApp())
        for piece in pieces:
            if transport.closed:
                break
            connection.data_received(piece)
        return transport

    transport = run(scenario)
    assert transport.closed
    assert transport.output().startswith(b"HTTP/1.1 400 ")
    assert transport.output().endswith(
        b'{"error":"the request line and headers are larger than 65536 bytes"}')


def test_a_body_of_the_cap_in_chunks_is_read_and_one_more_chunk_is_refused() -> None:
    async def scenario() -> tuple[EchoApp, bytes]:
        app = EchoApp()
        connection, transport = connect(app)
        for answered in (1, 2):  # the count starts again with each request
            connection.data_received(chunked(b"ab", b"c", b"d"))
            await until(lambda n=answered: transport.output().count(b"HTTP/1.1 200") == n)
        connection.data_received(chunked(b"a", b"b", b"c", b"d"))
        await until(lambda: transport.closed)
        return app, transport.output()

    app, written = run(scenario)
    assert app.bodies == [b"abcd", b"abcd"] and app.disconnects == 1
    refusal = written.split(b"abcd")[-1]
    assert refusal.startswith(b"HTTP/1.1 400 ") and refusal.endswith(TOO_MANY_CHUNKS)


def test_tiny_chunks_are_counted_however_they_arrive() -> None:
    async def scenario() -> tuple[EchoApp, bytes]:
        app = EchoApp()
        connection, transport = connect(app)
        request = chunked(*[b"x"] * 100)
        for byte in range(len(request)):
            if transport.closed:
                break
            connection.data_received(request[byte : byte + 1])
            await asyncio.sleep(0)
        return app, transport.output()

    app, written = run(scenario)
    assert app.bodies == [] and app.disconnects == 1
    assert written.startswith(b"HTTP/1.1 400 ") and written.endswith(TOO_MANY_CHUNKS)


def test_pipelined_requests_are_answered_in_order_and_a_bad_one_after_them() -> None:
    async def scenario() -> tuple[EchoApp, list[bytes], bytes]:
        app = EchoApp()
        connection, transport = connect(app)
        connection.data_received(post(b"first", b"/wait") + post(b"second")
                                 + chunked(b"a", b"b", b"c", b"d", b"e"))
        await until(lambda: app.bodies == [b"first"])
        before = list(transport.written)
        app.release.set()
        await until(lambda: transport.closed)
        return app, before, transport.output()

    app, before, written = run(scenario)
    assert before == []  # nothing answered before the first
    assert app.bodies == [b"first", b"second"]
    first, rest = written.split(b"first", 1)
    second, refusal = rest.split(b"second", 1)
    assert first.startswith(b"HTTP/1.1 200 ") and second.startswith(b"HTTP/1.1 200 ")
    assert refusal.startswith(b"HTTP/1.1 400 ") and refusal.endswith(TOO_MANY_CHUNKS)


def test_garbage_after_a_request_is_answered_400_after_it() -> None:
    async def scenario() -> bytes:
        app = EchoApp()
        connection, transport = connect(app)
        connection.data_received(post(b"first", b"/wait") + b"NOT HTTP\r\n\r\n")
        await until(lambda: app.bodies == [b"first"])
        app.release.set()
        await until(lambda: transport.closed)
        return transport.output()

    written = run(scenario)
    first, refusal = written.split(b"first", 1)
    assert first.startswith(b"HTTP/1.1 200 ")
    assert refusal.startswith(b"HTTP/1.1 400 ") and b"connection: close" in refusal


def test_a_client_that_half_closes_after_its_request_gets_the_answer() -> None:
    async def scenario() -> tuple[bool | None, bytes, bool]:
        app = EchoApp()
        connection, transport = connect(app)
        connection.data_received(post(b"asked", b"/wait"))
        kept = connection.eof_received()
        app.release.set()
        await until(lambda: transport.closed)
        return kept, transport.output(), connection.eof_received() is None

    kept, written, idle_eof_closes = run(scenario)
    assert kept is True
    assert written.startswith(b"HTTP/1.1 200 ") and written.endswith(b"asked")
    assert idle_eof_closes


def test_a_large_body_leaves_in_slices_each_once_the_client_reads() -> None:
    async def scenario() -> tuple[int, int, bytes]:
        app = EchoApp()
        app.big = bytes(range(256)) * (3 * WRITE_SLICE_BYTES // 256)
        connection, transport = connect(app)
        connection.pause_writing()
        connection.data_received(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        await until(lambda: transport.written)
        await asyncio.sleep(0)
        held = len(transport.written)  # the head; the body waits for the client
        connection.resume_writing()
        await until(lambda: len(transport.output()) > 3 * WRITE_SLICE_BYTES)
        return held, len(transport.written), transport.output().split(b"\r\n\r\n", 1)[1]

    held, writes, body = run(scenario)
    assert held == 1 and writes == 4
    assert body == bytes(range(256)) * (3 * WRITE_SLICE_BYTES // 256)


def test_head_has_no_body_http_1_0_closes_and_100_continue_is_sent_once_read() -> None:
    async def scenario() -> tuple[bytes, bytes, bytes]:
        app = EchoApp()
        connection, transport = connect(app)
        connection.data_received(b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\n")
        await until(lambda: transport.written)
        head = transport.output()
        transport.written.clear()
        connection.data_received(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n"
                                 b"Expect: 100-continue\r\n\r\n")
        await until(lambda: transport.written)
        continued = transport.output()
        connection.data_received(b"body")
        await until(lambda: b"200" in transport.output())
        transport.written.clear()
        connection.data_received(b"GET /x HTTP/1.0\r\n\r\n")
        await until(lambda: transport.closed)
        return head, continued, transport.output()

    head, continued, old = run(scenario)
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"content-length: 0\r\n\r\n")
    assert continued == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert b"connection: close\r\n" in old


def test_deadlines_of_a_head_a_body_and_an_idle_connection() -> None:
    async def scenario() -> tuple[bytes, bytes, bool]:
        app = EchoApp()
        now = asyncio.get_running_loop().time()
        slow_head, head_transport = connect(app)
        slow_head.data_received(b"GET /x HTTP/1.1\r\nHo")
        slow_head.check_deadlines(now + 9)
        assert not head_transport.closed
        slow_head.check_deadlines(now + 11)
        slow_body, body_transport = connect(app)
        slow_body.data_received(b"POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc")
        await asyncio.sleep(0)
        slow_body.check_deadlines(now + 31)
        idle, idle_transport = connect(app)
        idle.check_deadlines(now + 6)
        return head_transport.output(), body_transport.output(), idle_transport.closed

    head, body, idle_closed = run(scenario)
    assert head.startswith(b"HTTP/1.1 408 ") and b"--http-header-timeout-secs" in head
    assert body.startswith(b"HTTP/1.1 408 ") and b"--http-body-timeout-secs" in body
    assert idle_closed


def test_at_the_cap_the_longest_idle_makes_room_and_when_all_answer_a_new_one_gets_503() -> None:
    async def scenario() -> tuple[bool, bool, bytes]:
        app = EchoApp()
        connections: set[Any] = set()
        oldest, oldest_transport = connect(app, connections)
        busy, _ = connect(app, connections)
        busy.data_received(post(b"x", b"/wait"))
        await until(lambda: app.bodies)
        newer, _ = connect(app, connections)  # takes the idle one's place
        newer.data_received(post(b"y", b"/wait"))
        await until(lambda: len(app.bodies) == 2)
        _, refused = connect(app, connections)
        return oldest_transport.closed, refused.closed, refused.output()

    oldest_closed, refused_closed, refusal = run(scenario)
    assert oldest_closed and refused_closed
    assert refusal.startswith(b"HTTP/1.1 503 ") and b"--http-max-connections" in refusal
