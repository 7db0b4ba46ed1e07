"""Control's unloading of a model's versions, an object the control actor owns and calls.

Owns the steps of one version's unload (UNLOADING; the scheduler stops taking its requests
and, once those in flight have finished, lets it go; its executors unload it; UNAVAILABLE
with a reason) and, for an unload request, when to answer: as Triton's, once the model
takes no new request, which is when the unload is done unless requests are still in flight
(``answer_when_retired``). The model's lock and its folders are the actor's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio

from inferd.kernel.actors.control.lifecycle_log import UNLOADED, ModelStateLog
from inferd.kernel.actors.control.model_status import ModelStatus, State, VersionStatus
from inferd.kernel.actors.control.unload_report import UnloadReports
from inferd.kernel.runtime.addresses import EXECUTORS, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.protocols.messages import Retired, RetireVersion, UnloadVersion


class VersionUnloader:
    def __init__(self, router: Router, states: ModelStateLog, *,
                 is_served: Callable[[str, int], bool],
                 version_unloaded: Callable[[str, int], None]) -> None:
        self._router = router
        self._states = states
        self._is_served = is_served  # an ensemble's version the scheduler serves
        self._version_unloaded = version_unloaded
        self.reports = UnloadReports()  # what each unload gave back

    async def unload_all(self, name: str, model: ModelStatus, cause: str,
                         reason: str = "unloaded") -> None:
        """Every version of ``model`` (the caller holds its lock), each left UNAVAILABLE with
        ``reason``; ``model.draining`` is set once none takes a new request while some still
        have requests in flight."""
        numbers = list(model.versions)
        retired: list[bool] = []

        def retiring(in_flight: bool) -> None:
            retired.append(in_flight)
            if len(retired) == len(numbers) and any(retired):
                model.draining.set()

        async with anyio.create_task_group() as tasks:
            for number in numbers:
                tasks.start_soon(self.unload_version, name, model, number, reason, cause,
                                 retiring)

    async def unload_version(self, name: str, model: ModelStatus, number: int, reason: str,
                             cause: str = "unload requested",
                             retiring: Callable[[bool], None] | None = None) -> None:
        """Unload one version; ``retiring`` hears, once it takes no new request, whether
        requests are still in flight (the unload then waits for them)."""
        version = model.versions.get(number)
        if version is None or version.state not in (State.READY, State.UNAVAILABLE):
            if retiring is not None:
                retiring(False)
            return
        was_ready = version.state == State.READY or self._is_served(name, number)
        version.state = State.UNLOADING
        self._states.changed(name, number, State.UNLOADING, cause)
        in_flight = False
        if was_ready:
            retired = await self._router.ask(SCHEDULER, RetireVersion(name, number, wait=False))
            in_flight = isinstance(retired, Retired) and retired.in_flight
        if retiring is not None:
            retiring(in_flight)
        if was_ready:
            await self._router.ask(SCHEDULER, RetireVersion(name, number))
        memory: dict[str, int] = {}
        if version.load_id:
            unloaded = await self._router.ask(EXECUTORS, UnloadVersion(version.load_id))
            memory = self.reports.record(name, number, unloaded)
        model.versions[number] = VersionStatus(State.UNAVAILABLE, reason, memory=memory)
        self._states.changed(name, number, UNLOADED)
        self._version_unloaded(name, number)


async def answer_when_retired(
    unload: Callable[[], Awaitable[None]], model: ModelStatus | None,
    spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], object],
) -> None:
    """Run ``unload`` in a task of its own (``spawn``) and return once it is done (raising
    its error) or once ``model`` is draining, its requests in flight finishing behind it."""
    draining = anyio.Event()
    if model is not None:
        model.draining = draining
    done = anyio.Event()
    failed: list[Exception] = []

    async def run() -> None:
        try:
            await unload()
        except Exception as error:
            failed.append(error)
            if draining.is_set():  # answered already: the actor logs it
                raise
        finally:
            done.set()

    spawn(run)
    async with anyio.create_task_group() as tasks:
        for event in (done, draining):
            tasks.start_soon(_cancel_when_set, event, tasks.cancel_scope)
    if done.is_set() and failed:
        raise failed[0]


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
