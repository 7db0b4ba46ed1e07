"""The actor base class: message dispatch to one handler per message kind, one task each.

A subclass defines ``async def on_<kind in snake_case>(self, message, envelope)`` methods
(``on_infer_request`` for ``InferRequest``). Delivery never awaits a handler: each message
runs in its own task, so a slow load never delays an inference. What a handler returns is the
reply to an ask; what it raises becomes a ``Failure`` reply in exactly one place
(``Router.reply_failure``). A kind with no handler gets an error reply and a log line. This
module owns dispatch only; routing belongs to ``inferd.kernel.runtime.router``, transport to
``inferd.kernel.runtime.process_link``.

A request whose asker stops waiting (cancelled, or timed out) is told to stop with a
``Cancel`` naming its ask; the actor cancels the handler's task when the kind is one it lists
in ``CANCELLABLE`` (a handler that may stop at any await), and ignores it otherwise. Each such
task is kept by the ask's id: the request's cancel scope.

Per-message tasks are plain asyncio tasks, tracked by the actor and cancelled when it stops:
on this path anyio's ``start_soon`` costs several times more than ``create_task``, and the
kernel runs on asyncio only (pyzmq needs it). anyio's cancel scopes work inside them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import anyio.abc
from inferd.protocols.errors import Unsupported
from inferd.protocols.messages import Cancel, Envelope, Message

if TYPE_CHECKING:
    from inferd.kernel.runtime.router import Router

log = logging.getLogger(__name__)

Handler = Callable[[Any, Envelope | None], Awaitable[Message | None]]
"""``handler(body, envelope)``; ``envelope`` is ``None`` when a ``DIRECT`` kind is called in
the asker's task."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Actor:
    """Base of every actor. ``address`` is unique in the whole server. The kinds in
    ``DIRECT`` may also be handled in the task of an asker in this process
    (``Router.call``): for the inference path, where a task per message is most of the
    cost. Their handlers then get ``None`` for the envelope."""

    address: str = ""
    DIRECT: ClassVar[tuple[type[Message], ...]] = ()
    CANCELLABLE: ClassVar[tuple[type[Message], ...]] = ()
    """Kinds whose handler stops (is cancelled) when its asker says ``Cancel``: those whose
    work, cut at any await, leaves nothing half done."""

    def __init__(self, router: Router, address: str | None = None) -> None:
        self.router = router
        if address is not None:
            self.address = address
        self._handlers: dict[type[Message], Handler] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cancellable: dict[tuple[str, int], asyncio.Task[Any]] = {}  # by (asker, ask id)

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

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Register with the router, start, serve messages until cancelled, then stop."""
        direct = {kind: self._handler_for(kind) for kind in self.DIRECT}
        self.router.register(self.address, self.accept,
                             {kind: h for kind, h in direct.items() if h is not None})
        try:
            await self.on_start()
            task_status.started()
            await anyio.sleep_forever()
        finally:
            self.router.unregister(self.address)
            for task in list(self._tasks):
                task.cancel()
            with anyio.CancelScope(shield=True):
                await self.on_stop()

    def accept(self, envelope: Envelope) -> None:
        """Take a message from the router: its handler runs in a task of its own, kept by the
        ask's id when its kind is ``CANCELLABLE``; a ``Cancel`` stops such a task."""
        body = envelope.body
        if type(body) is Cancel:
            running = self._cancellable.get((envelope.src, body.msg_id))
            if running is not None:
                running.cancel()
            return
        task = self.spawn(self._handle, envelope)
        if type(body) in self.CANCELLABLE:
            key = (envelope.src, envelope.msg_id)
            self._cancellable[key] = task
            task.add_done_callback(lambda _: self._cancellable.pop(key, None))

    def spawn(self, function: Callable[..., Coroutine[Any, Any, Any]],
              *args: Any) -> asyncio.Task[Any]:
        """Run work owned by this actor in its own task (cancelled when the actor stops)."""
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(function(*args))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: background task failed", self.address, exc_info=task.exception())

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
