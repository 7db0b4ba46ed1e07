"""Load priorities: the low-priority worker threads that load models (and other background
work) so that serving keeps the cores.

Loading a model (reading files, optimizing a graph, creating sessions) can take a whole core
for a while; on a small machine that core is taken from the requests of the models already
serving. A load runs on a ``BackgroundWorker`` thread whose CPU priority is lowered (Linux
``SCHED_IDLE`` and the highest niceness), so when the cores are busy the kernel's scheduler
serves inference first and the load takes longer, instead of the other way round. Threads a
framework starts during the load inherit the low priority; ``restore_priority`` lifts them back
where the process may do so.
Owns thread priorities only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKGROUND_NICENESS = 19


def _lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def restore_priority(except_thread: int) -> None:
    """Give every thread of this process left at the background niceness (other than
    ``except_thread``) normal priority again: a framework's own worker threads, started
    during a load, must not serve inference at low priority. Needs the privilege to raise a
    priority (root, or CAP_SYS_NICE); without it they stay low and this says so once."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return
    for task in tasks:
        thread = int(task)
        if thread == except_thread:
            continue
        try:
            if os.getpriority(os.PRIO_PROCESS, thread) == BACKGROUND_NICENESS:
                os.setpriority(os.PRIO_PROCESS, thread, 0)
                if os.sched_getscheduler(thread) == os.SCHED_IDLE:
                    os.sched_setscheduler(thread, os.SCHED_OTHER, os.sched_param(0))
        except PermissionError:
            if not getattr(restore_priority, "warned", False):
                log.warning(
                    "threads started during a model load keep a low CPU priority:"
                    " this process may not raise thread priorities"
                )
                restore_priority.warned = True  # type: ignore[attr-defined]
            return
        except OSError:
            continue  # the thread ended meanwhile


class BackgroundWorker:
    """Runs blocking functions on low-priority threads, or on threads of normal priority
    where ``lower`` is false: in the server's own process a starved low-priority thread
    holding the GIL would stall the frontends with it."""

    def __init__(self, threads: int = 2, *, lower: bool = True) -> None:
        self._pool = ThreadPoolExecutor(
            threads, thread_name_prefix="background", initializer=_lower_priority if lower
            else None
        )

    async def run(self, function: Callable[[], T]) -> T:
        def call() -> T:
            try:
                return function()
            finally:
                restore_priority(except_thread=threading.get_native_id())

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
