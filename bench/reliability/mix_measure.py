"""What the chaos mix measures of a server, and the tables its reports print.

Owns ``Footprint`` (RSS, descriptors and threads of the server and of its executors, found
by their command line, and the server's segments in ``/dev/shm``), ``Throughput`` (the right
answers of a window per second and per CPU-second that the server, its executors and the
clients' process were given: the second does not move with what else the machine runs) and
the report rows the chaos test, ``chaos.py`` and ``soak.py`` print: requests by outcome, the
chaos actions with their recovery times, the footprint at start-up and at the end. It acts on
nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from bench.reliability import mix_traffic
from bench.reliability.mix_traffic import Tally

if TYPE_CHECKING:
    from bench.reliability.mix_chaos import Chaos

EXECUTOR_MODULE = "inferd.kernel.actors.executor.main"
SHM_DIR = Path("/dev/shm")


def executors(server_pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(server_pid).children(recursive=True):
        try:
            if EXECUTOR_MODULE in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found



@dataclass(frozen=True)
class Footprint:
    main_rss: int
    executors_rss: int
    executors: int
    descriptors: int  # the server's and its executors'
    threads: int  # the server's and its executors'
    shm_segments: int  # the server's files in /dev/shm
    shm_bytes: int
    per_process: tuple[tuple[str, int, int], ...]  # (name, RSS, descriptors)


def footprint(server_pid: int) -> Footprint:
    main = psutil.Process(server_pid)
    rss, descriptors, threads = 0, main.num_fds(), main.num_threads()
    per_process = [("main", main.memory_info().rss, main.num_fds())]
    found = executors(server_pid)
    for child in found:
        try:
            child_rss, child_fds = child.memory_info().rss, child.num_fds()
            rss += child_rss
            descriptors += child_fds
            threads += child.num_threads()
            arguments = child.cmdline()
            name = arguments[arguments.index("--name") + 1]
            per_process.append((name, child_rss, child_fds))
        except (psutil.Error, ValueError, IndexError):
            pass
    segments = [path for path in SHM_DIR.glob(f"inferd-{server_pid}-*")]
    size = 0
    for path in segments:
        try:
            size += path.stat().st_size
        except OSError:
            pass
    return Footprint(main.memory_info().rss, rss, len(found), descriptors, threads,
                     len(segments), size, tuple(sorted(per_process)))


def cpu_seconds(server_pid: int) -> dict[int, float]:
    """CPU seconds (user and system) so far of the server, each of its descendants and this
    process (the clients'), by pid."""
    found: dict[int, float] = {}
    server = psutil.Process(server_pid)
    for process in (server, *server.children(recursive=True), psutil.Process(os.getpid())):
        try:
            times = process.cpu_times()
            found[process.pid] = times.user + times.system
        except psutil.Error:
            pass
    return found


@dataclass(frozen=True)
class Throughput:
    """Right answers over a window: per second, and per CPU-second of the server, its
    executors and the clients (the processes that window's work ran on)."""

    answers: int
    seconds: float
    cpu_seconds: float
    machine_cpu_seconds: float  # every process's on the machine, for the report

    @property
    def per_second(self) -> float:
        return self.answers / self.seconds

    @property
    def per_cpu_second(self) -> float:
        return self.answers / self.cpu_seconds if self.cpu_seconds else 0.0


def measure(server_pid: int, tally: Tally, window: float) -> Throughput:
    """The right answers completed within the next ``window`` seconds (a measuring window,
    not a wait), per second and per CPU-second."""
    machine_before, cpu_before = _busy(), cpu_seconds(server_pid)
    started = time.monotonic()
    time.sleep(window)
    machine_after, cpu_after = _busy(), cpu_seconds(server_pid)
    ended = time.monotonic()
    used = sum(seconds - cpu_before.get(pid, 0.0) for pid, seconds in cpu_after.items())
    answers = sum(1 for call in tally.calls_so_far()
                  if call.outcome == "ok" and started <= call.ended <= ended)
    return Throughput(answers, ended - started, used, machine_after - machine_before)


def _busy() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


MIB = 1 << 20


def footprint_rows(before: Footprint, after: Footprint) -> list[str]:
    return [
        "| server | start-up | end |", "|---|---:|---:|",
        f"| main process RSS (MiB) | {before.main_rss / MIB:.1f} | {after.main_rss / MIB:.1f} |",
        f"| executors' RSS (MiB; {before.executors} / {after.executors} processes) | "
        f"{before.executors_rss / MIB:.1f} | {after.executors_rss / MIB:.1f} |",
        f"| descriptors (all processes) | {before.descriptors} | {after.descriptors} |",
        f"| threads (all processes) | {before.threads} | {after.threads} |",
        f"| /dev/shm segments (KiB) | {before.shm_segments} ({before.shm_bytes >> 10}) | "
        f"{after.shm_segments} ({after.shm_bytes >> 10}) |",
    ]


def outcome_rows(tally: Tally) -> list[str]:
    total = tally.totals()
    outcomes = [*mix_traffic.OUTCOMES, *sorted(set(total) - set(mix_traffic.OUTCOMES))]
    rows = ["| requests | " + " | ".join(outcomes) + " |", "|---|" + "---:|" * len(outcomes)]
    for kind in sorted(tally.counts):
        counter = tally.counts[kind]
        rows.append(f"| {kind} | " + " | ".join(str(counter[o]) for o in outcomes) + " |")
    rows.append("| total | " + " | ".join(str(total[o]) for o in outcomes) + " |")
    return rows


def recovery_rows(chaos: Chaos) -> list[str]:
    rows = ["| chaos action | times | all READY again after (s): median, max |",
            "|---|---:|---:|"]
    for action, times in sorted(chaos.actions.items()):
        seconds = sorted(chaos.recoveries.get(action, []))
        shown = (f"{seconds[len(seconds) // 2]:.2f}, {seconds[-1]:.2f}" if seconds else "-")
        rows.append(f"| {action} | {times} | {shown} |")
    return rows


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]
