"""What ``simple`` costs over KServe HTTP and gRPC, measured by Triton's own load generator.

The script sets up ``perf_analyzer`` in a venv of its own (``bench/.peers/perf_analyzer``; the
binary ships inside the ``tritonclient`` wheel and needs Debian's ``libb64-0d`` and the CUDA
runtime wheel's library directory on ``LD_LIBRARY_PATH``), starts ``inferd serve`` on free
loopback ports with only ``simple`` loaded, and runs ``perf_analyzer`` once per protocol and
concurrency: a closed loop of C synchronous requests in flight, batch 1, measured in windows of
``--window-ms`` until the last three windows agree within ``--stability`` percent (at most
``--max-trials`` windows). Client, server and executor share the machine's cores, not pinned.

In the same run, before the server starts, the same ``model.onnx`` is called in this process
through onnxruntime with one intra-op thread (the server's default ``--intra-op-threads 1``)
and batch-1 inputs, in a loop, for ``--baseline-seconds``: the model alone, with no network,
no serialization and no scheduling.

Reading the table: ``infer/s`` is perf_analyzer's throughput, ``p50 µs`` and ``p99 µs`` its
client-side latency percentiles over the stable windows. ``windows`` says how far the three
windows perf_analyzer accepted strayed from their mean. ``×onnxruntime`` is infer/s divided by
the in-process call rate: 1 would mean serving cost nothing on top of the model, 0.01 means
each served inference took the machine a hundred times the model's own time. At concurrency 8
the server may merge requests into one batch only if the model's config enables dynamic
batching (``simple``'s does not), so there the ratio shows how well requests overlap. Under
each run the script also prints every window's rate and the server's own breakdown of a
request (from the statistics endpoint, as perf_analyzer reports it). Numbers on a busy machine
move; ratios measured in the same run move less; the load average printed with the table says
how much else was running.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from types import FrameType

import numpy as np
import onnxruntime

from bench.common import serving
from bench.performance.perf_analyzer import (
    MODEL,
    ROOT,
    Measurement,
    PerfAnalyzer,
    measure,
    setup_perf_analyzer,
)
from inferd.kernel.sdk.table import format_table

REPOSITORY = ROOT / "model_repository"
PROTOCOLS = ("http", "grpc")
# perf_analyzer's own default is 10 %; on a shared 2-core machine the windows of a Python
# server wander more than that from one to the next, and the measurement never settles.
DEFAULT_STABILITY = 20
START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 10.0


@dataclass(frozen=True)
class Baseline:
    calls_per_s: float
    p50_us: float


# ------------------------------------------------------------------------------ baseline


def measure_baseline(model_path: Path, seconds: float, batch: int = 1) -> Baseline:
    """``session.run`` on random inputs of ``batch`` rows in a loop, the way the server's
    instance opens its session. Symbolic dimensions other than the first are not supported."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    session = onnxruntime.InferenceSession(str(model_path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {tensor.name: random_input(rng, tensor.type, (batch, *tensor.shape[1:]))
             for tensor in session.get_inputs()}
    for _ in range(100):
        session.run(None, feeds)
    durations: list[int] = []
    start = time.perf_counter_ns()
    deadline = start + int(seconds * 1e9)
    now = start
    while now < deadline:
        session.run(None, feeds)
        finished = time.perf_counter_ns()
        durations.append(finished - now)
        now = finished
    elapsed = (now - start) / 1e9
    return Baseline(len(durations) / elapsed, median(durations) / 1e3)


def random_input(
    rng: np.random.Generator, onnx_type: str, shape: tuple[int, ...]
) -> np.ndarray:
    """Random values for an input of onnxruntime's ``tensor(int32)`` or ``tensor(float)``."""
    if onnx_type == "tensor(int32)":
        return rng.integers(-100, 100, size=shape, dtype=np.int32)
    if onnx_type == "tensor(float)":
        return rng.standard_normal(shape).astype(np.float32)
    raise ValueError(f"no random inputs for {onnx_type}")


# ------------------------------------------------------------------------------ report


def machine_facts(tool: PerfAnalyzer) -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return (f"machine   {platform.machine()}, {os.cpu_count()} CPUs ({usable} usable, not "
            f"pinned), {platform.system()} {platform.release()}\n"
            f"software  Python {platform.python_version()}, onnxruntime "
            f"{onnxruntime.__version__}, perf_analyzer from {tool.version}")


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain columns: the first left-aligned, the numbers after it right-aligned."""
    return format_table(header, rows, right=range(1, len(header)))


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def window_wobble(measurement: Measurement) -> str:
    """How far the last three windows (those perf_analyzer judged) stray from their mean,
    and how long they were."""
    last = measurement.windows[-3:]
    if len(last) < 3:
        return "-"
    mean = sum(last) / len(last)
    wobble = max(abs(rate - mean) for rate in last) / mean * 100
    return f"±{wobble:.0f}% of {measurement.window_ms / 1000:g} s"


def results_table(measurements: Sequence[Measurement], baseline: Baseline) -> str:
    rows = [["onnxruntime in-process", "1", number(baseline.calls_per_s),
             number(baseline.p50_us), "-", "-", "1"]]
    for measurement in measurements:
        ratio = ("-" if measurement.infer_per_s is None
                 else f"{measurement.infer_per_s / baseline.calls_per_s:.3g}")
        note = " (failed)" if measurement.infer_per_s is None else (
            " (see warnings)" if measurement.problem else "")
        rows.append([f"{measurement.protocol}{note}", str(measurement.concurrency),
                     number(measurement.infer_per_s), number(measurement.p50_us),
                     number(measurement.p99_us), window_wobble(measurement), ratio])
    header = ["protocol", "concurrency", "infer/s", "p50 µs", "p99 µs", "windows",
              "×onnxruntime"]
    return table(header, rows)


# ------------------------------------------------------------------------------ main


def add_window_options(
    parser: argparse.ArgumentParser, *, window_ms: int, max_trials: int, retries: int
) -> None:
    """The flags of how every perf_analyzer run of a bench measures: window, stability,
    windows per run, runs more when one never settles."""
    parser.add_argument("--window-ms", type=int, default=window_ms,
                        help=f"perf_analyzer measurement window (default {window_ms})")
    parser.add_argument("--stability", type=int, default=DEFAULT_STABILITY,
                        help="perf_analyzer -s: the last three windows must agree within this "
                             f"%% (default {DEFAULT_STABILITY})")
    parser.add_argument("--max-trials", type=int, default=max_trials,
                        help=f"perf_analyzer -r: most windows per run (default {max_trials})")
    parser.add_argument("--retries", type=int, default=retries,
                        help=f"runs more, windows doubled, when one never settles "
                             f"(default {retries})")


def parse_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="perf_analyzer against inferd serve over KServe HTTP and gRPC, next to "
                    "the same model called in-process through onnxruntime.")
    add_window_options(parser, window_ms=3000, max_trials=10, retries=1)
    parser.add_argument("--concurrency", default="1,8",
                        help="requests in flight, comma-separated (default 1,8)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help="http, grpc or both (default http,grpc)")
    parser.add_argument("--baseline-seconds", type=float, default=3.0,
                        help="how long to call onnxruntime in-process (default 3)")
    parser.add_argument("--skip-setup", action="store_true",
                        help="no apt-get or pip: use the perf_analyzer already in bench/.peers")
    parser.add_argument("--server-args", type=shlex.split, default=[],
                        help="more options for inferd serve, one string "
                             "(e.g. --server-args='--executor-inline true')")
    parser.add_argument("--verbose", action="store_true",
                        help="print perf_analyzer's whole output")
    args = parser.parse_args(argv)
    try:
        args.concurrency = [int(value) for value in parse_list(args.concurrency)]
    except ValueError:
        parser.error(f"--concurrency takes integers, got {args.concurrency!r}")
    args.protocols = parse_list(args.protocols)
    if unknown := set(args.protocols) - set(PROTOCOLS):
        parser.error(f"unknown protocols: {', '.join(sorted(unknown))}")
    return args


def exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into an exception so the finally blocks stop the server.
    print("terminated", file=sys.stderr)
    raise SystemExit(128 + signum)


def measure_all(
    tool: PerfAnalyzer, args: argparse.Namespace, folder: Path
) -> list[Measurement]:
    measurements = []
    flags = ["--model-control-mode", "explicit", "--load-model", MODEL, *args.server_args]
    with serving.running(REPOSITORY, *flags, log=folder / "server.log", model=MODEL, via="http",
                         cwd=ROOT, timeout=START_TIMEOUT_SECS, grace=STOP_TIMEOUT_SECS) as server:
        print(f"inferd serve ready: HTTP {server.address('http')}, "
              f"gRPC {server.address('grpc')}", flush=True)
        for protocol in args.protocols:
            for concurrency in args.concurrency:
                measurements.append(measure(tool, server, protocol, concurrency, args, folder))
        if server.process.poll() is not None:
            print(f"inferd serve died during the run:\n{server.log_tail()}", flush=True)
    return measurements


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    # A shell starts background jobs with SIGINT ignored; Ctrl-C must still stop the server.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        tool = setup_perf_analyzer(args.skip_setup)
        print(machine_facts(tool), flush=True)
        print(f"load average before: {load_average()}", flush=True)
        baseline = measure_baseline(REPOSITORY / MODEL / "1" / "model.onnx",
                                    args.baseline_seconds)
        print(f"onnxruntime in-process, batch 1, 1 thread: {baseline.calls_per_s:,.0f} calls/s, "
              f"p50 {baseline.p50_us:,.1f} µs", flush=True)
        with serving.temporary_folder("bench-kserve-") as folder:
            measurements = measure_all(tool, args, folder)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"\n{MODEL} over KServe, perf_analyzer windows of {args.window_ms} ms, "
          f"stability {args.stability} %, at most {args.max_trials} windows "
          f"(then up to {args.retries} more run(s), windows doubled, when unstable); "
          f"load average after: {load_average()}")
    print(results_table(measurements, baseline))
    return 1 if any(measurement.problem for measurement in measurements) else 0


if __name__ == "__main__":
    sys.exit(main())
