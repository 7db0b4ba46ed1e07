"""Cancellation of asks: an asker that stops waiting (its task cancelled, or its ask past its
timeout) tells the actor ``Cancel``, in one process and across a real ZeroMQ process link; the
actor stops the handler of a ``CANCELLABLE`` kind and lets any other run to its end."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import DeadlineExceeded
from inferd.protocols.messages import (
    Cancel,
    Envelope,
    HealthRequest,
    HealthStatus,
    Index,
    IndexRequest,
)
from tests.kernel.runtime.linked_routers import linked_routers

pytestmark = pytest.mark.anyio

WAIT = 5.0  # seconds any test waits at most for what it expects


class Sleeper(Actor):
    """HealthRequest ``wait`` sleeps until cancelled or for ``WAIT``; IndexRequest sleeps a
    little and then finishes. Only HealthRequest is cancellable."""

    CANCELLABLE = (HealthRequest,)

    def __init__(self, router: Router, address: str) -> None:
        super().__init__(router, address)
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.finished: list[str] = []

    async def on_health_request(self, message: HealthRequest, envelope: Envelope) -> HealthStatus:
        self.started.append(message.what)
        try:
            await anyio.sleep(WAIT if message.what == "wait" else 0)
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(message.what)
            raise
        self.finished.append(message.what)
        return HealthStatus(True)

    async def on_index_request(self, message: IndexRequest, envelope: Envelope
                               ) -> Index:
        self.started.append("index")
        try:
            await anyio.sleep(0.3)
        except anyio.get_cancelled_exc_class():
            self.cancelled.append("index")
            raise
        self.finished.append("index")
        return Index(())


async def _until(condition: Callable[[], object], what: str) -> None:
    """Wait, at most ``WAIT`` seconds, for ``condition``; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.01)


async def test_a_timed_out_ask_stops_its_cancellable_handler() -> None:
    router = Router("main")
    async with anyio.create_task_group() as tasks:
        sleeper = Sleeper(router, "sleeper")
        await tasks.start(sleeper.run)
        with pytest.raises(DeadlineExceeded):
            await router.ask("sleeper", HealthRequest("wait"), timeout=0.1)
        await _until(lambda: sleeper.cancelled == ["wait"], "the handler to be cancelled")
        assert sleeper.finished == [] and not sleeper._cancellable
        # The actor keeps serving.
        live = await router.ask("sleeper", HealthRequest("live"), timeout=WAIT)
        assert live == HealthStatus(True)
        tasks.cancel_scope.cancel()


async def test_a_cancelled_asker_stops_its_cancellable_handler() -> None:
    router = Router("main")
    async with anyio.create_task_group() as tasks:
        sleeper = Sleeper(router, "sleeper")
        await tasks.start(sleeper.run)
        with anyio.CancelScope() as scope:
            tasks.start_soon(_cancel_when_started, scope, sleeper)
            await router.ask("sleeper", HealthRequest("wait"))
        assert scope.cancelled_caught
        await _until(lambda: sleeper.cancelled == ["wait"], "the handler to be cancelled")
        tasks.cancel_scope.cancel()


async def _cancel_when_started(scope: anyio.CancelScope, sleeper: Sleeper) -> None:
    await _until(lambda: sleeper.started, "the handler to start")
    scope.cancel()


async def test_a_kind_not_cancellable_runs_to_its_end() -> None:
    router = Router("main")
    async with anyio.create_task_group() as tasks:
        sleeper = Sleeper(router, "sleeper")
        await tasks.start(sleeper.run)
        with pytest.raises(DeadlineExceeded):
            await router.ask("sleeper", IndexRequest(), timeout=0.05)
        await _until(lambda: sleeper.finished == ["index"], "the handler to finish")
        assert sleeper.cancelled == []
        tasks.cancel_scope.cancel()


async def test_a_cancel_for_no_running_ask_changes_nothing() -> None:
    router = Router("main")
    async with anyio.create_task_group() as tasks:
        sleeper = Sleeper(router, "sleeper")
        await tasks.start(sleeper.run)
        tasks.start_soon(router.ask, "sleeper", HealthRequest("wait"))
        await _until(lambda: sleeper.started, "the handler to start")
        router.tell("sleeper", Cancel(10**9))  # an id nobody asked with
        live = await router.ask("sleeper", HealthRequest("live"), timeout=WAIT)
        assert live == HealthStatus(True)
        assert sleeper.cancelled == []
        tasks.cancel_scope.cancel()


@pytest.fixture
async def linked(tmp_path: Path) -> AsyncIterator[tuple[Router, Sleeper]]:
    """A hub and an uplink joined by real ZeroMQ sockets, a sleeper at the uplink's own
    address, as an executor has."""
    async with linked_routers(tmp_path, Sleeper) as (hub, _, _, sleeper):
        yield hub, sleeper


async def test_cancel_crosses_the_process_link(linked) -> None:  # type: ignore[no-untyped-def]
    hub, sleeper = linked
    with pytest.raises(DeadlineExceeded):
        await hub.ask("peer/one", HealthRequest("wait"), timeout=0.2)
    await _until(lambda: sleeper.cancelled == ["wait"], "the remote handler to be cancelled")
    assert await hub.ask("peer/one", HealthRequest("live"), timeout=WAIT) == HealthStatus(True)
