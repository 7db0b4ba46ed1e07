"""One connection of the loop gRPC server (``loop_server``): HTTP/2 frames in, gRPC calls out.

Owns a client's connection as an asyncio protocol over ``inferd.protocols.http2.connection``
(compiled): a stream opened with a POST of ``application/grpc`` to a known method becomes a ``Call``
(``loop_calls``) whose RPC runs as a task (refused first under
``--grpc-restricted-protocol``, cancelled at its ``grpc-timeout`` or by the client's
RST_STREAM), its reply leaving in one write or as trailers alone; the connection's reads
pause while the socket's buffer is over its share, and new streams are refused while output
waits on the client's windows past it. Its clocks (the handshake, keepalive pings, the idle
GOAWAY, output that stops moving) are ``loop_timers``'; the listening socket and the
connection cap are ``loop_server``'s.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

import grpc
import grpc.aio

from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.request_log import request_failed
from inferd.plugins.frontends.kserve_grpc.loop_calls import (
    OK_HEADERS,
    OK_TRAILERS,
    Abort,
    Call,
    status_trailers,
    timeout_secs,
)
from inferd.plugins.frontends.kserve_grpc.loop_timers import ConnectionTimers
from inferd.plugins.frontends.kserve_grpc.service import SERVICE_NAME
from inferd.protocols.http2 import hpack, connection as http2
from inferd.protocols.http2.guard import PingPolicy

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_grpc.loop_server import LoopServer
    from inferd.protocols.http2.connection import Chunk

logger = logging.getLogger(__name__)

_PATH_PREFIX = f"/{SERVICE_NAME}/"
_JOIN_BELOW = 64 * 2**10


class Connection(ConnectionTimers, asyncio.Protocol):
    """One client's HTTP/2 connection: its streams as gRPC calls, and what it writes."""

    def __init__(self, server: LoopServer) -> None:
        self.server = server
        self.loop = server.loop
        limits = server.limits
        self.h2 = http2.Connection(
            max_concurrent_streams=limits.max_concurrent_streams,
            max_header_list=limits.max_metadata_size, reset_budget=limits.reset_budget,
            control_budget=limits.control_frame_budget,
            ping_policy=PingPolicy(limits.permit_pings_without_calls,
                                   limits.min_recv_ping_interval_ms / 1000,
                                   limits.max_ping_strikes))
        self.transport: asyncio.Transport | None = None
        self.calls: dict[int, Call] = {}
        self.peer = ""
        self._flush_scheduled = False
        self._closing = False
        self.writing_paused = False
        self._init_timers()

    # ---------------------------------------------------------------- asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        address = transport.get_extra_info("peername")
        if isinstance(address, tuple):
            family = "ipv6" if ":" in str(address[0]) else "ipv4"
            self.peer = f"{family}:{address[0]}:{address[1]}"
        server = self.server
        if len(server.connections) >= server.max_connections:
            self.transport.close()  # past the cap: closed as soon as it is accepted
            return
        server.connections.add(self)
        self.transport.set_write_buffer_limits(high=server.limits.max_connection_buffer)
        self._start_timers()
        self._write(self.h2.take_output())

    def data_received(self, data: bytes) -> None:
        self._heard = True
        try:
            self._received(data)
        except http2.ProtocolError as error:
            logger.debug("gRPC connection %s: %s", self.peer, error.message)
            self.h2.goaway(error.code, error.message)
            self._abort()
            return
        self.flush()

    def _received(self, data: bytes) -> None:
        events = self.h2.receive(data)
        if self._handshake is not None and self.h2.preface_received:
            self._handshake.cancel()
            self._handshake = None
        for event in events:
            kind = event.kind
            if kind == http2.EV_DATA:
                self._data(event)
            elif kind == http2.EV_HEADERS:
                self._open(event)
            elif kind == http2.EV_RESET:
                self._reset(event.stream_id)
            elif kind == http2.EV_DRAINED:
                call = self.calls.get(event.stream_id)
                if call is not None:
                    call.drained()
            elif kind == http2.EV_PING_ACK:
                if self._ping_timeout is not None:
                    self._ping_timeout.cancel()
                    self._ping_timeout = None
            elif kind == http2.EV_HEADERS_TOO_LARGE:
                limit = self.server.limits.max_metadata_size
                self._trailers_only(event.stream_id, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"received header list larger than max ({event.code} vs. "
                                    f"{limit})")
            elif kind == http2.EV_GOAWAY:
                self._closing = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._stop_timers()
        for call in list(self.calls.values()):
            self._end(call)
            if call.task is not None:
                call.task.cancel()
        self.calls.clear()
        self.server.call_ended()

    # ---------------------------------------------------------------- streams

    def _open(self, event: http2.Event) -> None:
        stream_id = event.stream_id
        if self.h2.blocked_bytes > self.server.limits.max_connection_buffer:
            self.h2.refuse(stream_id)  # the client reads too slowly for another reply
            return
        headers = event.headers
        fields = dict(headers)
        path = fields.get(":path", "")
        if fields.get(":method") != "POST":
            self.h2.send_headers(stream_id, hpack.encode_headers([(":status", "405")]), True)
            return
        if not fields.get("content-type", "").startswith("application/grpc"):
            self.h2.send_headers(stream_id, hpack.encode_headers([(":status", "415")]), True)
            return
        name = path[len(_PATH_PREFIX):] if path.startswith(_PATH_PREFIX) else ""
        method = self.server.methods.get(name)
        if method is None:
            self._trailers_only(stream_id, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        call = Call(self, stream_id, name, method, headers,
                     fields.get("grpc-encoding", "identity"))
        refusal = self.server.refusal(name, fields)
        if refusal is not None:
            with log_context.request_context("gRPC", name):
                request_failed(403, refusal, wire_status="UNAVAILABLE")
            self._trailers_only(stream_id, grpc.StatusCode.UNAVAILABLE, refusal)
            return
        timeout = fields.get("grpc-timeout")
        if timeout is not None:
            seconds = timeout_secs(timeout)
            if seconds is not None:
                call.deadline = self.loop.time() + seconds
                call.timer = self.loop.call_at(call.deadline, self._expired, call)
        self.calls[stream_id] = call
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if method.streaming:
            call.inbox = asyncio.Queue()
            call.task = self.loop.create_task(self._run_stream(call))
            if event.end_stream:
                call.inbox.put_nowait(None)
        elif event.end_stream:
            self._finish(call, grpc.StatusCode.INTERNAL, "the call carried no request message")

    def _data(self, event: http2.Event) -> None:
        call = self.calls.get(event.stream_id)
        if call is None:
            return
        try:
            messages = call.feed(event.data) if event.data else []
        except Abort as abort:
            self._finish(call, abort.code, abort.message)
            if call.task is not None:  # a stream's RPC, reading on
                call.task.cancel()
            return
        if call.inbox is not None:
            call.queue(event.data, messages, event.end_stream)
            return
        if call.task is None:
            # The request message is read as it arrives: its bytes are the call's now.
            # Anything a unary call's client sends past its message gets no window back.
            self.h2.release(event.stream_id, len(event.data))
        if call.task is None and messages:
            call.task = self.loop.create_task(self._run_unary(call, messages[0]))
        elif call.task is None and event.end_stream:
            self._finish(call, grpc.StatusCode.INTERNAL, "the call carried no request message")

    def _reset(self, stream_id: int) -> None:
        call = self.calls.get(stream_id)
        if call is not None:  # the client cancelled the call
            self._end(call)
            if call.task is not None:
                call.task.cancel()

    def _expired(self, call: Call) -> None:
        if call.done:
            return
        call.timer = None
        self._finish(call, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        if call.task is not None:
            call.task.cancel()
        self.flush()

    async def _run_unary(self, call: Call, message: bytes) -> None:
        method = call.method
        try:
            reply = await method.behaviour(method.deserialize(message), call.context)
            data = method.serialize(reply)
        except grpc.aio.AbortError:
            code, details = call.context.status or (grpc.StatusCode.UNKNOWN, "")
            self._finish(call, code, details)
            return
        except asyncio.CancelledError:
            return  # reset, expired or the connection is gone: answered already, or never
        except Exception as error:
            logger.exception("gRPC %s raised", call.name)
            self._finish(call, grpc.StatusCode.UNKNOWN, f"Unexpected {type(error)}: {error}")
            return
        if call.done:
            return
        self._end(call)
        prefix = len(data).to_bytes(5, "big")
        if len(data) < _JOIN_BELOW:
            self.h2.respond(call.stream_id, OK_HEADERS, prefix + data, OK_TRAILERS)
        else:
            self.h2.send_headers(call.stream_id, OK_HEADERS)
            self.h2.send_data(call.stream_id, prefix)
            self.h2.send_data(call.stream_id, data)
            self.h2.send_trailers(call.stream_id, OK_TRAILERS)
        self.flush_soon()

    async def _run_stream(self, call: Call) -> None:
        try:
            await call.method.behaviour(call.requests(), call.context)
        except grpc.aio.AbortError:
            code, details = call.context.status or (grpc.StatusCode.UNKNOWN, "")
            self._finish(call, code, details)
            return
        except asyncio.CancelledError:
            return
        except Exception as error:
            logger.exception("gRPC %s raised", call.name)
            self._finish(call, grpc.StatusCode.UNKNOWN, f"Unexpected {type(error)}: {error}")
            return
        self._finish(call, grpc.StatusCode.OK, "")

    def _finish(self, call: Call, code: grpc.StatusCode, message: str) -> None:
        """End ``call`` with ``code``: as trailers after its reply's headers, or alone."""
        if call.done:
            return
        self._end(call)
        if call.started:
            self.h2.send_trailers(call.stream_id,
                                  hpack.encode_headers(status_trailers(code, message)))
        else:
            self._trailers_only(call.stream_id, code, message)
        self.flush_soon()

    def _trailers_only(self, stream_id: int, code: grpc.StatusCode, message: str) -> None:
        fields = [(":status", "200"), ("content-type", "application/grpc"),
                  *status_trailers(code, message)]
        self.h2.send_headers(stream_id, hpack.encode_headers(fields), True)

    def _end(self, call: Call) -> None:
        call.done = True
        call.drained()
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        if self.calls.pop(call.stream_id, None) is not None and not self.calls:
            self._became_idle()
            self.server.call_ended()

    # ---------------------------------------------------------------- writing

    def flush_soon(self) -> None:
        """Write what is queued once this turn of the loop is over, so the replies that
        complete in one turn leave in one write."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        output = self.h2.take_output()
        if output:
            self._write(output)
        if self._stall is None and (self.writing_paused or self.h2.blocked_bytes):
            self._progress_seen = self._progress + self.h2.data_sent
            self._stall = self.loop.call_later(self.server.limits.write_timeout_secs,
                                               self._check_stall)

    # ---------------------------------------------------------------- flow control

    def pause_writing(self) -> None:
        """The socket's buffer passed the connection's share: read nothing more from this
        client, so it cannot make the server answer more, until it takes what is there."""
        self.writing_paused = True
        if self.transport is not None:
            self.transport.pause_reading()
        self.flush()  # arms the stall check

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._progress += 1
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        for call in list(self.calls.values()):
            call.drained()

    def _write(self, output: list[Chunk]) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if len(output) == 1:
            transport.write(output[0])
        elif sum(len(chunk) for chunk in output) < _JOIN_BELOW:
            transport.write(b"".join(output))
        else:
            transport.writelines(output)

    def _abort(self) -> None:
        """Close after what is queued, the GOAWAY last; at once if the client has stopped
        reading, since what is queued would then never leave."""
        self.flush()
        if self.transport is not None:
            if self.writing_paused:
                self.transport.abort()
            else:
                self.transport.close()

    def goaway(self) -> None:
        if not self._closing:
            self._closing = True
            self.h2.goaway(http2.NO_ERROR)
            self.flush()
