"""The native inferd client, blocking (``Client``) and asyncio (``AsyncClient``).

Both speak the kernel wire format to the zmq frontend over a DEALER socket: a request is
``[b"", *wire.encode(envelope)]`` and its reply is matched by ``reply_to``. What each call
sends and how its reply is read (numpy inputs in, plain values out, a ``Failure`` reply
raised as the typed ``InferdError`` the server raised) is one table that both clients use,
``inferd.protocols.client_calls``; this module holds only the two transports. It knows
nothing of how the server works and imports nothing from the kernel or the plugins.

The one exception to "``inferd.protocols`` opens no sockets": a client is useless without its
transport, and users install and import it alone, so each client keeps its own small one
here, on pyzmq's public socket API (blocking, or ``zmq.asyncio``). The server's event-loop
socket (``inferd.kernel.sdk.loop_socket``) is the server's and is not shared with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import zmq
import zmq.asyncio

from inferd.protocols import client_calls as calls
from inferd.protocols.wire import codec as wire
from inferd.protocols.client_calls import Call, InferResult, Inputs, client_id, reply_of
from inferd.protocols.errors import ActorGone, DeadlineExceeded, InferdError
from inferd.protocols.messages import (
    Cancel,
    CatalogEntry,
    Envelope,
    IndexEntry,
    Message,
    ModelMetadata,
    ServerMetadata,
    VersionLabelsReply,
)

__all__ = ["DEFAULT_URL", "AsyncClient", "Client", "InferResult"]

DEFAULT_URL = "tcp://127.0.0.1:8003"
SERVER = "frontend"

ResultT = TypeVar("ResultT")


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
        self.id = client_id()
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
        return await self._call(calls.infer(
            model, inputs, outputs=outputs, version=version, request_id=request_id,
            parameters=parameters, priority=priority, timeout_us=timeout_us,
            classification=classification,
        ))

    async def is_live(self) -> bool:
        return await self._call(calls.is_live())

    async def is_ready(self) -> bool:
        return await self._call(calls.is_ready())

    async def is_model_ready(self, model: str, version: str = "") -> bool:
        """False for a model the server does not know, as for one that is not READY."""
        return await self._call(calls.is_model_ready(model, version))

    async def server_metadata(self) -> ServerMetadata:
        return await self._call(calls.server_metadata())

    async def model_metadata(self, model: str, version: str = "") -> ModelMetadata:
        return await self._call(calls.model_metadata(model, version))

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        return await self._call(calls.model_config(model, version))

    async def statistics(self, model: str = "", version: str = "") -> list[dict[str, Any]]:
        return await self._call(calls.statistics(model, version))

    async def poll(self) -> None:
        """POLL mode: make the server look at its repository now."""
        await self._call(calls.poll())

    async def index(self, ready_only: bool = False) -> list[IndexEntry]:
        return await self._call(calls.index(ready_only))

    async def catalog(
        self, labels: Mapping[str, str] | None = None, task: str = ""
    ) -> list[CatalogEntry]:
        """The model catalog (inferd extension), kept to models with every label of
        ``labels`` and, when given, ``task``."""
        return await self._call(calls.catalog(labels, task))

    async def load(
        self,
        model: str,
        *,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        versions: Sequence[int] = (),
    ) -> None:
        """``versions`` (inferd's): load exactly these, leaving the others as they are."""
        await self._call(calls.load(model, config, files, versions))

    async def unload(self, model: str, *, unload_dependents: bool = False,
                     versions: Sequence[int] = ()) -> None:
        await self._call(calls.unload(model, unload_dependents, versions))

    async def labels(self, model: str, labels: Mapping[str, int] | None = None, *,
                     remove: Sequence[str] = (), canary_percent: float | None = None
                     ) -> VersionLabelsReply:
        """Read (nothing to change) or move ``model``'s version labels (inferd's): a moved
        label's version is loaded before requests go to it; the reply comes after the
        switch."""
        return await self._call(calls.labels(model, labels, remove, canary_percent))

    # ------------------------------------------------------------------ transport

    async def _call(self, call: Call[ResultT]) -> ResultT:
        return call.answer(await self._ask(call.request))

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
            _send_cancel(socket, self.id, next(self._message_ids), msg_id)
            raise DeadlineExceeded(
                f"no reply from {self.url} within {self.timeout} s to a {body.kind()}"
            ) from None
        except asyncio.CancelledError:
            _send_cancel(socket, self.id, next(self._message_ids), msg_id)
            raise
        finally:
            self._pending.pop(msg_id, None)

    async def _receive_replies(self, socket: zmq.asyncio.Socket) -> None:
        try:
            while True:
                reply = reply_of(await socket.recv_multipart(copy=False))
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
        self.id = client_id()
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
        return self._call(calls.infer(
            model, inputs, outputs=outputs, version=version, request_id=request_id,
            parameters=parameters, priority=priority, timeout_us=timeout_us,
            classification=classification,
        ))

    def is_live(self) -> bool:
        return self._call(calls.is_live())

    def is_ready(self) -> bool:
        return self._call(calls.is_ready())

    def is_model_ready(self, model: str, version: str = "") -> bool:
        """False for a model the server does not know, as for one that is not READY."""
        return self._call(calls.is_model_ready(model, version))

    def server_metadata(self) -> ServerMetadata:
        return self._call(calls.server_metadata())

    def model_metadata(self, model: str, version: str = "") -> ModelMetadata:
        return self._call(calls.model_metadata(model, version))

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        return self._call(calls.model_config(model, version))

    def statistics(self, model: str = "", version: str = "") -> list[dict[str, Any]]:
        return self._call(calls.statistics(model, version))

    def poll(self) -> None:
        """POLL mode: make the server look at its repository now."""
        self._call(calls.poll())

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        return self._call(calls.index(ready_only))

    def catalog(
        self, labels: Mapping[str, str] | None = None, task: str = ""
    ) -> list[CatalogEntry]:
        """The model catalog (inferd extension), kept to models with every label of
        ``labels`` and, when given, ``task``."""
        return self._call(calls.catalog(labels, task))

    def load(
        self,
        model: str,
        *,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        versions: Sequence[int] = (),
    ) -> None:
        """``versions`` (inferd's): load exactly these, leaving the others as they are."""
        self._call(calls.load(model, config, files, versions))

    def unload(self, model: str, *, unload_dependents: bool = False,
                     versions: Sequence[int] = ()) -> None:
        self._call(calls.unload(model, unload_dependents, versions))

    def labels(self, model: str, labels: Mapping[str, int] | None = None, *,
                     remove: Sequence[str] = (), canary_percent: float | None = None
                     ) -> VersionLabelsReply:
        """Read (nothing to change) or move ``model``'s version labels (inferd's): a moved
        label's version is loaded before requests go to it; the reply comes after the
        switch."""
        return self._call(calls.labels(model, labels, remove, canary_percent))

    # ------------------------------------------------------------------ transport

    def _call(self, call: Call[ResultT]) -> ResultT:
        return call.answer(self._ask(call.request))

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
                reply = reply_of(self._socket.recv_multipart(copy=False))
                if reply is not None and reply[0] == msg_id:
                    return reply[1]
            _send_cancel(self._socket, self.id, next(self._message_ids), msg_id)
            raise DeadlineExceeded(
                f"no reply from {self.url} within {self.timeout} s to a {body.kind()}"
            )


def _send_cancel(socket: zmq.Socket[Any], source: str, msg_id: int, abandoned: int) -> None:
    """Tell the server that the request ``abandoned`` is no longer waited for (``Cancel``):
    it stops its work. Best effort, never blocking: a server that does not hear it answers a
    request nobody reads."""
    frames = wire.encode(Envelope(msg_id=msg_id, src=source, dst=SERVER,
                                  body=Cancel(abandoned)))
    with contextlib.suppress(zmq.ZMQError):
        sent = socket.send_multipart([b"", *frames], flags=zmq.NOBLOCK, copy=False)
        if isinstance(sent, asyncio.Future):  # an asyncio socket's: its error is not ours
            sent.add_done_callback(_ignore_outcome)


def _ignore_outcome(sent: asyncio.Future[Any]) -> None:
    if not sent.cancelled():
        sent.exception()
