"""On-demand loads (``inferd.plugins.on_demand.loads``) without a server: concurrent
first requests share one load, a failure answers every waiter and then backs off, a model
the repository lacks and a load refused for room are not backed off, and a wait is bounded."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from inferd.plugins.on_demand.loads import OnDemandLoads
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable

pytestmark = pytest.mark.anyio


class Loads:
    """A control stand-in: counts loads, which end when ``release`` is set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.ready = False
        self.error = error
        self.release = anyio.Event()

    async def load(self, name: str) -> None:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        self.ready = True


def loads_with(loads: Loads, tasks: anyio.abc.TaskGroup, timeout: float = 30.0
               ) -> OnDemandLoads:
    def spawn(function: Callable[[], Coroutine[Any, Any, None]]) -> None:
        tasks.start_soon(function)

    return OnDemandLoads(timeout_secs=timeout, load=loads.load,
                         is_ready=lambda name: loads.ready, spawn=spawn)


async def test_concurrent_requests_share_one_load() -> None:
    loads = Loads()
    async with anyio.create_task_group() as tasks:
        on_demand = loads_with(loads, tasks)
        for _ in range(5):
            tasks.start_soon(on_demand.ensure, "m")
        await anyio.wait_all_tasks_blocked()
        loads.release.set()
    assert loads.calls == 1
    assert on_demand.counters.loads == {("m", "success"): 1}
    assert on_demand.counters.waits == {"m": 5}


async def test_a_failure_answers_every_waiter_then_backs_off() -> None:
    loads = Loads(InvalidArgument("the weights are missing"))
    answers: list[str] = []

    async def ask(on_demand: OnDemandLoads) -> None:
        try:
            await on_demand.ensure("m")
        except Unavailable as error:
            answers.append(error.message)

    async with anyio.create_task_group() as tasks:
        on_demand = loads_with(loads, tasks)
        for _ in range(3):
            tasks.start_soon(ask, on_demand)
        await anyio.wait_all_tasks_blocked()
        loads.release.set()
    await ask(on_demand)

    assert loads.calls == 1
    assert answers[:3] == ["model 'm' failed to load on demand: the weights are missing"] * 3
    assert answers[3].startswith("model 'm' failed to load on demand: the weights are missing "
                                 "(on-demand loads of 'm' are tried again in ")
    on_demand.forget_failure("m")
    loads.error = None
    async with anyio.create_task_group() as tasks:
        on_demand._spawn = lambda function: tasks.start_soon(function)
        await on_demand.ensure("m")
    assert loads.calls == 2


@pytest.mark.parametrize("error", [NotFound("Request for unknown model: 'm' is not found"),
                                   Unavailable("cannot load 'm' within the cpu memory budget")])
async def test_no_back_off_for_a_missing_model_or_a_full_budget(error: Exception) -> None:
    loads = Loads(error)
    loads.release.set()
    async with anyio.create_task_group() as tasks:
        on_demand = loads_with(loads, tasks)
        for _ in range(2):
            with pytest.raises(type(error)):
                await on_demand.ensure("m")
    assert loads.calls == 2


async def test_a_wait_is_bounded() -> None:
    loads = Loads()
    async with anyio.create_task_group() as tasks:
        on_demand = loads_with(loads, tasks, timeout=0.05)
        with pytest.raises(Unavailable, match="--model-load-on-demand-timeout-secs"):
            await on_demand.ensure("m")
        loads.release.set()
    assert loads.ready
