"""The native inferd client, blocking (``Client``) and asyncio (``AsyncClient``).

Both speak the kernel wire format to the zmq frontend over a DEALER socket: a request is
``[b"", *wire.encode(envelope)]`` and its reply is matched by ``reply_to``. This module owns
the mapping from friendly calls (numpy inputs, plain return values) to message kinds and
back, and turns a ``Failure`` reply into the typed ``InferdError`` the server raised. It
knows nothing of how the server works and imports nothing from the kernel or the plugins.

The one exception to "``inferd.protocols`` opens no sockets": a client is useless without its
transport, and users install and import it alone, so each client keeps its own small one
here, on pyzmq's public socket API (blocking, or ``zmq.asyncio``). The server's event-loop
socket (``inferd.kernel.loop_socket``) is kernel machinery and is not shared with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import zmq
import zmq.asyncio

from inferd.protocols import wire
from inferd.protocols.errors import ActorGone, DeadlineExceeded, InferdError, Internal, NotFound
from inferd.protocols.messages import (
    Ack,
    Catalog,
    CatalogEntry,
    CatalogRequest,
    Envelope,
    Failure,
    HealthRequest,
    HealthStatus,
    Index,
    IndexEntry,
    IndexRequest,
    InferRequest,
    InferResponse,
    LoadRequest,
    Message,
    ModelConfigReply,
    ModelConfigRequest,
    ModelMetadata,
    ModelMetadataRequest,
    ModelReadyRequest,
    ServerMetadata,
    PollRequest,
    ServerMetadataRequest,
    Statistics,
    StatisticsRequest,
    Tensor,
    UnloadRequest,
)
from inferd.protocols.tensors import from_numpy

DEFAULT_URL = "tcp://127.0.0.1:8003"
SERVER = "frontend"

Inputs = Mapping[str, Any] | Sequence[Tensor]
ReplyT = TypeVar("ReplyT", bound=Message)


class InferResult:
    """One inference response: ``outputs`` maps each output name to its ``Tensor``."""

    __slots__ = ("outputs", "response")

    def __init__(self, response: InferResponse) -> None:
        self.response = response
        self.outputs: dict[str, Tensor] = {tensor.name: tensor for tensor in response.outputs}

    @property
    def model(self) -> str:
        return self.response.model

    @property
    def version(self) -> str:
        return self.response.version

    @property
    def id(self) -> str:
        return self.response.id

    @property
    def parameters(self) -> dict[str, Any]:
        return self.response.parameters

    def as_numpy(self, name: str) -> np.ndarray:
        try:
            return self.outputs[name].data
        except KeyError:
            raise KeyError(
                f"no output {name!r} in the response; outputs: {sorted(self.outputs)}"
            ) from None

    def __repr__(self) -> str:
        outputs = list(self.outputs)
        return f"InferResult(model={self.model!r}, version={self.version!r}, outputs={outputs})"


def _infer_request(
    model: str,
    inputs: Inputs,
    *,
    outputs: Sequence[str],
    version: str,
    request_id: str,
    parameters: Mapping[str, Any] | None,
    priority: int,
    timeout_us: int,
    classification: Mapping[str, int] | None,
) -> InferRequest:
    if isinstance(inputs, Mapping):
        tensors = tuple(from_numpy(name, value) for name, value in inputs.items())
    else:
        tensors = tuple(inputs)
    return InferRequest(
        model=model,
        inputs=tensors,
        version=version,
        id=request_id,
        outputs=tuple(outputs),
        parameters=dict(parameters or {}),
        priority=priority,
        timeout_us=timeout_us,
        classification=dict(classification or {}),
    )


def _load_request(
    model: str, config: str | Mapping[str, Any] | None, files: Mapping[str, bytes] | None
) -> LoadRequest:
    if config is None:
        config_json = ""
    elif isinstance(config, str):
        config_json = config
    else:
        config_json = json.dumps(config)
    return LoadRequest(model=model, config=config_json, files=dict(files or {}))


def _expect(reply: Message, kind: type[ReplyT]) -> ReplyT:
    if isinstance(reply, kind):
        return reply
    if isinstance(reply, Failure):
        try:
            error = InferdError.from_code(reply.code, reply.message)
        except ValueError:  # a code from a newer server
            error = Internal(f"{reply.code}: {reply.message}")
        raise error
    raise Internal(f"expected a {kind.kind()} reply, got {reply.kind()}")


def _reply(frames: list[zmq.Frame]) -> tuple[int, Message] | None:
    """The ``(reply_to, body)`` of a received frame list, or ``None`` when it is not a reply
    (a stray or malformed message must not break a client that is waiting for others)."""
    if len(frames) < 2 or len(frames[0]) != 0:
        return None
    try:
        envelope = wire.decode(frames[1:])
    except Exception:  # one unreadable message must not end the receive loop
        return None
    if envelope.reply_to is None:
        return None
    return envelope.reply_to, envelope.body


def _client_id() -> str:
    return f"client/{os.getpid()}/{secrets.token_hex(6)}"


def _configure(socket: zmq.Socket[Any], url: str) -> None:
    socket.setsockopt(zmq.LINGER, 0)
    # Requests and replies are never dropped for lack of room; memory is the caller's bound.
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.connect(url)


class AsyncClient:
    """An asyncio client. Many requests may be in flight at once on its one socket; each
    waits at most ``timeout`` seconds, a deadline the server also sees."""

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 60.0) -> None:
        self.url = url
        self.timeout = timeout
        self.id = _client_id()
        self._message_ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._socket: zmq.asyncio.Socket | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the socket; requests still waiting fail with ``ActorGone``."""
        self._closed = True
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiver
        self._fail_pending(ActorGone("the client was closed before the reply came"))
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    async def infer(
        self,
        model: str,
        inputs: Inputs,
        *,
        outputs: Sequence[str] = (),
        version: str = "",
        request_id: str = "",
        parameters: Mapping[str, Any] | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        classification: Mapping[str, int] | None = None,
    ) -> InferResult:
        request = _infer_request(
            model,
            inputs,
            outputs=outputs,
            version=version,
            request_id=request_id,
            parameters=parameters,
            priority=priority,
            timeout_us=timeout_us,
            classification=classification,
        )
        return InferResult(_expect(await self._ask(request), InferResponse))

    async def is_live(self) -> bool:
        return _expect(await self._ask(HealthRequest("live")), HealthStatus).ok

    async def is_ready(self) -> bool:
        return _expect(await self._ask(HealthRequest("ready")), HealthStatus).ok

    async def is_model_ready(self, model: str, version: str = "") -> bool:
        """False for a model the server does not know, as for one that is not READY."""
        try:
            reply = await self._ask(ModelReadyRequest(model, version))
            return _expect(reply, HealthStatus).ok
        except NotFound:
            return False

    async def server_metadata(self) -> ServerMetadata:
        return _expect(await self._ask(ServerMetadataRequest()), ServerMetadata)

    async def model_metadata(self, model: str, version: str = "") -> ModelMetadata:
        reply = await self._ask(ModelMetadataRequest(model, version))
        return _expect(reply, ModelMetadata)

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        reply = _expect(await self._ask(ModelConfigRequest(model, version)), ModelConfigReply)
        config: dict[str, Any] = json.loads(reply.config_json)
        return config

    async def statistics(self, model: str = "", version: str = "") -> list[dict[str, Any]]:
        reply = _expect(await self._ask(StatisticsRequest(model, version)), Statistics)
        return list(reply.model_stats)

    async def poll(self) -> None:
        """POLL mode: make the server look at its repository now."""
        _expect(await self._ask(PollRequest()), Ack)

    async def index(self, ready_only: bool = False) -> list[IndexEntry]:
        return list(_expect(await self._ask(IndexRequest(ready_only)), Index).entries)

    async def catalog(
        self, labels: Mapping[str, str] | None = None, task: str = ""
    ) -> list[CatalogEntry]:
        """The model catalog (inferd extension), kept to models with every label of
        ``labels`` and, when given, ``task``."""
        request = _catalog_request(labels, task)
        return list(_expect(await self._ask(request), Catalog).entries)

    async def load(
        self,
        model: str,
        *,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        _expect(await self._ask(_load_request(model, config, files)), Ack)

    async def unload(self, model: str, *, unload_dependents: bool = False) -> None:
        _expect(await self._ask(UnloadRequest(model, unload_dependents)), Ack)

    def _open(self) -> zmq.asyncio.Socket:
        if self._closed:
            raise ActorGone("the client is closed")
        if self._socket is None:
            socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
            _configure(socket, self.url)
            self._socket = socket
        if self._receiver is None or self._receiver.done():
            self._receiver = asyncio.get_running_loop().create_task(
                self._receive_replies(self._socket)
            )
        return self._socket

    async def _ask(self, body: Message) -> Message:
        socket = self._open()
        msg_id = next(self._message_ids)
        deadline = time.time() + self.timeout
        frames = wire.encode(
            Envelope(msg_id=msg_id, src=self.id, dst=SERVER, body=body, deadline=deadline)
        )
        reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = reply
        try:
            async with self._send_lock:
                await socket.send_multipart([b"", *frames], copy=False)
            return await asyncio.wait_for(reply, max(0.0, deadline - time.time()))
        except TimeoutError:
            raise DeadlineExceeded(
                f"no reply from {self.url} within {self.timeout} s to a {body.kind()}"
            ) from None
        finally:
            self._pending.pop(msg_id, None)

    async def _receive_replies(self, socket: zmq.asyncio.Socket) -> None:
        try:
            while True:
                reply = _reply(await socket.recv_multipart(copy=False))
                if reply is None:
                    continue
                reply_to, body = reply
                waiting = self._pending.get(reply_to)
                if waiting is not None and not waiting.done():
                    waiting.set_result(body)
        except zmq.ZMQError as error:
            self._fail_pending(ActorGone(f"the connection to {self.url} failed: {error}"))

    def _fail_pending(self, error: InferdError) -> None:
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(error)
        self._pending.clear()


class Client:
    """A blocking client: one request at a time, safe to share between threads."""

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 60.0) -> None:
        self.url = url
        self.timeout = timeout
        self.id = _client_id()
        self._message_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._socket: zmq.Socket[Any] | None = zmq.Context.instance().socket(zmq.DEALER)
        _configure(self._socket, url)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close(linger=0)
                self._socket = None

    def infer(
        self,
        model: str,
        inputs: Inputs,
        *,
        outputs: Sequence[str] = (),
        version: str = "",
        request_id: str = "",
        parameters: Mapping[str, Any] | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        classification: Mapping[str, int] | None = None,
    ) -> InferResult:
        request = _infer_request(
            model,
            inputs,
            outputs=outputs,
            version=version,
            request_id=request_id,
            parameters=parameters,
            priority=priority,
            timeout_us=timeout_us,
            classification=classification,
        )
        return InferResult(_expect(self._ask(request), InferResponse))

    def is_live(self) -> bool:
        return _expect(self._ask(HealthRequest("live")), HealthStatus).ok

    def is_ready(self) -> bool:
        return _expect(self._ask(HealthRequest("ready")), HealthStatus).ok

    def is_model_ready(self, model: str, version: str = "") -> bool:
        """False for a model the server does not know, as for one that is not READY."""
        try:
            return _expect(self._ask(ModelReadyRequest(model, version)), HealthStatus).ok
        except NotFound:
            return False

    def server_metadata(self) -> ServerMetadata:
        return _expect(self._ask(ServerMetadataRequest()), ServerMetadata)

    def model_metadata(self, model: str, version: str = "") -> ModelMetadata:
        return _expect(self._ask(ModelMetadataRequest(model, version)), ModelMetadata)

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        reply = _expect(self._ask(ModelConfigRequest(model, version)), ModelConfigReply)
        config: dict[str, Any] = json.loads(reply.config_json)
        return config

    def statistics(self, model: str = "", version: str = "") -> list[dict[str, Any]]:
        return list(_expect(self._ask(StatisticsRequest(model, version)), Statistics).model_stats)

    def poll(self) -> None:
        """POLL mode: make the server look at its repository now."""
        _expect(self._ask(PollRequest()), Ack)

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        return list(_expect(self._ask(IndexRequest(ready_only)), Index).entries)

    def catalog(
        self, labels: Mapping[str, str] | None = None, task: str = ""
    ) -> list[CatalogEntry]:
        """The model catalog (inferd extension), kept to models with every label of
        ``labels`` and, when given, ``task``."""
        return list(_expect(self._ask(_catalog_request(labels, task)), Catalog).entries)

    def load(
        self,
        model: str,
        *,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        _expect(self._ask(_load_request(model, config, files)), Ack)

    def unload(self, model: str, *, unload_dependents: bool = False) -> None:
        _expect(self._ask(UnloadRequest(model, unload_dependents)), Ack)

    def _ask(self, body: Message) -> Message:
        with self._lock:
            if self._socket is None:
                raise ActorGone("the client is closed")
            msg_id = next(self._message_ids)
            deadline = time.time() + self.timeout
            frames = wire.encode(
                Envelope(msg_id=msg_id, src=self.id, dst=SERVER, body=body, deadline=deadline)
            )
            self._socket.send_multipart([b"", *frames], copy=False)
            # Replies to earlier requests that timed out may still arrive first: skip them.
            while (remaining := deadline - time.time()) > 0:
                if not self._socket.poll(max(1, int(remaining * 1000)), zmq.POLLIN):
                    continue
                reply = _reply(self._socket.recv_multipart(copy=False))
                if reply is not None and reply[0] == msg_id:
                    return reply[1]
            raise DeadlineExceeded(
                f"no reply from {self.url} within {self.timeout} s to a {body.kind()}"
            )


def _catalog_request(labels: Mapping[str, str] | None, task: str) -> CatalogRequest:
    return CatalogRequest(tuple((str(k), str(v)) for k, v in (labels or {}).items()), task)
