"""Background work runs at low CPU priority; threads it starts get normal priority back."""

from __future__ import annotations

import os
import threading

import pytest

from inferd.kernel.actors.executor.load_priority import BACKGROUND_NICENESS, BackgroundWorker

pytestmark = pytest.mark.anyio


def niceness_of(thread_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, thread_id)


async def test_work_runs_niced_and_threads_it_starts_are_restored() -> None:
    worker = BackgroundWorker(threads=1)
    started = threading.Event()
    release = threading.Event()
    seen: dict[str, int] = {}

    def framework_thread() -> None:
        seen["helper"] = threading.get_native_id()
        started.set()
        release.wait(10)

    def load() -> int:
        seen["worker_niceness"] = niceness_of(threading.get_native_id())
        seen["worker_policy"] = os.sched_getscheduler(0)
        threading.Thread(target=framework_thread, daemon=True).start()
        started.wait(10)
        seen["helper_niceness_during"] = niceness_of(seen["helper"])
        return 42

    try:
        assert await worker.run(load) == 42
        assert seen["worker_niceness"] == BACKGROUND_NICENESS
        assert seen["worker_policy"] == os.SCHED_IDLE
        assert seen["helper_niceness_during"] == BACKGROUND_NICENESS
        if os.geteuid() == 0:  # raising a priority needs the privilege
            assert niceness_of(seen["helper"]) == 0
            assert os.sched_getscheduler(seen["helper"]) == os.SCHED_OTHER
    finally:
        release.set()
        worker.close()
