"""A python model's own ``is_ready()`` (python_backend#430), run for readiness checks.

Triton runs at most one ``is_ready()`` call per instance at a time: a check arriving while one
runs waits for it and takes its answer (or its error). ``async def is_ready`` runs on an event
loop of the check's own. Owns that serialization only; the executor runs the checks.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any


class ReadinessCheck:
    """One ``check()`` call at a time: a call arriving while one runs waits for it and takes
    its answer (or its error)."""

    def __init__(self, check: Callable[[], bool]) -> None:
        self._check = check
        self._lock = threading.Lock()
        self._finished = 0
        self._last: bool | BaseException = True

    def run(self) -> bool:
        arrived = self._finished
        with self._lock:
            if self._finished == arrived:
                try:
                    self._last = self._check()
                except Exception as error:  # noqa: BLE001 - handed to every waiter
                    self._last = error
                self._finished += 1
            last = self._last
        if isinstance(last, BaseException):
            raise last
        return last


def call_is_ready(triton_model: Any) -> bool:
    """``triton_model.is_ready()``'s answer, which must be a bool."""
    answer = triton_model.is_ready()
    if inspect.isawaitable(answer):
        answer = asyncio.run(_awaited(answer))
    if not isinstance(answer, bool):
        raise TypeError("is_ready() must return a boolean value")
    return answer


async def _awaited(answer: Any) -> Any:
    return await answer
