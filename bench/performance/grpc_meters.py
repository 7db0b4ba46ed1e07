"""What ``grpc_options`` reads beside perf_analyzer's figures while a floor serves: the TCP
connections established to its port, sampled (``ConnectionSampler``: how perf_analyzer's
connections spread over the processes of a ``SO_REUSEPORT`` option), and the CPU seconds of
its processes and of perf_analyzer (``CpuMeter``).

Reads ``/proc`` only; it starts nothing and changes nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_SECS = 0.25


# ------------------------------------------------------------------------------ connections


def established(port: int, pids: Sequence[int]) -> tuple[int, list[int]]:
    """Established TCP connections whose local port is ``port`` (the server's side of each),
    and how many of them each of ``pids`` holds."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "01" and \
                    int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    held = []
    for pid in pids:
        count = 0
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            descriptors = []
        for descriptor in descriptors:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                count += 1
        held.append(count)
    return len(inodes), held


@dataclass
class ConnectionSampler:
    """The most established connections to ``port`` seen while the block runs."""

    port: int
    pids: Sequence[int]
    peak: int = 0
    split: list[int] = field(default_factory=list)

    @contextmanager
    def sampling(self) -> Iterator[ConnectionSampler]:
        done = threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_SECS):
                total, held = established(self.port, self.pids)
                if total > self.peak:
                    self.peak, self.split = total, held

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join(5)

    def describe(self) -> str:
        if len(self.split) > 1:
            return f"{self.peak} = {'+'.join(str(count) for count in self.split)}"
        return str(self.peak)


# ------------------------------------------------------------------------------ CPU


def process_cpu_secs(pid: int) -> float:
    """User and system time of a process, all its threads, so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_secs() -> float:
    """CPU time of this process's children that have been waited for: perf_analyzer."""
    times = os.times()
    return times.children_user + times.children_system


@dataclass
class CpuMeter:
    """Cores the servers and perf_analyzer used while the block ran (wall-clock averages)."""

    pids: Sequence[int]
    server_cores: float = 0.0
    client_cores: float = 0.0

    @contextmanager
    def metering(self) -> Iterator[CpuMeter]:
        wall = time.monotonic()
        server = sum(process_cpu_secs(pid) for pid in self.pids)
        client = children_cpu_secs()
        try:
            yield self
        finally:
            elapsed = max(time.monotonic() - wall, 1e-9)
            used = sum(process_cpu_secs(pid) for pid in self.pids) - server
            self.server_cores = used / elapsed
            self.client_cores = (children_cpu_secs() - client) / elapsed
