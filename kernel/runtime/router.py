"""Location-transparent message routing: asks, tells and replies, whatever process an actor is in.

Every actor has an address. An envelope for an actor in this process is handed to it as the
object itself (no encoding). An envelope for an actor elsewhere goes to the process link
(``inferd.kernel.runtime.process_link``: a ZeroMQ hub in the main process, an uplink in each
executor), so the same ``ask`` reaches an actor whatever process it lives in. Asks carry ids and
deadlines; every ask gets its reply or a typed error: ``DeadlineExceeded``, or
``ActorGone``/``ExecutorCrashed`` when the peer goes. An ask abandoned (its task cancelled, or
past its timeout) tells its actor ``Cancel``. Two cheaper forms serve the inference path:
``ask_then`` hands the reply to a callback instead of a waiting task, ``call`` runs a local
actor's direct handler (``Actor.DIRECT``) in the caller's own task, with no envelope at all, and
``run_here`` lets a local actor that can answer at once (an executor whose instance runs on the
loop) answer a plain function call: no envelope, id or pending ask either way.
This module turns exceptions into errors for an asker (``Failure`` replies on the wire), and
nothing else does; it never touches a socket.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.protocols.errors import (
    ActorGone,
    DeadlineExceeded,
    ExecutorCrashed,
    InferdError,
    Internal,
    as_inferd_error,
    to_failure,
)
from inferd.protocols.messages import Cancel, Envelope, Failure, Message

if TYPE_CHECKING:
    from inferd.kernel.runtime.process_link import ProcessLink

log = logging.getLogger(__name__)

OnReply = Callable[["Message | InferdError"], None]
DirectHandler = Callable[[Any, None], Awaitable["Message | None"]]
# An actor's answer to a message it can handle at once, or None when it cannot (then ask).
RunHere = Callable[[Message], "Message | None"]
_NO_HANDLERS: dict[type[Message], DirectHandler] = {}


@dataclass(slots=True)
class _PendingAsk:
    """An ask waiting for its reply: a future its asker awaits, or a callback (``ask_then``)."""

    dst: str
    reply: asyncio.Future[Message] | None
    on_reply: OnReply | None = None


def _expire(reply: asyncio.Future[Message], dst: str, kind: str, timeout: float) -> None:
    if not reply.done():
        reply.set_exception(
            DeadlineExceeded(f"no reply from '{dst}' to {kind} within {timeout:g} s")
        )


class Router:
    """Delivers envelopes between the actors of this process and the process link."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ids = itertools.count(1)
        self._actors: dict[str, Callable[[Envelope], None]] = {}
        self._pending: dict[int, _PendingAsk] = {}
        self._direct: dict[str, dict[type[Message], DirectHandler]] = {}
        self._here: dict[str, RunHere] = {}
        self._link: ProcessLink | None = None

    # ------------------------------------------------------------------ local actors

    def register(
        self,
        address: str,
        accept: Callable[[Envelope], None],
        direct: dict[type[Message], DirectHandler] | None = None,
    ) -> None:
        """Make ``address`` reachable; ``accept`` takes each envelope for it without blocking.
        ``direct`` are the handlers ``call`` may run in its caller's task, by message kind."""
        if address in self._actors:
            raise ValueError(f"actor address {address!r} is taken")
        self._actors[address] = accept
        if direct:
            self._direct[address] = direct

    def unregister(self, address: str) -> None:
        self._actors.pop(address, None)
        self._direct.pop(address, None)
        self._here.pop(address, None)
        self.fail_pending_to(address, ActorGone(f"actor '{address}' stopped"))

    def answer_here(self, address: str, run: RunHere) -> None:
        """``run_here`` for the registered actor at ``address`` calls ``run`` (until the actor
        unregisters): it answers what it can at once and returns None for the rest."""
        if address not in self._actors:
            raise ValueError(f"no actor registered at {address!r}")
        self._here[address] = run

    def run_here(self, dst: str, body: Message) -> Message | InferdError | None:
        """The reply of the actor of this process at ``dst`` to ``body`` when it answers at
        once (``answer_here``), as ``ask_then`` would hand it over (a failure or an exception
        becomes the ``InferdError``); None when it cannot, or when ``dst`` is elsewhere: then
        ask. The inference path's shortcut to an executor in the server's own process."""
        run = self._here.get(dst)
        if run is None:
            return None
        try:
            reply = run(body)
        except Exception as error:  # noqa: BLE001 - converted exactly as a Failure reply is
            return self._as_error(error, body)
        if isinstance(reply, Failure):
            return InferdError.from_code(reply.code, reply.message)
        return reply

    def attach(self, link: ProcessLink) -> None:
        self._link = link

    # ------------------------------------------------------------------ sending

    def tell(self, dst: str, body: Message, *, reply_to: int | None = None) -> None:
        self.deliver(Envelope(next(self._ids), self.name, dst, body, reply_to))

    async def ask(self, dst: str, body: Message, *, timeout: float | None = None) -> Message:
        """Send ``body`` to ``dst`` and return its reply; raise the error it replied with,
        ``DeadlineExceeded`` after ``timeout`` seconds, or ``ActorGone`` if ``dst`` goes."""
        msg_id = next(self._ids)
        deadline = time.time() + timeout if timeout is not None else None
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Message] = loop.create_future()
        self._pending[msg_id] = _PendingAsk(dst, reply)
        # A timer that fails the future, not a cancel scope: this is every request's path,
        # and a scope costs several times a timer handle.
        expiry = None if timeout is None else loop.call_later(
            timeout, _expire, reply, dst, type(body).__name__, timeout
        )
        try:
            self.deliver(Envelope(msg_id, self.name, dst, body, None, deadline))
            return await reply
        except (asyncio.CancelledError, DeadlineExceeded):
            self._cancel(dst, msg_id)  # nobody waits any more: the handler may stop
            raise
        finally:
            self._pending.pop(msg_id, None)
            if expiry is not None:
                expiry.cancel()

    def ask_then(self, dst: str, body: Message, on_reply: OnReply) -> int:
        """Send ``body`` to ``dst`` and call ``on_reply`` with its reply, or with the error it
        replied with or ``ActorGone``/``ExecutorCrashed``, on the event loop: an ask that
        needs no task to wait in. ``on_reply`` may run before this returns (a local actor
        that answers at once) and must not raise. Returns the ask's id (what a later message
        about it names)."""
        msg_id = next(self._ids)
        self._pending[msg_id] = _PendingAsk(dst, None, on_reply)
        try:
            self.deliver(Envelope(msg_id, self.name, dst, body))
        except Exception as error:  # noqa: BLE001 - the caller hears it through on_reply
            pending = self._pending.pop(msg_id, None)
            if pending is not None:
                on_reply(self._as_error(error, body))
        return msg_id

    def _cancel(self, dst: str, msg_id: int) -> None:
        """Tell ``dst`` that ask ``msg_id`` is abandoned (``Cancel``), quietly: an actor that
        is gone has nothing left to stop."""
        envelope = Envelope(next(self._ids), self.name, dst, Cancel(msg_id))
        accept = self._actors.get(dst)
        try:
            if accept is not None:
                accept(envelope)
            elif self._link is not None:
                self._link.send(envelope)
        except Exception:  # noqa: BLE001 - the asker's own error is what it must hear
            log.debug("could not tell %s to cancel ask %d", dst, msg_id, exc_info=True)

    async def call(self, dst: str, body: Message) -> Message:
        """``ask`` for an actor of this process that takes ``body``'s kind directly
        (``Actor.DIRECT``): its handler runs in the caller's task, with no envelope, task or
        future. The reply and the errors are what ``ask`` gives; any other ``dst`` is asked."""
        handler = self._direct.get(dst, _NO_HANDLERS).get(type(body))
        if handler is None:
            return await self.ask(dst, body)
        try:
            reply = await handler(body, None)
        except Exception as error:  # noqa: BLE001 - converted exactly as a Failure reply is
            raise self._as_error(error, body) from error
        if reply is None:
            raise Internal(f"actor '{dst}' answered {type(body).__name__} with nothing")
        return reply

    def _as_error(self, error: BaseException, body: Message) -> InferdError:
        """What an exception from a handler is to its asker: an ``InferdError`` as it is,
        anything else an ``Internal`` error (and a log line: it is a bug)."""
        if not isinstance(error, InferdError):
            log.error("unexpected error handling %s", type(body).__name__, exc_info=error)
        return as_inferd_error(error)

    def reply(self, request: Envelope, body: Message | None) -> None:
        """Answer ``request`` (a ``None`` body answers nothing: the request was a tell)."""
        if body is not None:
            self.tell(request.src, body, reply_to=request.msg_id)

    def reply_failure(self, request: Envelope, error: BaseException) -> None:
        """The one place an exception becomes a wire error."""
        known = self._as_error(error, request.body)
        self.tell(request.src, to_failure(known), reply_to=request.msg_id)

    # ------------------------------------------------------------------ delivery

    def deliver(self, envelope: Envelope, *, from_link: bool = False) -> None:
        """Route ``envelope``: a reply to an ask of this process resolves it; a message for
        a local actor goes to that actor; anything else crosses the process link."""
        if envelope.reply_to is not None and envelope.dst == self.name:
            pending = self._pending.get(envelope.reply_to)
            if pending is not None:
                if pending.on_reply is not None:
                    del self._pending[envelope.reply_to]
                self._resolve(pending, envelope.body)
            return  # a late reply: its asker gave up
        accept = self._actors.get(envelope.dst)
        if accept is not None:
            accept(envelope)
            return
        if not from_link and self._link is not None and self._link.send(envelope):
            return
        self._undeliverable(envelope)

    def _undeliverable(self, envelope: Envelope) -> None:
        why_gone = self._link.gone.get(envelope.dst) if self._link is not None else None
        error: InferdError = (
            ExecutorCrashed(f"{why_gone}; it is being restarted") if why_gone
            else ActorGone(f"no actor at address '{envelope.dst}'")
        )
        if envelope.reply_to is not None:
            log.debug("dropping reply for %s: its process is gone", envelope.dst)
        elif (pending := self._pending.get(envelope.msg_id)) is not None:
            if pending.on_reply is not None:
                del self._pending[envelope.msg_id]
            self._fail(pending, error)
        elif envelope.src != self.name:
            self.reply_failure(envelope, error)  # a remote asker must not hang
        else:
            log.warning("dropping %s for unknown actor %s", type(envelope.body).__name__,
                        envelope.dst)

    def _resolve(self, pending: _PendingAsk, body: Message) -> None:
        if isinstance(body, Failure):
            self._fail(pending, InferdError.from_code(body.code, body.message))
        elif pending.on_reply is not None:
            pending.on_reply(body)
        elif pending.reply is not None and not pending.reply.done():
            pending.reply.set_result(body)

    def _fail(self, pending: _PendingAsk, error: InferdError) -> None:
        if pending.on_reply is not None:
            pending.on_reply(error)
        elif pending.reply is not None and not pending.reply.done():
            pending.reply.set_exception(error)

    def fail_pending_to(self, dst: str, error: InferdError) -> None:
        """Fail every ask waiting on ``dst`` (its actor stopped or its process died)."""
        for msg_id, pending in list(self._pending.items()):
            if pending.dst == dst:
                if pending.on_reply is not None:
                    del self._pending[msg_id]
                self._fail(pending, error)

