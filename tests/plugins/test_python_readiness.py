"""The python backend's ``is_ready()`` call (``plugins/backends/python/readiness``): one call
per instance at a time, its answer shared with the checks that waited for it; ``async def``
answers; anything but a bool refused with Triton's message."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from inferd.plugins.backends.python.readiness import ReadinessCheck, call_is_ready


def test_a_check_arriving_while_one_runs_takes_its_answer() -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        started.set()
        assert release.wait(10)
        return False

    readiness = ReadinessCheck(check)
    answers: list[bool] = []
    first = threading.Thread(target=lambda: answers.append(readiness.run()))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: answers.append(readiness.run()))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert answers == [False, False]
    assert len(calls) == 1
    assert readiness.run() is False and len(calls) == 2  # a later check runs again


def test_a_failing_check_fails_the_checks_that_waited_for_it_too() -> None:
    def check() -> bool:
        raise RuntimeError("the feature store is unreachable")

    readiness = ReadinessCheck(check)
    with pytest.raises(RuntimeError, match="unreachable"):
        readiness.run()


class Sync:
    def is_ready(self) -> Any:
        return True


class Async:
    async def is_ready(self) -> bool:
        return False


class NotBool:
    def is_ready(self) -> Any:
        return "yes"


def test_is_ready_may_be_async_and_must_answer_a_bool() -> None:
    assert call_is_ready(Sync()) is True
    assert call_is_ready(Async()) is False
    with pytest.raises(TypeError, match="^is_ready\\(\\) must return a boolean value$"):
        call_is_ready(NotBool())
