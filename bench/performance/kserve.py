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
import csv
import glob
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
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

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
MODEL = "simple"
PEER_FOLDER = ROOT / "bench" / ".peers" / "perf_analyzer"
TRITONCLIENT_VERSION = "2.48.0"
LIBB64 = Path("/usr/lib/x86_64-linux-gnu/libb64.so.0d")
PROTOCOLS = ("http", "grpc")
# perf_analyzer's own default is 10 %; on a shared 2-core machine the windows of a Python
# server wander more than that from one to the next, and the measurement never settles.
DEFAULT_STABILITY = 20
START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 10.0
# perf_analyzer's own overhead on top of its windows: start-up, warm-up, metadata calls.
PERF_ANALYZER_SLACK_SECS = 60.0
# Lines of perf_analyzer's output that mean the numbers are not to be trusted.
TROUBLE_MARKERS = ("error", "failed", "unstable", "not stable", "warning")
# With -v perf_analyzer prints one line per measurement window, and the server's own
# breakdown of a request (from the statistics endpoint) once the measurement is stable.
WINDOW_LINE = re.compile(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec")
SERVER_LINE = re.compile(r"Avg request latency: .*")
# apt-get's progress counter, one line per percent once split.
APT_PROGRESS = re.compile(r"^\(Reading database \.\.\. \d+%$")


@dataclass(frozen=True)
class PerfAnalyzer:
    binary: Path
    environment: dict[str, str]
    version: str


@dataclass(frozen=True)
class Measurement:
    protocol: str
    concurrency: int
    infer_per_s: float | None
    p50_us: float | None
    p99_us: float | None
    window_ms: int
    problem: str | None  # perf_analyzer's own words when it failed or was unstable
    unstable: bool = False  # it gave up because its windows never agreed
    windows: tuple[float, ...] = ()  # infer/s of each measurement window, in order
    server_breakdown: str | None = None


@dataclass(frozen=True)
class Baseline:
    calls_per_s: float
    p50_us: float


# ------------------------------------------------------------------------------ setup


def step(message: str) -> None:
    print(f"[setup] {message}", flush=True)


def run_shown(
    command: Sequence[str], environment: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a setup command, echoing it and its output, so a slow or failing step is visible."""
    step("$ " + " ".join(command))
    result = subprocess.run(command, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=environment, check=False,
                            timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if not APT_PROGRESS.match(line)]
    for line in lines[-15:]:
        print(f"    {line}", flush=True)
    return result


def ensure_libb64() -> None:
    if LIBB64.exists():
        step(f"{LIBB64} present")
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError(f"{LIBB64} is missing and there is no apt-get to install libb64-0d")
    step(f"{LIBB64} missing: installing libb64-0d")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "libb64-0d"]
    if run_shown(install, environment).returncode != 0:
        # A fresh image has no package lists yet.
        run_shown(["apt-get", "update"], environment)
        if run_shown(install, environment).returncode != 0:
            raise RuntimeError("apt-get could not install libb64-0d")
    if not LIBB64.exists():
        raise RuntimeError(f"libb64-0d installed but {LIBB64} is still missing")


def base_python() -> str:
    """The interpreter under this venv, so the peer venv shares nothing with the project's."""
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure_peer_venv() -> Path:
    python = PEER_FOLDER / "bin" / "python"
    binary = PEER_FOLDER / "bin" / "perf_analyzer"
    if not python.exists():
        step(f"creating venv {PEER_FOLDER.relative_to(ROOT)}")
        PEER_FOLDER.parent.mkdir(parents=True, exist_ok=True)
        if run_shown([base_python(), "-m", "venv", str(PEER_FOLDER)]).returncode != 0:
            raise RuntimeError("could not create the perf_analyzer venv")
    if not binary.exists() or not cuda_runtime_folders():
        step(f"installing tritonclient=={TRITONCLIENT_VERSION} and nvidia-cuda-runtime-cu12")
        pip = [str(python), "-m", "pip", "install", "--quiet",
               f"tritonclient=={TRITONCLIENT_VERSION}", "nvidia-cuda-runtime-cu12"]
        if run_shown(pip).returncode != 0:
            raise RuntimeError("pip could not install tritonclient into the perf_analyzer venv")
    else:
        step(f"perf_analyzer venv present ({PEER_FOLDER.relative_to(ROOT)})")
    if not binary.exists():
        raise RuntimeError(f"tritonclient=={TRITONCLIENT_VERSION} installed no {binary}")
    return binary


def cuda_runtime_folders() -> list[str]:
    pattern = str(PEER_FOLDER / "lib" / "python3*" / "site-packages" / "nvidia" / "cuda_runtime"
                  / "lib")
    return sorted(glob.glob(pattern))


def peer_environment() -> dict[str, str]:
    folders = cuda_runtime_folders()
    if not folders:
        raise RuntimeError("nvidia-cuda-runtime-cu12 is not installed in the perf_analyzer venv")
    inherited = os.environ.get("LD_LIBRARY_PATH")
    library_path = ":".join([*folders, *([inherited] if inherited else [])])
    return {**os.environ, "LD_LIBRARY_PATH": library_path}


def installed_version(binary: Path) -> str:
    """perf_analyzer has no --version: the wheel it came from names it."""
    python = binary.parent / "python"
    query = "import importlib.metadata as m; print(m.version('tritonclient'))"
    result = subprocess.run([str(python), "-c", query], capture_output=True, text=True,
                            check=False)
    return f"tritonclient {result.stdout.strip() or '?'}"


def check_runs(binary: Path, environment: dict[str, str]) -> None:
    """Run it without arguments (it prints usage): catches a missing shared library early."""
    result = subprocess.run([str(binary)], capture_output=True, text=True, env=environment,
                            check=False, timeout=30)
    output = result.stdout + result.stderr
    if "error while loading shared libraries" in output or "Usage" not in output:
        raise RuntimeError(f"perf_analyzer does not start:\n{output.strip()[-2000:]}")


def setup_perf_analyzer(skip: bool) -> PerfAnalyzer:
    binary = PEER_FOLDER / "bin" / "perf_analyzer"
    if skip:
        step("--skip-setup: using what is already in bench/.peers/perf_analyzer")
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: run once without --skip-setup")
    else:
        ensure_libb64()
        binary = ensure_peer_venv()
    environment = peer_environment()
    check_runs(binary, environment)
    version = installed_version(binary)
    step(f"perf_analyzer ready: {version}")
    return PerfAnalyzer(binary, environment, version)


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


# ------------------------------------------------------------------------------ perf_analyzer


def perf_analyzer_command(
    tool: PerfAnalyzer, url: str, protocol: str, concurrency: int, window_ms: int,
    args: argparse.Namespace, csv_path: Path, model: str = MODEL, extra: Sequence[str] = (),
) -> list[str]:
    return [
        str(tool.binary), "-m", model, "-u", url, "-i", protocol,
        "--concurrency-range", f"{concurrency}:{concurrency}",
        "-p", str(window_ms), "-s", str(args.stability), "-r", str(args.max_trials),
        "-f", str(csv_path), "-v", *extra,
    ]


def trouble_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines()
            if any(marker in line.lower() for marker in TROUBLE_MARKERS)]


def window_rates(output: str) -> tuple[float, ...]:
    return tuple(float(match) for match in WINDOW_LINE.findall(output))


def server_breakdown(output: str) -> str | None:
    match = SERVER_LINE.search(output)
    return match.group(0).strip() if match else None


def spread(windows: Sequence[float]) -> str:
    return " ".join(f"{rate:,.0f}" for rate in windows)


def parse_csv(csv_path: Path) -> tuple[float, float, float]:
    """Inferences/Second and the p50/p99 latency columns (µs) of the one concurrency row."""
    with csv_path.open(newline="") as source:
        rows = list(csv.DictReader(source))
    if len(rows) != 1:
        raise ValueError(f"expected one row in {csv_path.name}, found {len(rows)}")
    row = rows[0]
    return (float(row["Inferences/Second"]), float(row["p50 latency"]),
            float(row["p99 latency"]))


def measure(
    tool: PerfAnalyzer, server: serving.Server, protocol: str, concurrency: int,
    args: argparse.Namespace, folder: Path, *, model: str = MODEL, extra: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> Measurement:
    """One perf_analyzer run; when its windows never agree, again with windows twice as long,
    as perf_analyzer itself advises (a longer window averages out the machine's hiccups).
    ``extra`` options go to perf_analyzer, ``prefix`` before it (``taskset -c 0``, say)."""
    window_ms = args.window_ms
    options = {"model": model, "extra": extra, "prefix": prefix}
    measurement = run_perf_analyzer(tool, server, protocol, concurrency, window_ms, args, folder,
                                    **options)
    for _ in range(args.retries):
        if not measurement.unstable:
            break
        window_ms *= 2
        print(f"  not stable: again with {window_ms} ms windows", flush=True)
        measurement = run_perf_analyzer(tool, server, protocol, concurrency, window_ms, args,
                                        folder, **options)
    return measurement


def run_perf_analyzer(
    tool: PerfAnalyzer, server: serving.Server, protocol: str, concurrency: int,
    window_ms: int, args: argparse.Namespace, folder: Path, *, model: str = MODEL,
    extra: Sequence[str] = (), prefix: Sequence[str] = (),
) -> Measurement:
    csv_path = folder / f"{protocol}-c{concurrency}-{window_ms}ms.csv"
    command = perf_analyzer_command(tool, server.address(protocol), protocol, concurrency,
                                    window_ms, args, csv_path, model, extra)
    print(f"\n$ {' '.join(prefix)}{' ' if prefix else ''}perf_analyzer {' '.join(command[1:])}",
          flush=True)
    command = [*prefix, *command]
    limit = window_ms / 1000 * args.max_trials + PERF_ANALYZER_SLACK_SECS
    try:
        result = subprocess.run(command, env=tool.environment, capture_output=True, text=True,
                                timeout=limit, check=False)
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout if isinstance(expired.stdout, str) else ""
        problem = f"timed out after {limit:g} s\n{partial}"
        return failed(Measurement(protocol, concurrency, None, None, None, window_ms, problem))
    output = (result.stdout + result.stderr).strip()
    if args.verbose:
        print(indent(output), flush=True)
    windows = window_rates(output)
    if windows:
        print(f"  windows (infer/s): {spread(windows)}", flush=True)
    if result.returncode != 0 or not csv_path.exists():
        # Instability is the machine's; anything else is a server bug, reported in full.
        unstable = "stable measurement" in output and "error" not in output.lower()
        detail = "\n".join(trouble_lines(output)) if unstable else output
        return failed(Measurement(protocol, concurrency, None, None, None, window_ms,
                                  f"exit code {result.returncode}\n{detail}", unstable, windows))
    infer_per_s, p50_us, p99_us = parse_csv(csv_path)
    trouble = trouble_lines(output)
    warnings = "\n".join(trouble) if trouble else None
    breakdown = server_breakdown(output)
    print(f"  {infer_per_s:,.0f} infer/s, p50 {p50_us:,.0f} µs, p99 {p99_us:,.0f} µs"
          + (f"\n  server: {breakdown}" if breakdown else "")
          + (f"\n  perf_analyzer said:\n{indent(warnings)}" if warnings else ""), flush=True)
    return Measurement(protocol, concurrency, infer_per_s, p50_us, p99_us, window_ms, warnings,
                       False, windows, breakdown)


def failed(measurement: Measurement) -> Measurement:
    print(f"  perf_analyzer failed:\n{indent(measurement.problem or '')}", flush=True)
    return measurement


def indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


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
    """Plain columns: the first left-aligned, numbers right-aligned."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


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
