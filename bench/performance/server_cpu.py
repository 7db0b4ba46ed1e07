"""Server CPU per inference: the figure the per-request-cost work steers by.

This module owns one measurement and nothing else: the user+system CPU time that every
process of a server's tree spent over a block of load (``/proc/<pid>/stat`` fields 14 and 15,
read before and after), divided by the number of inferences the server itself counted as
successful for the model over the same block (``GET v2/models/<m>/stats``,
``inference_stats.success.count``), for the whole tree and for its busiest single process.
Unlike infer/s, it moves little when something else keeps the machine busy, so a server can
be compared with real Triton in the same run. It starts no process and prints nothing; the
benchmarks import it as ``bench.performance.server_cpu``.

A process that starts during the block (an executor restarted, a python stub) counts from
zero; one that ends during it loses what it had spent since the first reading (its time is
gone from /proc), so a block in which processes come and go reads low.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STATS_TIMEOUT_SECS = 10.0


def tree_cpu_ticks(root: int) -> dict[int, tuple[str, int]]:
    """``{pid: (command name, utime+stime in clock ticks)}`` for ``root`` and every live
    descendant, read from /proc in one pass."""
    parents: dict[int, int] = {}
    readings: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # gone since the listing
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        # After the name: state, ppid, ... utime is field 14 of the line, stime 15.
        parents[int(entry.name)] = int(fields[1])
        readings[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: readings[pid] for pid in tree if pid in readings}


def success_count(http_address: str, model: str) -> int:
    """The server's own count of successful inferences of ``model`` (every version)."""
    url = f"http://{http_address}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=STATS_TIMEOUT_SECS) as reply:
        stats = json.load(reply)
    return sum(int(entry["inference_stats"]["success"]["count"])
               for entry in stats["model_stats"])


@dataclass
class CpuPerInference:
    """What one block of load cost the server, once the block has ended."""

    inferences: int = 0
    total_us: float | None = None  # the whole tree's CPU per inference
    busiest_us: float | None = None  # the busiest single process's
    busiest: str = ""  # that process's command name
    by_process: dict[str, float] = field(default_factory=dict)  # name -> µs per inference

    def describe(self) -> str:
        if self.total_us is None:
            return "server CPU per inference: not measured (no inference counted)"
        parts = ", ".join(f"{name} {us:,.0f}" for name, us in
                          sorted(self.by_process.items(), key=lambda item: -item[1]))
        return (f"server CPU per inference {self.total_us:,.0f} µs over {self.inferences:,} "
                f"inferences; busiest {self.busiest} {self.busiest_us:,.0f} µs ({parts})")


@contextmanager
def metering(pid: int, http_address: str, model: str) -> Iterator[CpuPerInference]:
    """Measure the block: ``with metering(server.pid, "127.0.0.1:8000", "simple") as cost``;
    ``cost`` is filled in when the block ends (also when it raises)."""
    cost = CpuPerInference()
    before = tree_cpu_ticks(pid)
    counted = success_count(http_address, model)
    try:
        yield cost
    finally:
        after = tree_cpu_ticks(pid)
        cost.inferences = success_count(http_address, model) - counted
        if cost.inferences > 0:
            per_process: dict[str, float] = {}
            busiest = (0.0, "")
            for process, (name, ticks) in after.items():
                spent = ticks - before.get(process, (name, 0))[1]
                us = spent / CLOCK_TICKS * 1e6 / cost.inferences
                label = f"{name}[{process}]" if name in per_process else name
                per_process[label] = us
                busiest = max(busiest, (us, label))
            cost.by_process = {name: us for name, us in per_process.items() if us >= 1}
            cost.total_us = sum(per_process.values())
            cost.busiest_us, cost.busiest = busiest
