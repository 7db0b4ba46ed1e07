"""The wire bench's report: the machine it ran on, then per payload size the p50 latency of
each path (``floor``, ``kernel``, ``server``) with its ratio to the floor, and the
throughput of each at every concurrency.

Pure formatting of the cells measured; it runs nothing.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Sequence

import numpy as np
import zmq
import zmq.asyncio

from bench.performance.kserve import table
from bench.performance.wire_samples import (
    Cell,
    size_label,
)

PATHS = ("floor", "kernel", "server")


def machine_facts() -> list[str]:
    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return [
        (f"machine   {platform.machine()}, {os.cpu_count()} CPUs ({usable} usable), "
         f"load average {load}, {platform.system()} {platform.release()}"),
        (f"software  Python {platform.python_version()}, onnxruntime {version('onnxruntime')}, "
         f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}), numpy {np.__version__}, "
         f"uvloop {version('uvloop')}"),
    ]


def microseconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def ratio(value: float | None, floor: float | None) -> str:
    if value is None or floor is None or floor == 0:
        return "-"
    return f"{value / floor:.1f}×"


def rate(per_second: float | None, size: int) -> str:
    if per_second is None:
        return "-"
    return f"{per_second:,.0f} ({per_second * size / 1e6:,.1f})"


def latency_table(results: dict[str, dict[int, Cell]], sizes: Sequence[int]) -> str:
    rows = []
    for size in sizes:
        p50 = {path: (cell.p50_us if (cell := results.get(path, {}).get(size)) else None)
               for path in PATHS}
        rows.append([size_label(size), *(microseconds(p50[path]) for path in PATHS),
                     ratio(p50["kernel"], p50["floor"]), ratio(p50["server"], p50["floor"])])
    header = ["size", "floor p50 µs", "kernel p50 µs", "server p50 µs",
              "kernel ×floor", "server ×floor"]
    return table(header, rows)


def throughput_table(
    results: dict[str, dict[int, Cell]], sizes: Sequence[int], concurrency: int
) -> str:
    rows = []
    for size in sizes:
        for in_flight in (1, concurrency) if concurrency else (1,):
            per_s: dict[str, float | None] = {}
            for path in PATHS:
                cell = results.get(path, {}).get(size)
                per_s[path] = (None if cell is None else
                               cell.sequential_per_s if in_flight == 1 else cell.concurrent_per_s)
            # Cost per request is 1 / throughput, so the floor's rate goes on top.
            rows.append([size_label(size), str(in_flight),
                         *(rate(per_s[path], size) for path in PATHS),
                         ratio(per_s["floor"], per_s["kernel"]),
                         ratio(per_s["floor"], per_s["server"])])
    header = ["size", "in flight", "floor req/s (MB/s)", "kernel req/s (MB/s)",
              "server req/s (MB/s)", "kernel ×floor", "server ×floor"]
    return table(header, rows)
