"""``StepLimiter`` (an ensemble's ``max_inflight_requests``): at most N slots taken, the rest
wait in line first come first served, a cancelled waiter leaves the line or passes on the slot
it was handed, a request stuck past Triton's bound goes on, and 0 limits nothing."""

from __future__ import annotations

import asyncio

import pytest

from inferd.kernel.actors.scheduler.ensembles import inflight
from inferd.kernel.actors.scheduler.ensembles.inflight import StepLimiter, limiters_for

pytestmark = pytest.mark.anyio


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_at_most_the_limit_is_taken_and_the_rest_go_in_arrival_order() -> None:
    limiter = StepLimiter(2, "ensemble 'e' step 0")
    order: list[int] = []

    async def take(number: int) -> None:
        await limiter.acquire()
        order.append(number)

    tasks = [asyncio.ensure_future(take(number)) for number in range(5)]
    await settle()
    assert (order, limiter.in_flight, limiter.waiting) == ([0, 1], 2, 3)

    limiter.release()
    await settle()
    assert (order, limiter.in_flight, limiter.waiting) == ([0, 1, 2], 2, 2)

    for _ in range(4):
        limiter.release()
    await settle()
    assert (order, limiter.in_flight, limiter.waiting) == ([0, 1, 2, 3, 4], 0, 0)
    await asyncio.gather(*tasks)


async def test_a_cancelled_waiter_leaves_the_line() -> None:
    limiter = StepLimiter(1, "ensemble 'e' step 0")
    await limiter.acquire()
    waiting = asyncio.ensure_future(limiter.acquire())
    await settle()
    assert limiter.waiting == 1

    waiting.cancel()
    await settle()
    limiter.release()

    assert (limiter.in_flight, limiter.waiting) == (0, 0)


async def test_a_slot_handed_to_a_waiter_cancelled_meanwhile_goes_to_the_next() -> None:
    limiter = StepLimiter(1, "ensemble 'e' step 0")
    await limiter.acquire()
    first = asyncio.ensure_future(limiter.acquire())
    second = asyncio.ensure_future(limiter.acquire())
    await settle()

    limiter.release()  # handed to first, which is cancelled before it runs
    first.cancel()
    await settle()

    assert second.done() and (limiter.in_flight, limiter.waiting) == (1, 0)


async def test_a_request_stuck_past_the_bound_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(inflight, "STUCK_SECS", 0.01)
    limiter = StepLimiter(1, "ensemble 'e' step 3")
    await limiter.acquire()

    await limiter.acquire()

    assert (limiter.in_flight, limiter.waiting) == (2, 0)
    assert "ensemble 'e' step 3 waited 0.01 s" in caplog.text


def test_zero_limits_nothing() -> None:
    assert limiters_for(0, "e", 3) == ()
    assert [limiter.limit for limiter in limiters_for(4, "e", 3)] == [4, 4, 4]
