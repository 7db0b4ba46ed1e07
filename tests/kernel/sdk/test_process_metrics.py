"""The /proc readers of the machine's and a process's CPU and memory."""

from __future__ import annotations

import os
import time

from inferd.kernel.runtime import link_memory
from inferd.kernel.sdk.process_metrics import (
    CpuUtilization,
    machine_memory,
    parse_cpu_times,
    parse_memory,
    parse_process,
    process_usage,
)

STAT = """cpu  100 5 50 800 20 3 2 0 0 0
cpu0 50 2 25 400 10 1 1 0 0 0
intr 12345
"""
MEMINFO = """MemTotal:       16000000 kB
MemFree:         2000000 kB
MemAvailable:    6000000 kB
Buffers:          100000 kB
"""


def test_cpu_times_and_utilization() -> None:
    busy, total = parse_cpu_times(STAT)
    assert total == 980 and busy == 980 - 800 - 20
    utilization = CpuUtilization()
    assert utilization.update(busy, total) == 0.0  # nothing to compare with yet
    assert utilization.update(busy + 30, total + 120) == 0.25
    assert utilization.update(busy + 30, total + 120) == 0.0  # no time passed


def test_memory_is_total_minus_available() -> None:
    assert parse_memory(MEMINFO) == (16_000_000 * 1024, 10_000_000 * 1024)


def test_a_process_name_with_spaces_and_parentheses() -> None:
    fields = ["S"] + ["0"] * 10 + ["250", "150"] + ["0"] * 30
    stat = "42 (odd (name) x) " + " ".join(fields)
    seconds, resident = parse_process(stat, "1000 300 20 1 0 50 0")
    assert seconds == 400 / os.sysconf("SC_CLK_TCK")
    assert resident == 300 * os.sysconf("SC_PAGE_SIZE")


def test_the_readers_on_this_machine() -> None:
    usage = process_usage(os.getpid())
    assert usage is not None and usage[1] > 1 << 20
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        pass
    later = process_usage(os.getpid())
    assert later is not None and later[0] >= usage[0]
    assert process_usage(2**22 + 12345) is None  # no such process: no figure, no error
    memory = machine_memory()
    assert memory is not None and 0 < memory[1] <= memory[0]
    assert CpuUtilization().read() == 0.0


def test_link_segments_of_a_server_are_counted() -> None:
    server_pid = 2**22 + 777  # no live server has it: nothing of a real one is touched
    path = link_memory.SHM_DIR / f"{link_memory.PREFIX}{server_pid}-{os.getpid()}-1"
    path.write_bytes(b"\0" * 8192)
    try:
        assert link_memory.server_segment_bytes(server_pid) == (1, 8192)
    finally:
        path.unlink()
    assert link_memory.server_segment_bytes(server_pid) == (0, 0)
