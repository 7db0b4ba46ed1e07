"""The actor base class: a mailbox, a receive loop, and one handler per message kind.

A subclass defines ``async def on_<kind in snake_case>(self, message, envelope)`` methods
(``on_infer_request`` for ``InferRequest``). The receive loop never awaits a handler: each
message runs in its own task, so a slow load never delays an inference. What a handler
returns is the reply to an ask; what it raises becomes a ``Failure`` reply in exactly one
place (``Router.reply_failure``). A kind with no handler gets an error reply and a log line.
This module owns dispatch only; routing and transport belong to ``inferd.kernel.router``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from inferd.protocols.errors import Unsupported
from inferd.protocols.messages import Envelope, Message

if TYPE_CHECKING:
    from inferd.kernel.router import Router

log = logging.getLogger(__name__)

Handler = Callable[[Any, Envelope], Awaitable[Message | None]]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Actor:
    """Base of every actor. ``address`` is unique in the whole server."""

    address: str = ""

    def __init__(self, router: Router, address: str | None = None) -> None:
        self.router = router
        if address is not None:
            self.address = address
        self._handlers: dict[type[Message], Handler] = {}
        self._tasks: anyio.abc.TaskGroup | None = None

    # Lifecycle hooks: run before the first message and after the last one.
    async def on_start(self) -> None:
        pass

    async def on_stop(self) -> None:
        pass

    def _handler_for(self, kind: type[Message]) -> Handler | None:
        handler = self._handlers.get(kind)
        if handler is None:
            handler = getattr(self, "on_" + _snake(kind.__name__), None)
            if handler is not None:
                self._handlers[kind] = handler
        return handler

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Register with the router, start, serve the mailbox until cancelled, then stop."""
        mailbox = self.router.register(self.address)
        try:
            await self.on_start()
            async with anyio.create_task_group() as self._tasks:
                task_status.started()
                await self._receive(mailbox)
        finally:
            self.router.unregister(self.address)
            with anyio.CancelScope(shield=True):
                await self.on_stop()

    def spawn(self, function: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run background work owned by this actor (cancelled when the actor stops)."""
        assert self._tasks is not None, "actor is not running"
        self._tasks.start_soon(function, *args)

    async def _receive(self, mailbox: MemoryObjectReceiveStream[Envelope]) -> None:
        assert self._tasks is not None
        async with mailbox:
            async for envelope in mailbox:
                self._tasks.start_soon(self._handle, envelope)

    async def _handle(self, envelope: Envelope) -> None:
        handler = self._handler_for(type(envelope.body))
        try:
            if handler is None:
                log.warning("%s: no handler for %s from %s", self.address,
                            type(envelope.body).__name__, envelope.src)
                raise Unsupported(
                    f"actor '{self.address}' does not handle {type(envelope.body).__name__}"
                )
            reply = await handler(envelope.body, envelope)
        except Exception as error:  # noqa: BLE001 - every failure becomes a reply
            self.router.reply_failure(envelope, error)
        else:
            self.router.reply(envelope, reply)
