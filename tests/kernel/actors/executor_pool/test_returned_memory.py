"""What the pool tells control an unload gave back: a load's parts add up, a GPU figure only
where some part read one, and a process that exited with its model returns all it held."""

from __future__ import annotations

import os

from inferd.kernel.actors.executor_pool.returned_memory import ended, held_by, total
from inferd.protocols.messages import VersionUnloaded


def test_the_parts_of_a_load_add_up() -> None:
    parts = [VersionUnloaded(10, 8, None, None), VersionUnloaded(20, 15, 100, 90)]
    assert total(parts) == VersionUnloaded(30, 23, 100, 90)
    assert total([VersionUnloaded(10, 8)]) == VersionUnloaded(10, 8, None, None)
    assert total([]) == VersionUnloaded(0, 0, None, None)


def test_a_process_that_exited_returns_all_it_still_held() -> None:
    reply = VersionUnloaded(100, 90, 50, 20)
    assert ended(reply, "executor/x", 300, exited=True) == VersionUnloaded(100, 390, 50, 50)
    assert ended(VersionUnloaded(100, 90), "executor/x", 300, exited=True) == VersionUnloaded(
        100, 390, None, None)


def test_a_process_still_running_returns_nothing_more() -> None:
    reply = VersionUnloaded(100, 90, 50, 20)
    assert ended(reply, "executor/x", 300, exited=False) == reply


def test_what_a_process_holds_is_read_from_proc() -> None:
    assert held_by(os.getpid()) > 0
    assert held_by(None) == 0
