"""The native ZeroMQ frontend: a ROUTER socket speaking inferd's kernel wire format.

Owns the socket, its framing (``[client routing id, b"", *wire frames]``), one task per
request (kept by the client's routing id and message id, so a client's ``Cancel`` naming
that message stops it: the request leaves its queue, and no reply is sent), and the single
place where this protocol turns exceptions into ``Failure`` replies
(each logged once: ``inferd.kernel.sdk.request_log``).
It decides nothing about models or inference: each request goes to the data plane as it
arrived and the data plane's reply goes back unchanged. It must never let one request (a
malformed one, a failing one, one for a client that vanished) stop the receive loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import zmq

from inferd.kernel.sdk import Frontend, log_context, traced
from inferd.kernel.sdk.loop_socket import LoopSocket
from inferd.kernel.sdk.request_log import request_failed
from inferd.plugins.frontends.zmq import LISTEN
from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    DeadlineExceeded,
    ErrorCode,
    InferdError,
    Internal,
    InvalidArgument,
    Unavailable,
    http_status,
    to_failure,
)
from inferd.protocols.messages import (
    Cancel,
    CatalogRequest,
    Envelope,
    Failure,
    HealthRequest,
    IndexRequest,
    InferRequest,
    LabelsRequest,
    LoadRequest,
    Message,
    ModelConfigRequest,
    ModelMetadataRequest,
    ModelReadyRequest,
    PollRequest,
    ServerMetadataRequest,
    StatisticsRequest,
    UnloadRequest,
)
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE

if TYPE_CHECKING:
    from inferd.kernel.sdk.frontends import DataPlane, Settings

SOURCE = "frontend/zmq"

# Per peer, in messages. A ROUTER drops (never blocks on) replies to a peer over the limit,
# so it is generous; it still bounds what a client that stops reading can pin in memory.
HIGH_WATER_MARK = 10_000

# Only the public data-plane requests: kernel-internal kinds (LoadVersion, Shutdown, ...)
# decode fine but must never be injectable from the network.
ACCEPTED_REQUESTS: frozenset[type[Message]] = frozenset(
    {
        InferRequest,
        HealthRequest,
        ServerMetadataRequest,
        ModelMetadataRequest,
        ModelReadyRequest,
        ModelConfigRequest,
        IndexRequest,
        CatalogRequest,
        LoadRequest,
        UnloadRequest,
        LabelsRequest,
        StatisticsRequest,
        PollRequest,
    }
)

logger = logging.getLogger(__name__)


class ZmqFrontend(Frontend):
    name = "zmq"

    def __init__(self, dataplane: DataPlane, settings: Settings) -> None:
        super().__init__(dataplane, settings)
        self._accepting = True
        self._message_ids = itertools.count(1)
        self._socket: LoopSocket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # The task answering each request, by (client routing id, message id): what a
        # client's Cancel names.
        self._answering: dict[tuple[bytes, int], asyncio.Task[Any]] = {}

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        socket: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.ROUTER)
        loop_socket = LoopSocket(socket, self._accept)
        try:
            self._configure(socket, int(self.settings.options.get(
                "zmq_max_input_size", DEFAULT_MAX_INPUT_SIZE)))
            endpoint = self._bind(socket)
            self._socket = loop_socket
            loop_socket.start()
            logger.info("zmq frontend listening on %s", endpoint)
            task_status.started(endpoint)
            await anyio.sleep_forever()
        finally:
            self._socket = None
            loop_socket.close()
            for task in list(self._tasks):
                task.cancel()

    def _accept(self, frames: list[zmq.Frame]) -> None:
        """Each request is answered in a task of its own; receiving never waits for one."""
        task = asyncio.get_running_loop().create_task(self._answer(frames))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop_accepting(self) -> None:
        self._accepting = False

    @staticmethod
    def _configure(socket: zmq.Socket[Any], max_frame_bytes: int) -> None:
        socket.setsockopt(zmq.LINGER, 0)
        # libzmq drops a peer whose frame is larger, before buffering it: the one bound a
        # ROUTER socket offers on what a client makes the server allocate.
        socket.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        socket.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
        socket.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        # A client that disconnected before its reply must not make the send raise.
        socket.setsockopt(zmq.ROUTER_MANDATORY, 0)

    def _bind(self, socket: zmq.Socket[Any]) -> str:
        address, port = LISTEN.read(self.settings.options)
        if ":" in address:
            socket.setsockopt(zmq.IPV6, 1)
            if not address.startswith("["):
                address = f"[{address}]"
        # libzmq spells "let the OS pick a free port" as "*".
        endpoint = f"tcp://{address}:{port if port else '*'}"
        try:
            socket.bind(endpoint)
        except zmq.ZMQError as error:
            raise OSError(
                error.errno, f"zmq frontend cannot bind {endpoint}: {error.strerror}"
            ) from error
        return socket.getsockopt_string(zmq.LAST_ENDPOINT)

    async def _answer(self, frames: list[zmq.Frame]) -> None:
        # An exception escaping here would cancel the task group and with it the server.
        try:
            with log_context.request_context("zmq", ""):
                await self._answer_unguarded(frames)
        except Exception:
            logger.exception("zmq frontend failed to answer a request")

    async def _answer_unguarded(self, frames: list[zmq.Frame]) -> None:
        routing_id = frames[0].bytes
        if len(frames) < 2 or len(frames[1]) != 0:
            failure = _failure(InvalidArgument(
                "a request must be an empty delimiter frame followed by the wire frames"))
            await self._send(routing_id, self._encode_reply(None, failure))
            return
        try:
            request = wire.decode(frames[2:])
        # decode promises InvalidArgument, but whatever a hostile peer provokes must still
        # be answered as the peer's fault.
        except Exception as error:
            failure = _failure(InvalidArgument(f"malformed request: {error}"))
            await self._send(routing_id, self._encode_reply(None, failure))
            return
        if type(request.body) is Cancel:  # the client gave up: never answered
            answering = self._answering.get((routing_id, request.body.msg_id))
            if answering is not None:
                answering.cancel()
            return
        key = (routing_id, request.msg_id)
        task = asyncio.current_task()
        if task is not None:
            self._answering[key] = task
        try:
            body = await self._reply_body(request)
        finally:
            self._answering.pop(key, None)
        await self._send(routing_id, self._encode_reply(request, body))

    async def _reply_body(self, request: Envelope) -> Message:
        context = log_context.current()
        if context is not None:
            context.endpoint = request.body.kind()
        if not self._accepting:
            return _failure(Unavailable(SHUTTING_DOWN))
        if type(request.body) not in ACCEPTED_REQUESTS:
            return _failure(InvalidArgument(
                f"the zmq frontend does not accept {request.body.kind()} messages"))
        if request.deadline is not None and request.deadline <= time.time():
            return _failure(DeadlineExceeded(
                "the request's deadline passed before the server could handle it"))
        body = request.body
        tracer = self.dataplane.tracer
        trace = (tracer.begin(body.model)
                 if tracer.active and isinstance(body, InferRequest) else None)
        try:
            pending = self.dataplane.handle(body)
            reply: Message = await (pending if trace is None else traced(trace, pending))
            if trace is not None:
                trace.end()
        except Exception as error:  # noqa: BLE001 - every error is the request's reply
            return _failure(error)
        return reply

    def _encode_reply(
        self, request: Envelope | None, body: Message
    ) -> Sequence[bytes | memoryview]:
        reply = Envelope(
            msg_id=next(self._message_ids),
            src=SOURCE,
            dst=request.src if request is not None else "",
            body=body,
            reply_to=request.msg_id if request is not None else None,
            trace=request.trace if request is not None else None,
        )
        try:
            return wire.encode(reply)
        except Exception as error:
            logger.exception("cannot encode a %s reply", body.kind())
            failure = to_failure(Internal(f"the reply could not be encoded: {error}"))
            return wire.encode(dataclasses.replace(reply, body=failure))

    async def _send(self, routing_id: bytes, frames: Sequence[bytes | memoryview]) -> None:
        socket = self._socket
        if socket is not None:  # one synchronous send: replies never interleave
            socket.send([routing_id, b"", *frames])


def _failure(error: BaseException) -> Failure:
    """A request's error reply, and its one log line (with the traceback of an error that is
    not an ``InferdError``: a bug)."""
    failure = to_failure(error)
    request_failed(http_status(ErrorCode(failure.code)), failure.message,
                   wire_status=failure.code,
                   exc_info=None if isinstance(error, InferdError) else error)
    return failure
