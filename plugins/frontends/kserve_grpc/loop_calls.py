"""One call of the loop gRPC server (``loop_server``): what its RPC sees of it (``Context``,
``grpc.aio.ServicerContext``'s methods the servicer uses), its messages cut from the stream's
DATA by gRPC's 5-byte prefix (inflated where ``grpc-encoding`` says), a stream's requests as
the RPC takes them and its replies as it writes them, and the texts of gRPC's headers
(statuses, ``grpc-message``'s percent-encoding, ``grpc-timeout``). It owns no socket: the
connection (``loop_connection``) reads, writes and decides when a call starts and ends.
"""

from __future__ import annotations

import asyncio
import base64
import zlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
import grpc.aio

from inferd.plugins.frontends.kserve_grpc.service import Method
from inferd.protocols.http2 import hpack, connection as http2

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_grpc.loop_connection import Connection

OK_HEADERS = hpack.encode_headers([
    (":status", "200"), ("content-type", "application/grpc"),
    ("grpc-accept-encoding", "identity,deflate,gzip"),
])
OK_TRAILERS = hpack.encode_headers([("grpc-status", "0")])
# Headers that are gRPC's own, not the call's metadata (grpc.aio leaves them out too).
_RESERVED = frozenset({"te", "content-type", "grpc-timeout", "grpc-encoding",
                       "grpc-accept-encoding", "grpc-message-type"})
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# A reply up to this size is joined with its prefix (one small copy) and leaves in one write.

def status_trailers(code: grpc.StatusCode, message: str) -> list[tuple[str, str]]:
    fields = [("grpc-status", str(code.value[0]))]
    if message:
        fields.append(("grpc-message", _percent_encode(message)))
    return fields


def _percent_encode(message: str) -> str:
    """gRPC's encoding of ``grpc-message``: UTF-8, with ``%`` and every byte outside
    printable ASCII as ``%XX``."""
    raw = message.encode("utf-8", "replace")
    if all(0x20 <= byte <= 0x7E and byte != 0x25 for byte in raw):
        return message
    return "".join(chr(byte) if 0x20 <= byte <= 0x7E and byte != 0x25 else f"%{byte:02X}"
                   for byte in raw)


def timeout_secs(value: str) -> float | None:
    """``grpc-timeout``'s seconds (``TimeoutValue TimeoutUnit``); None when malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


class Abort(Exception):
    """A call ended with a status before or instead of its reply."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Context:
    """What a servicer's RPC sees of its call: ``grpc.aio.ServicerContext``'s ``abort``,
    ``invocation_metadata``, ``write`` (streams), ``peer``, ``time_remaining`` and
    ``cancelled``."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self.status: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Any = ()) -> NoReturn:
        self.status = (code, details)
        raise grpc.aio.AbortError()

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._call.metadata()

    async def write(self, message: Any) -> None:
        await self._call.write(message)

    def peer(self) -> str:
        return self._call.connection.peer

    def time_remaining(self) -> float | None:
        deadline = self._call.deadline
        return None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())

    def cancelled(self) -> bool:
        return self._call.done


class Call:
    """One stream: its method, its messages as they arrive, its reply on the way out."""

    def __init__(self, connection: Connection, stream_id: int, name: str, method: Method,
                 headers: hpack.Headers, encoding: str) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.name = name
        self.method = method
        self.headers = headers
        self.encoding = encoding
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.context = Context(self)
        self.done = False
        self.started = False  # the reply's headers went out
        self._parts: list[bytes] = []
        self._have = 0
        self._need = -1  # the current message's length, -1 before its prefix
        self._compressed = False
        # Streams only: the messages read and not yet taken by the RPC, None at the end.
        self.inbox: asyncio.Queue[bytes | None] | None = None
        self._backlog = 0  # bytes of messages in the inbox
        self._unreleased = 0  # bytes read whose window is given back once the RPC catches up
        self._drained: asyncio.Event | None = None

    def metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        pairs: list[tuple[str, str | bytes]] = []
        for name, value in self.headers:
            if name.startswith(":") or name in _RESERVED:
                continue
            if name.endswith("-bin"):
                pairs.append((name, base64.b64decode(value + "=" * (-len(value) % 4))))
            else:
                pairs.append((name, value))
        return tuple(pairs)

    def feed(self, data: bytes) -> list[bytes]:
        """The messages ``data`` completes (gRPC's 5-byte prefix: compressed flag, length)."""
        limit = self.connection.server.max_message
        if self._need < 0 and not self._parts and len(data) >= 5:
            size = int.from_bytes(data[1:5], "big")
            if size > limit:
                raise Abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"Received message larger than max ({size} vs. {limit})")
            if len(data) == size + 5:  # the common case: one whole message in one frame
                return [self._inflate(data[5:], data[0])]
        messages = []
        self._parts.append(data)
        self._have += len(data)
        while True:
            if self._need < 0:
                if self._have < 5:
                    break
                head = b"".join(self._parts)
                self._compressed = bool(head[0])
                self._need = int.from_bytes(head[1:5], "big")
                if self._need > limit:
                    raise Abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 f"Received message larger than max ({self._need} vs. {limit})")
                self._parts = [head[5:]]
                self._have -= 5
            if self._have < self._need:
                break
            joined = b"".join(self._parts) if len(self._parts) > 1 else self._parts[0]
            messages.append(self._inflate(joined[:self._need], self._compressed))
            rest = joined[self._need:]
            self._parts = [rest] if rest else []
            self._have = len(rest)
            self._need = -1
        return messages

    def _inflate(self, message: bytes, compressed: int | bool) -> bytes:
        """``message`` as sent, or inflated, never past the message limit: a small deflate
        stream can stand for a huge message, so it is inflated with a bound, not whole."""
        if not compressed:
            return message
        if self.encoding == "gzip":
            inflater = zlib.decompressobj(wbits=31)
        elif self.encoding == "deflate":
            inflater = zlib.decompressobj()
        else:
            raise Abort(grpc.StatusCode.INTERNAL,
                        f"a compressed message without a known grpc-encoding ({self.encoding!r})")
        limit = self.connection.server.max_message
        try:
            inflated = inflater.decompress(message, limit + 1)
        except zlib.error as error:
            raise Abort(grpc.StatusCode.INTERNAL,
                        f"the message does not decompress as {self.encoding}: {error}") from None
        if len(inflated) > limit:
            raise Abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"Received message larger than max (over {limit} bytes decompressed "
                        f"vs. {limit})")
        if not inflater.eof:
            raise Abort(grpc.StatusCode.INTERNAL,
                        f"the message does not decompress as {self.encoding}: it is truncated")
        return inflated

    async def write(self, message: Any) -> None:
        """A stream's reply message: sent now as far as the windows allow; waits while more
        than one message's worth is queued for a client that reads slowly."""
        if self.done:
            raise asyncio.CancelledError()
        data = self.method.serialize(message)
        connection = self.connection
        if not self.started:
            self.started = True
            connection.h2.send_headers(self.stream_id, OK_HEADERS)
        connection.h2.send_data(self.stream_id, len(data).to_bytes(5, "big") + data)
        connection.flush_soon()
        while (connection.h2.pending(self.stream_id) > len(data)
               or connection.writing_paused) and not self.done:
            if self._drained is None:
                self._drained = asyncio.Event()
            self._drained.clear()
            await self._drained.wait()

    def drained(self) -> None:
        if self._drained is not None:
            self._drained.set()

    def queue(self, data: bytes, messages: list[bytes], end_stream: bool) -> None:
        """A stream's ``data`` read, completing ``messages``: they wait in the inbox for the
        RPC. The window for ``data`` is given back now while the RPC keeps up, and only as
        it catches up once more than half a stream window waits, so a client cannot make
        the server hold more of its messages than that."""
        assert self.inbox is not None
        for message in messages:
            self.inbox.put_nowait(message)
            self._backlog += len(message)
        if end_stream:
            self.inbox.put_nowait(None)
        self._unreleased += len(data)
        self._release()

    def _release(self) -> None:
        if self._unreleased and self._backlog <= http2.STREAM_WINDOW // 2:
            self.connection.h2.release(self.stream_id, self._unreleased)
            self._unreleased = 0
            self.connection.flush_soon()

    async def requests(self) -> AsyncIterator[Any]:
        """A stream's requests, parsed as the RPC takes them."""
        assert self.inbox is not None
        while True:
            message = await self.inbox.get()
            if message is None:
                return
            self._backlog -= len(message)
            self._release()
            yield self.method.deserialize(message)
