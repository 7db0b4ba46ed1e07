"""The peers bench's report: the results table (inferd, the Triton twin and the floor side
by side), the CPU-per-inference table, the before/after table of ``--before-python``, and the
verdicts on issue 36's targets, each PASS or FAIL with the ratio it was judged on.

Pure formatting of numbers ``peers`` measured; it runs nothing and reads no file.
"""

from __future__ import annotations

import argparse

from bench.performance import kserve as bench_kserve
from bench.performance import server_cpu
from bench.performance.kserve import Baseline, number
from bench.performance.peer_setup import (
    IDENTITY,
    IDENTITY_SHM,
    MLP,
    MLP_INLINE,
    MODEL_POINTS,
    OTHER_PLACEMENT,
    PLACEMENT_POINTS,
    POINTS,
    SIMPLE,
    SIMPLE_INLINE,
    Costs,
    Key,
    Point,
    chosen,
)
from bench.performance.perf_analyzer import Measurement


def rate(measurement: Measurement | None) -> float | None:
    """infer/s, or the mean of the last three windows of a run that never settled."""
    if measurement is None:
        return None
    if measurement.infer_per_s is not None:
        return measurement.infer_per_s
    if measurement.unstable and len(measurement.windows) >= 3:
        return sum(measurement.windows[-3:]) / 3
    return None


def shm_refused(measurement: Measurement | None) -> bool:
    """Whether perf_analyzer failed because registering its shared memory regions did (it
    registers them while it sets up its inputs, before the first request)."""
    if measurement is None or measurement.infer_per_s is not None:
        return False
    return "unable to init infer data manager" in (measurement.problem or "").lower()


def cells(measurement: Measurement | None, point: Point) -> list[str]:
    if measurement is None:
        return ["", "", ""]
    if measurement.infer_per_s is not None:
        return [number(measurement.infer_per_s), number(measurement.p50_us),
                number(measurement.p99_us)]
    if point is IDENTITY_SHM and shm_refused(measurement):
        return ["n/a (not supported)", "", ""]
    estimate = rate(measurement)
    return [f"~{number(estimate)}", "-", "-"] if estimate is not None else ["failed", "-", "-"]


def ratio(numerator: float | None, denominator: float | None) -> str:
    value = quotient(numerator, denominator)
    return "-" if value is None else readable(value)


def readable(value: float) -> str:
    """Two decimals, or two significant digits for a ratio too small for them."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def best_mlp_rows(baselines: dict[tuple[str, int], Baseline]) -> float | None:
    rows = [baseline.calls_per_s * batch for (model, batch), baseline in baselines.items()
            if model == "mlp"]
    return max(rows) if rows else None


def results_table(
    results: dict[Key, Measurement], baselines: dict[tuple[str, int], Baseline],
    args: argparse.Namespace,
) -> str:
    header = ["point", "protocol", "c", "inferd infer/s", "p50 µs", "p99 µs",
              "Triton twin infer/s", "p50 µs", "p99 µs", "floor infer/s", "p50 µs", "p99 µs",
              "×twin", "×ort best"]
    rows = []
    for (model, batch), baseline in baselines.items():
        rows.append([model, "in-process", f"b={batch}", number(baseline.calls_per_s * batch),
                     f"{baseline.p50_us:,.1f}", *[""] * 9])
    best = best_mlp_rows(baselines)
    for point in chosen(POINTS, args):
        for protocol in args.protocols:
            for concurrency in point.concurrency:
                inferd = results.get(("inferd", point.key, protocol, concurrency))
                triton = results.get(("triton", triton_key(point), protocol, concurrency))
                floor = results.get(("floor", point.key, protocol, concurrency))
                if inferd is None and triton is None and floor is None:
                    continue
                rows.append([point.label, protocol, str(concurrency), *cells(inferd, point),
                             *cells(triton, point), *cells(floor, point),
                             ratio(rate(inferd), rate(triton)),
                             ratio(rate(inferd), best) if point.model == MLP.model else ""])
    return bench_kserve.table(header, rows)


def cpu_table(costs: Costs, args: argparse.Namespace) -> str:
    header = ["point", "protocol", "c", "inferd", "busiest", "Triton twin", "busiest",
              "inferd/twin", "busiest/busiest"]
    rows = []

    def us(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    for point in chosen(POINTS, args):
        for protocol in args.protocols:
            for concurrency in point.concurrency:
                inferd = costs.get(("inferd", point.key, protocol, concurrency))
                triton = costs.get(("triton", triton_key(point), protocol, concurrency))
                if inferd is None and triton is None:
                    continue
                empty = server_cpu.CpuPerInference()
                inferd, triton = inferd or empty, triton or empty
                rows.append([point.label, protocol, str(concurrency), us(inferd.total_us),
                             f"{us(inferd.busiest_us)} {inferd.busiest}".strip(),
                             us(triton.total_us),
                             f"{us(triton.busiest_us)} {triton.busiest}".strip(),
                             ratio(inferd.total_us, triton.total_us),
                             ratio(inferd.busiest_us, triton.busiest_us)])
    return bench_kserve.table(header, rows)


def before_after_table(results: dict[Key, Measurement], costs: Costs,
                       args: argparse.Namespace) -> str:
    header = ["point", "protocol", "c", "infer/s before", "after", "after/before",
              "CPU µs/inf before", "after", "after/before", "p50 µs before", "after"]
    rows = []
    for point in chosen(MODEL_POINTS, args):
        for protocol in args.protocols:
            for concurrency in point.concurrency:
                before = results.get(("before", point.key, protocol, concurrency))
                after = results.get(("inferd", point.key, protocol, concurrency))
                if before is None and after is None:
                    continue
                cpu = [costs.get((server, point.key, protocol, concurrency))
                       for server in ("before", "inferd")]
                cpu_us = [None if cost is None else cost.total_us for cost in cpu]
                p50 = [None if m is None or m.p50_us is None else number(m.p50_us)
                       for m in (before, after)]
                rows.append([point.label, protocol, str(concurrency),
                             number(rate(before)), number(rate(after)),
                             ratio(rate(after), rate(before)),
                             *(f"{us:,.0f}" if us is not None else "-" for us in cpu_us),
                             ratio(cpu_us[1], cpu_us[0]), *(value or "-" for value in p50)])
    return bench_kserve.table(header, rows)


def triton_key(point: Point) -> str:
    """The Triton point an inferd point is compared with (Triton has one placement)."""
    return PLACEMENT_POINTS.get(point, point).key


def judged(label: str, value: float | None, target: float, at_most: bool = False) -> str:
    if value is None:
        return f"  n/a   {label}: not measured"
    passed = value <= target if at_most else value >= target
    sign = "≤" if at_most else "≥"
    return (f"  {'PASS' if passed else 'FAIL'}  {label}: {readable(value)} "
            f"(target {sign} {target:g})")


def quotient(numerator: float | None, denominator: float | None) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


# Native Triton's CPU per inference over its python-backend twin's, measured side by side
# once (issue 36: native onnxruntime backend and twins, one run, perf_analyzer 2.51). The
# native backend is not a package, so a twin figure times this factor stands in for it.
NATIVE_OVER_TWIN = {("simple", "http"): 0.41, ("simple", "grpc"): 0.46,
                    ("mlp", "http"): 0.94, ("mlp", "grpc"): 0.79}


def verdicts(
    results: dict[Key, Measurement], costs: Costs, baselines: dict[tuple[str, int], Baseline],
    args: argparse.Namespace,
) -> list[str]:
    """Issue 36's targets, each judged on this run's numbers.

    "twin" is Triton serving python-backend twins, the only Triton this bench runs; the
    native-parity lines use ``NATIVE_OVER_TWIN``."""
    def get(server: str, point: Point, protocol: str, concurrency: int) -> Measurement | None:
        return results.get((server, point.key, protocol, concurrency))

    def cpu(server: str, point: Point, protocol: str, concurrency: int) -> float | None:
        cost = costs.get((server, point.key, protocol, concurrency))
        return None if cost is None else cost.total_us

    def latency(server: str, protocol: str) -> float | None:
        measurement = get(server, SIMPLE, protocol, 1)
        return None if measurement is None else measurement.p50_us

    cpu_targets = {(SIMPLE, "http"): 0.55, (SIMPLE, "grpc"): 0.46,
                   (MLP, "http"): 0.85, (MLP, "grpc"): 0.85}
    p50_targets = {"http": 1.2, "grpc": 0.8}
    placement_targets = {SIMPLE_INLINE: 1.5, MLP_INLINE: 1.2}
    lines = []
    for protocol in args.protocols:
        name = protocol.upper() if protocol == "http" else "gRPC"
        for point, concurrency in ((SIMPLE, 8), (MLP, 32)):
            share = quotient(cpu("inferd", point, protocol, concurrency),
                             cpu("triton", point, protocol, concurrency))
            label = f"(1) {point.label} {name} c={concurrency} server CPU per inference"
            lines.append(judged(f"{label} inferd/twin", share,
                                cpu_targets[point, protocol], at_most=True))
            lines.append(judged(f"{label} inferd/twin, native parity", share,
                                NATIVE_OVER_TWIN[point.model, protocol], at_most=True))
        lines.append(judged(f"(2) simple {name} c=1 p50 inferd/twin",
                            quotient(latency("inferd", protocol), latency("triton", protocol)),
                            p50_targets[protocol], at_most=True))
        for placed, default in PLACEMENT_POINTS.items():
            concurrency = placed.concurrency[0]
            lines.append(judged(f"(3) {default.label} {name} c={concurrency} server CPU per "
                                f"inference, {' '.join(OTHER_PLACEMENT)}/default",
                                quotient(cpu("inferd", placed, protocol, concurrency),
                                         cpu("inferd", default, protocol, concurrency)),
                                placement_targets[placed], at_most=True))
        for point in (IDENTITY, IDENTITY_SHM):  # nothing slower than before the change
            lines.append(judged(f"(4) {point.label} {name} c=1 inferd after/before infer/s",
                                quotient(rate(get("inferd", point, protocol, 1)),
                                         rate(get("before", point, protocol, 1))), 1.0))
    # By target, then protocol: every line names its target as "(N)" after the verdict.
    lines.sort(key=lambda line: line.split("(", 1)[1][0])
    best = best_mlp_rows(baselines)
    share = [f"mlp {protocol} c=32 inferd/onnxruntime's best batch: "
             f"{ratio(rate(get('inferd', MLP, protocol, 32)), best)}"
             for protocol in args.protocols]
    return ["targets (issue 36; twin = Triton 2.51 serving python-backend twins):", *lines,
            *share]

