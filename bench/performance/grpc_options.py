"""How fast a Python gRPC server can answer perf_analyzer's ``simple`` at all, one way of
building it at a time: the options for inferd's KServe gRPC frontend, measured on floors.

Each option is a *floor*: a server that implements just enough of KServe v2's
``inference.GRPCInferenceService`` for ``perf_analyzer -m simple -i grpc`` (ServerLive,
ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig, ModelStatistics and
ModelInfer) and answers ModelInfer with one fixed response (two INT32[1,16] outputs), no
inference: what the gRPC stack alone costs, the ceiling a frontend built on it cannot pass.
The options:

* ``aio-protobuf``: grpc.aio with tritonclient's generated servicer and protobuf objects,
  exactly ``/work/shared/bench-floor/echo_grpc.py`` (uvloop as the event loop, as the floor and
  ``inferd serve`` both run). The baseline every ratio is taken against.
* ``aio-raw``: grpc.aio with a generic handler (``grpc.method_handlers_generic_handler`` of
  ``grpc.unary_unary_rpc_method_handler`` without (de)serializers, the way inferd's frontend
  registers its tensor RPCs): ModelInfer gets the request's bytes and returns prebuilt bytes,
  no protobuf object per message. uvloop.
* ``aio-raw-asyncio``: the same on asyncio's own event loop: what uvloop is worth to grpc.aio.
* ``aio-raw-ort``: ``aio-raw`` whose ModelInfer also runs ``simple``'s ONNX graph once on the
  loop (an onnxruntime session of one intra-op thread, as inferd runs it), which releases the
  GIL for the run; ``aio-raw-numpy``: the same sums in numpy, which keeps it. Against
  ``aio-raw`` they say what one inline run costs a grpc.aio server, and whether the GIL's
  hand-off to grpc's poller thread while the run lets it go is what makes it cost more than
  the run.
* ``sync-threads-1``, ``sync-threads-4``: grpc's classic threaded server,
  ``grpc.server(ThreadPoolExecutor(N))``, with the same raw handlers (plain functions).
* ``reuseport-2``: two processes, each ``aio-raw`` with ``("grpc.so_reuseport", 1)``, bound
  to the same port; the kernel spreads *connections* (not requests) over them.
* ``grpclib``: the pure-Python asyncio gRPC implementation ``grpclib`` (0.4.9, installed with
  ``pip --target`` into ``bench/.peers/grpclib``, git-ignored; never into the project's venv)
  with a codec that passes bytes through, on uvloop.

Each option is started as a subprocess of this script (``--serve KIND PORT``), waited for
(bounded: its ``READY`` line, then ModelReady over gRPC) and stopped (SIGTERM, bounded, then
SIGKILL) before the next one starts. Each point is one ``perf_analyzer`` run (the project's
``bench.performance.kserve`` runs and parses it): a closed loop of C synchronous requests of
batch 1,
windows of ``--window-ms`` until the last three agree within ``--stability`` percent, at most
``--max-trials`` windows. Every option is measured at each ``--concurrency`` (1 and 8); the
``--pairs`` options also with two perf_analyzer clients of ``--pair-concurrency`` (4) each,
started together, their windows fixed at three (stability 100 %) so both measure at the same
time. While each run goes on, a thread counts the established TCP connections to the server's
port (``/proc/net/tcp``), and which server process holds each (``/proc/PID/fd``); the CPU time
the server processes (``/proc/PID/stat``, all threads) and perf_analyzer (this process's waited
children) used over the run is read before and after it.

Reading the table: one row per option and point. ``c`` is perf_analyzer's concurrency, ``2×4``
two clients of 4. ``infer/s`` is perf_analyzer's throughput (for two clients, their sum),
``p50 µs`` and ``p99 µs`` its client-side percentiles (for two clients, the worse of the two).
``×aio-protobuf`` is infer/s over the baseline's at the same total concurrency (``2×4`` against
8). ``srv cores`` and ``pa cores`` are the cores the servers and perf_analyzer kept busy on
average over the run (the machine has ``os.cpu_count()``; whatever else runs takes the rest);
``srv µs/inf`` is the servers' CPU time per inference (srv cores over infer/s), the cost that
stays comparable when the client, not the server, is what saturates the machine. ``conns`` is
the most connections seen to the port during the run, split per process (``3 = 2+1``) where
there are several: SO_REUSEPORT spreads connections, not requests, so it can only spread as
many as the client opens (tritonclient's C++ gRPC client, which perf_analyzer uses, shares one
channel among up to ``TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT`` (6) of its client objects:
two connections at concurrency 8, one at 4), and which process a connection lands on is the
kernel's hash of its addresses, so two connections may well both land on one. ``windows``
says how far the three windows perf_analyzer accepted strayed from their mean. A value
prefixed ``~`` comes from a run whose windows never agreed (the mean of its last three
windows, no percentiles). Client and servers share the machine's cores, not pinned; the load
average printed before and after says how busy the machine was. Compare only numbers from one
run, and run it twice.

    .venv/bin/python -m bench.performance.grpc_options [--only aio-raw,grpclib] [--window-ms 2500]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.common import serving
from bench.performance import kserve as bench_kserve
from bench.performance import perf_analyzer
from bench.performance.grpc_floors import (
    KINDS,
    MODEL,
    READY,
    serve,
)
from bench.performance.grpc_meters import (
    ConnectionSampler,
    CpuMeter,
)
from bench.performance.grpc_report import (
    Row,
    results_table,
    row_rate,
    versions,
)
from bench.performance.kserve import load_average
from bench.performance.perf_analyzer import PerfAnalyzer, step

ROOT = bench_kserve.ROOT
GRPCLIB_FOLDER = ROOT / "bench" / ".peers" / "grpclib"
GRPCLIB = "grpclib==0.4.9"
START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 10.0
PIP_TIMEOUT_SECS = 300.0
# Each perf_analyzer run costs at most its windows plus its own start-up and warm-up.
RUN_OVERHEAD_SECS = 8.0


@dataclass(frozen=True)
class Option:
    name: str
    kind: str  # what ``--serve`` starts
    processes: int = 1


OPTIONS = (
    Option("aio-protobuf", "aio-protobuf"),
    Option("aio-raw", "aio-raw"),
    Option("aio-raw-asyncio", "aio-raw-asyncio"),
    Option("aio-raw-ort", "aio-raw-ort"),
    Option("aio-raw-numpy", "aio-raw-numpy"),
    Option("sync-threads-1", "sync-threads-1"),
    Option("sync-threads-4", "sync-threads-4"),
    Option("reuseport-2", "aio-raw", processes=2),
    Option("grpclib", "grpclib"),
)
DEFAULT_PAIRS = ("aio-raw", "reuseport-2")


# ------------------------------------------------------------------------------ setup


def setup_grpclib(skip: bool) -> str | None:
    """grpclib's version in bench/.peers/grpclib, installing it there first; None if absent."""
    if not (GRPCLIB_FOLDER / "grpclib").exists():
        if skip:
            step(f"--skip-setup: no {GRPCLIB_FOLDER.relative_to(ROOT)}, grpclib not measured")
            return None
        step(f"installing {GRPCLIB} into {GRPCLIB_FOLDER.relative_to(ROOT)} (pip --target)")
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                   "--target", str(GRPCLIB_FOLDER), GRPCLIB]
        try:
            result = perf_analyzer.run_shown(command, timeout=PIP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            step("pip timed out: grpclib not measured")
            return None
        if result.returncode != 0:
            step("pip failed: grpclib not measured")
            return None
    found = sorted(GRPCLIB_FOLDER.glob("grpclib-*.dist-info"))
    return found[-1].name.removeprefix("grpclib-").removesuffix(".dist-info") if found else "?"


# ------------------------------------------------------------------------------ measuring


def server_command(kind: str, port: int, reuseport: bool) -> list[str]:
    command = [sys.executable, "-m", "bench.performance.grpc_options", "--serve", kind, str(port)]
    return [*command, "--reuseport"] if reuseport else command


def server_environment(kind: str) -> dict[str, str]:
    """This process's environment; for grpclib's server, with the folder grpclib was
    installed into (never the project's venv) first on ``PYTHONPATH``."""
    if kind != "grpclib":
        return dict(os.environ)
    paths = [str(GRPCLIB_FOLDER), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def announced(log: Path) -> Callable[[], bool]:
    """Whether the server writing ``log`` has printed its ready line."""
    return lambda: READY in log.read_text(errors="replace")


@contextmanager
def running(option: Option, folder: Path) -> Iterator[list[serving.Server]]:
    """The option's server processes on one free port, ready; stopped however the block
    ends."""
    port = serving.free_port()
    reuseport = option.processes > 1
    servers: list[serving.Server] = []
    try:
        for index in range(option.processes):
            log = folder / f"{option.name}-{index}.log"
            server = serving.start_process(server_command(option.kind, port, reuseport),
                                           {"grpc": port}, log=log, cwd=ROOT,
                                           environment=server_environment(option.kind),
                                           name=f"{option.name} server {index}")
            servers.append(server)
            serving.wait_ready(server, announced(log), timeout=START_TIMEOUT_SECS)
        serving.wait_model_ready(servers[0], MODEL, via="grpc", timeout=START_TIMEOUT_SECS)
        for server in servers:
            print(f"  {server.log_tail().strip().splitlines()[-1]}", flush=True)
        yield servers
    finally:
        for server in servers:
            serving.stop_process(server.process, grace=STOP_TIMEOUT_SECS)


def measure_single(
    tool: PerfAnalyzer, option: Option, servers: Sequence[serving.Server], concurrency: int,
    args: argparse.Namespace, folder: Path,
) -> Row:
    pids = [server.process.pid for server in servers]
    sampler, meter = ConnectionSampler(servers[0].ports["grpc"], pids), CpuMeter(pids)
    with sampler.sampling(), meter.metering():
        measurement = perf_analyzer.measure(tool, servers[0], "grpc", concurrency, args, folder)
    return Row(option.name, str(concurrency), concurrency, (measurement,), sampler.describe(),
               server_cores=meter.server_cores, client_cores=meter.client_cores)


def measure_pair(
    tool: PerfAnalyzer, option: Option, servers: Sequence[serving.Server],
    args: argparse.Namespace, folder: Path,
) -> Row:
    """Two perf_analyzer clients started together, each of ``--pair-concurrency``, with
    three windows each (stability 100 %) so that both measure while the other runs."""
    concurrency = args.pair_concurrency
    pair_args = argparse.Namespace(**{**vars(args), "stability": 100, "max_trials": 3})
    folders = [folder / f"client-{index}" for index in (0, 1)]
    for client_folder in folders:
        client_folder.mkdir()
    pids = [server.process.pid for server in servers]
    sampler, meter = ConnectionSampler(servers[0].ports["grpc"], pids), CpuMeter(pids)
    with sampler.sampling(), meter.metering(), ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(perf_analyzer.run_perf_analyzer, tool, servers[0], "grpc",
                               concurrency, args.window_ms, pair_args, client_folder)
                   for client_folder in folders]
        measurements = tuple(future.result() for future in futures)
    return Row(option.name, f"2×{concurrency}", 2 * concurrency, measurements,
               sampler.describe(), server_cores=meter.server_cores,
               client_cores=meter.client_cores)


def within_budget(started: float, args: argparse.Namespace) -> bool:
    windows: float = args.window_ms / 1000 * args.max_trials * (1 + args.retries)
    return time.monotonic() - started + windows + RUN_OVERHEAD_SECS <= float(args.seconds)


def measure_option(
    tool: PerfAnalyzer, option: Option, args: argparse.Namespace, folder: Path, started: float,
) -> list[Row]:
    print(f"\n=== {option.name} ({option.processes} × {option.kind})", flush=True)
    option_folder = folder / option.name
    option_folder.mkdir()
    rows: list[Row] = []
    points: list[int | None] = [*args.concurrency, *([None] if option.name in args.pairs else [])]
    try:
        with running(option, option_folder) as servers:
            for concurrency in points:
                label = f"2×{args.pair_concurrency}" if concurrency is None else str(concurrency)
                if not within_budget(started, args):
                    print(f"  --seconds {args.seconds:g} spent: {label} skipped", flush=True)
                    rows.append(Row(option.name, label, 0, (), "-", "skipped (time)"))
                    continue
                point_folder = option_folder / f"point-{len(rows)}"
                point_folder.mkdir()
                if concurrency is None:
                    rows.append(measure_pair(tool, option, servers, args, point_folder))
                else:
                    rows.append(measure_single(tool, option, servers, concurrency, args,
                                               point_folder))
                for server in servers:
                    if server.process.poll() is not None:
                        raise RuntimeError(f"{server.name} died:\n{server.log_tail()}")
    except (RuntimeError, TimeoutError) as error:
        print(f"  {option.name} failed: {error}", flush=True)
        rows.append(Row(option.name, "-", 0, (), "-", str(error).splitlines()[0]))
    return rows


# ------------------------------------------------------------------------------ main


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [option.name for option in OPTIONS]
    parser = argparse.ArgumentParser(
        description="perf_analyzer against floor gRPC servers for simple, one way of building "
                    "a Python KServe gRPC frontend at a time.")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"),
                        help=f"internal: run one floor server ({', '.join(KINDS)})")
    parser.add_argument("--reuseport", action="store_true",
                        help="internal, with --serve: bind with SO_REUSEPORT")
    parser.add_argument("--only", default=",".join(names),
                        help=f"options, comma-separated (default all: {','.join(names)})")
    parser.add_argument("--pairs", default=",".join(DEFAULT_PAIRS),
                        help="options also measured with two clients at once, comma-separated "
                             f"(default {','.join(DEFAULT_PAIRS)}; empty for none)")
    parser.add_argument("--concurrency", default="1,8",
                        help="perf_analyzer concurrency, comma-separated (default 1,8)")
    parser.add_argument("--pair-concurrency", type=int, default=4,
                        help="each of the two clients' concurrency (default 4)")
    bench_kserve.add_window_options(parser, window_ms=2500, max_trials=6, retries=0)
    parser.add_argument("--seconds", type=float, default=360.0,
                        help="time budget of the whole run: a point that might not fit in "
                             "what is left is skipped (default 360)")
    parser.add_argument("--skip-setup", action="store_true",
                        help="no apt-get or pip: use what is already in bench/.peers")
    parser.add_argument("--verbose", action="store_true",
                        help="print perf_analyzer's whole output")
    args = parser.parse_args(argv)
    if args.serve:
        if args.serve[0] not in KINDS:
            parser.error(f"--serve: unknown kind {args.serve[0]!r}")
        return args
    args.only = bench_kserve.parse_list(args.only)
    args.pairs = bench_kserve.parse_list(args.pairs)
    for name, values in (("--only", args.only), ("--pairs", args.pairs)):
        if unknown := set(values) - set(names):
            parser.error(f"{name}: unknown {', '.join(sorted(unknown))}")
    try:
        args.concurrency = [int(value) for value in bench_kserve.parse_list(args.concurrency)]
    except ValueError:
        parser.error(f"--concurrency takes integers, got {args.concurrency!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), args.reuseport)
        return 0
    signal.signal(signal.SIGTERM, bench_kserve.exit_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    rows: list[Row] = []
    try:
        tool = perf_analyzer.setup_perf_analyzer(args.skip_setup)
        grpclib_version = setup_grpclib(args.skip_setup) if "grpclib" in args.only else None
        chosen = [option for option in OPTIONS if option.name in args.only
                  and (option.name != "grpclib" or grpclib_version)]
        print(f"machine: {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable, not "
              f"pinned; {versions(grpclib_version)}; perf_analyzer from {tool.version}",
              flush=True)
        before = load_average()
        print(f"load average before: {before}", flush=True)
        with serving.temporary_folder("bench-grpc-options-") as folder:
            for option in chosen:
                rows += measure_option(tool, option, args, folder, started)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    minutes, seconds = divmod(time.monotonic() - started, 60)
    print(f"\n{MODEL} over gRPC, fixed response; perf_analyzer windows of {args.window_ms} ms, "
          f"stability {args.stability} %, at most {args.max_trials} windows (pairs: three "
          f"windows each); {versions(grpclib_version)}")
    print(f"load average before: {before}; after: {load_average()}; took {minutes:.0f} min "
          f"{seconds:.0f} s")
    print(results_table(rows))
    return 1 if any(row.failure or row_rate(row) is None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
