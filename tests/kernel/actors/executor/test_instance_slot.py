"""An instance's slot: where its calls run. A fast instance's first call goes to its thread
(nothing is known of it yet); calls that come while the thread still has work wait for it and
then run on the event loop, in the order they came, so a steady flow of overlapping batches
cannot keep a fast instance on its thread; a slow one stays on its thread."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest

from inferd.kernel.actors.executor.instance_slot import INLINE_BELOW_NS, InstanceSlot
from inferd.kernel.sdk.backends import Instance
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InferRequest, InferResponse

pytestmark = pytest.mark.anyio


class Recorder(Instance):
    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        return []


def slot_with(durations_ns: Sequence[int]) -> InstanceSlot:
    slot = InstanceSlot(Recorder(), ThreadPoolExecutor(1), load_id=1)
    for duration in durations_ns:
        slot.observe(duration)
    return slot


async def overlapping_calls(slot: InstanceSlot, count: int) -> list[tuple[int, bool]]:
    """``count`` calls started while the first still runs on the thread: (order, on the loop)."""
    loop_thread = threading.get_ident()
    first_started, release = threading.Event(), threading.Event()
    ran: list[tuple[int, bool]] = []

    def first() -> None:
        first_started.set()
        release.wait(10)
        ran.append((0, threading.get_ident() == loop_thread))

    def call(index: int) -> None:
        ran.append((index, threading.get_ident() == loop_thread))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(slot.run, first)
        await anyio.to_thread.run_sync(first_started.wait, 10)
        for index in range(1, count):
            tasks.start_soon(slot.run, lambda index=index: call(index))
        await anyio.wait_all_tasks_blocked()
        assert not slot.runs_inline()  # the thread has work: nothing may jump ahead of it
        release.set()
    return ran


async def test_a_fast_instance_leaves_its_thread_once_the_queue_is_done() -> None:
    slot = slot_with([INLINE_BELOW_NS // 10])
    ran = await overlapping_calls(slot, 5)
    assert ran == [(0, False), (1, True), (2, True), (3, True), (4, True)]
    assert slot.runs_inline() and not slot.waiting and slot.queued == 0


async def test_a_slow_instance_stays_on_its_thread() -> None:
    slot = slot_with([INLINE_BELOW_NS * 2])
    ran = await overlapping_calls(slot, 4)
    assert ran == [(0, False), (1, False), (2, False), (3, False)]
    assert not slot.runs_inline()


async def test_a_waiting_call_that_is_cancelled_lets_the_next_one_run() -> None:
    slot = slot_with([INLINE_BELOW_NS // 10])
    release = threading.Event()
    ran: list[str] = []
    abandoned = anyio.CancelScope()

    async def waits() -> None:
        with abandoned:
            await slot.run(lambda: ran.append("abandoned"))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(slot.run, lambda: release.wait(10))
        await anyio.wait_all_tasks_blocked()
        tasks.start_soon(waits)
        tasks.start_soon(slot.run, lambda: ran.append("kept"))
        await anyio.wait_all_tasks_blocked()
        assert len(slot.waiting) == 2
        abandoned.cancel()
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert ran == ["kept"]
    assert not slot.waiting
