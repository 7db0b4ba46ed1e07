"""The report of ``grpc_options``: one row per option and concurrency (``Row``), its infer/s
and percentiles (the worst over a pair's processes, their rates summed), the ratio to the
``aio-protobuf`` baseline, the cores the servers and perf_analyzer used, and the versions of
the gRPC stacks measured.

Pure formatting of what was measured; it runs nothing.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass

from bench.performance import kserve as bench_kserve
from bench.performance.kserve import number
from bench.performance.perf_analyzer import Measurement

BASELINE = "aio-protobuf"


@dataclass(frozen=True)
class Row:
    option: str
    label: str  # "1", "8", "2×4"
    total_concurrency: int
    measurements: tuple[Measurement, ...]
    connections: str
    failure: str | None = None
    server_cores: float = 0.0
    client_cores: float = 0.0


def rate(measurement: Measurement) -> float | None:
    """infer/s, or the mean of the last three windows of a run that never settled."""
    if measurement.infer_per_s is not None:
        return measurement.infer_per_s
    if measurement.unstable and len(measurement.windows) >= 3:
        return sum(measurement.windows[-3:]) / 3
    return None


def row_rate(row: Row) -> float | None:
    rates = [rate(measurement) for measurement in row.measurements]
    if not rates or any(value is None for value in rates):
        return None
    return sum(value for value in rates if value is not None)


def worst(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else max(
        v for v in values if v is not None)


def results_table(rows: Sequence[Row]) -> str:
    baseline = {row.total_concurrency: row_rate(row) for row in rows
                if row.option == BASELINE and len(row.measurements) == 1}
    lines = []
    for row in rows:
        if row.failure:
            lines.append([row.option, row.label, row.failure, *[""] * 8])
            continue
        value = row_rate(row)
        settled = all(m.infer_per_s is not None for m in row.measurements)
        if value is None:
            cells = ["failed", "-", "-"]
        elif settled:
            cells = [number(value), number(worst([m.p50_us for m in row.measurements])),
                     number(worst([m.p99_us for m in row.measurements]))]
        else:
            cells = [f"~{number(value)}", "-", "-"]
        reference = baseline.get(row.total_concurrency)
        ratio = "-" if value is None or not reference else f"{value / reference:.2f}"
        cpu_us = "-" if not value else f"{row.server_cores / value * 1e6:.0f}"
        wobble = " ".join(bench_kserve.window_wobble(m) for m in row.measurements)
        lines.append([row.option, row.label, *cells, ratio, f"{row.server_cores:.2f}", cpu_us,
                      f"{row.client_cores:.2f}", row.connections, wobble])
    header = ["option", "c", "infer/s", "p50 µs", "p99 µs", f"×{BASELINE}", "srv cores",
              "srv µs/inf", "pa cores", "conns", "windows"]
    return bench_kserve.table(header, lines)


def versions(grpclib_version: str | None) -> str:
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "-"

    return (f"grpcio {version('grpcio')}, protobuf {version('protobuf')}, uvloop "
            f"{version('uvloop')}, grpclib {grpclib_version or '-'}")
