"""CPU and memory figures of the machine and of one process, read from ``/proc`` (Linux).

The machine's (Triton's ``nv_cpu_*``, computed as Triton does from ``/proc/stat`` and
``/proc/meminfo``: utilization is the busy share of the CPU time that passed since the
previous reading, used memory is ``MemTotal - MemAvailable``) and a process's CPU seconds
(user + system) and resident bytes (``/proc/<pid>/stat``, ``/proc/<pid>/statm``). The parsers
are pure functions over the files' text; the readers return ``None`` where ``/proc`` has no
answer (another system, a process that is gone), never raise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuUtilization", "machine_memory"]

PROC = Path("/proc")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def parse_cpu_times(stat_text: str) -> tuple[int, int]:
    """(busy, total) jiffies of every CPU together, from ``/proc/stat``'s ``cpu`` line."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            # user nice system idle iowait irq softirq steal (guest time is inside user)
            values = [int(value) for value in fields[1:9]]
            total = sum(values)
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return total - idle, total
    raise ValueError("/proc/stat has no 'cpu' line")


def parse_memory(meminfo_text: str) -> tuple[int, int]:
    """(total, used) bytes of RAM from ``/proc/meminfo``."""
    kib: dict[str, int] = {}
    for line in meminfo_text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            kib[name.strip()] = int(parts[0])
    total = kib["MemTotal"] * 1024
    available = kib.get("MemAvailable", kib.get("MemFree", 0)) * 1024
    return total, total - available


def parse_process(stat_text: str, statm_text: str) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of a process from its ``stat`` and ``statm``."""
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat_text[stat_text.rindex(")") + 2:].split()
    user, system = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    resident_pages = int(statm_text.split()[1])
    return (user + system) / _CLOCK_TICKS, resident_pages * _PAGE_SIZE


def process_usage(pid: int) -> tuple[float, int] | None:
    try:
        return parse_process((PROC / str(pid) / "stat").read_text(),
                             (PROC / str(pid) / "statm").read_text())
    except (OSError, ValueError, IndexError):
        return None


def machine_memory() -> tuple[int, int] | None:
    try:
        return parse_memory((PROC / "meminfo").read_text())
    except (OSError, ValueError, KeyError):
        return None


@dataclass(slots=True)
class CpuUtilization:
    """The busy share of the CPU time between two readings (0.0 before the second one)."""

    busy: int = 0
    total: int = 0

    def read(self) -> float | None:
        try:
            busy, total = parse_cpu_times((PROC / "stat").read_text())
        except (OSError, ValueError):
            return None
        return self.update(busy, total)

    def update(self, busy: int, total: int) -> float:
        passed, busy_passed = total - self.total, busy - self.busy
        first = self.total == 0
        self.busy, self.total = busy, total
        if first or passed <= 0:
            return 0.0
        return min(1.0, max(0.0, busy_passed / passed))
