"""inferd next to real Triton and to the Python frontend floor, on the points of issues 24 and 36.

The script sets up, in ``bench/.peers/`` (git-ignored): ``perf_analyzer`` (as
``kserve.py`` does), real Triton from the ``nvidia-pytriton==0.7.0`` wheel in a venv of
its own (``bench/.peers/triton``: tritonserver 2.51 with only the python backend), the
models measured (``bench/.peers/inferd-models``: ``simple`` and ``identity_fp32`` as in
``model_repository/``, and ``mlp`` as the issue measures it, FP32 x[1024] through four Gemm
1024x1024, written by ``model_repository/generate.py``), and a twin repository
(``bench/.peers/triton-models``) generated from it: for ``simple``, ``mlp`` and
``identity_fp32`` the same ``config.pbtxt`` with ``backend: "python"``
for the platform, inputs and outputs written out where inferd auto-completes them from the
graph, and one instance on the CPU (inferd's default), next to a copy of the same
``model.onnx`` and ``bench/performance/peer_models/onnx_twin.py`` as ``model.py``, which runs
the graph through onnxruntime with one intra-op thread and merges a dynamic batch into one run. The
floors are ``/work/shared/bench-floor``'s two echo servers (raw ASGI on uvicorn for HTTP,
grpc.aio for gRPC): a fixed ``simple`` response, no inference, what the Python frontend stack
alone costs.

One server runs at a time, in turn: inferd (``simple``, ``mlp`` and ``identity_fp32``
loaded) and, with ``--before-python``, beside it the inferd of another interpreter (another
checkout's venv: the code before a change), the two measured in turn point by point; inferd
again with ``--cpu-executor process`` (``simple`` at concurrency 8 and ``mlp`` at 32: the
other placement, judged against the default); Triton; the HTTP floor; the gRPC floor.
Each point is one ``perf_analyzer`` run: a closed loop of C synchronous requests of batch 1,
windows of ``--window-ms`` until the last three agree within ``--stability`` percent, at
most ``--max-trials`` windows, then up to
``--retries`` more runs with windows twice as long. The points: ``simple`` at concurrency 1
and 8; ``mlp`` at 32 (its config enables dynamic batching, so the servers may merge
requests); ``identity_fp32`` with a 1 MiB FP32 input (``--shape INPUT0:262144``) at 1, and
the same with ``--shared-memory system`` (inputs and outputs in system shared memory regions
the client registers). Before any server starts, ``simple`` at batch 1 and ``mlp`` at batch
1, 8 and 64 are called in this process through onnxruntime (one intra-op thread) for
``--baseline-seconds`` each: the model alone.

Around every perf_analyzer run on inferd and Triton, ``server_cpu`` reads the CPU time of
every process of the server's tree and the server's own count of successful inferences: the
second table gives the CPU per inference of the whole server and of its busiest process (the
figure to steer by: it moves far less with a busy machine than infer/s does).

Reading the table: one row per point, protocol and concurrency, with perf_analyzer's
infer/s, p50 and p99 (client side, µs) for inferd, Triton and the floor (the floor only
serves ``simple``). "Triton" here is always Triton 2.51 serving python-backend twins of the
graphs (its native onnxruntime backend is not a package; ``NATIVE_OVER_TWIN`` carries a twin
figure over to it). ``×twin`` is inferd's infer/s over the twin's; ``×ort best`` (mlp only) is
inferd's infer/s (rows/s, as requests are batch 1) over in-process onnxruntime's best rows/s
over the three batch sizes: the share of the model's own peak that survives serving. The
``in-process`` rows put onnxruntime's rows/s and the p50 of one call in the inferd columns.
A value prefixed ``~`` comes from a run whose windows never agreed (the mean of its last
three windows, no percentiles); ``n/a (not supported)`` means inferd refused the shared
memory registration. Below the table, the issue's targets, each PASS or FAIL with the ratio
it was judged on. Client and server share the machine's cores (``--pin`` separates them
with taskset); the load average printed before and after says how busy the machine was.
Compare only numbers from one run.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import onnxruntime

from bench.common import serving
from bench.performance import kserve as bench_kserve
from bench.performance import perf_analyzer, server_cpu
from bench.performance.kserve import Baseline, load_average
from bench.performance.peer_report import (
    before_after_table,
    cpu_table,
    rate,
    results_table,
    shm_refused,
    verdicts,
)
from bench.performance.peer_servers import (
    running_inferd,
    running_peer,
    running_triton,
    server_version,
)
from bench.performance.peer_setup import (
    FLOOR_FOLDER,
    IDENTITY_SHM,
    MLP,
    MLP_BATCHES,
    MODEL_POINTS,
    OTHER_PLACEMENT,
    PLACEMENT_POINTS,
    POINTS,
    PROTOCOLS,
    REPOSITORY,
    SERVERS,
    SIMPLE,
    Costs,
    Key,
    Point,
    Triton,
    chosen,
    generate_bench_models,
    generate_twins,
    setup_triton,
)
from bench.performance.perf_analyzer import Measurement, PerfAnalyzer

# ------------------------------------------------------------------------------ measuring


def measure_points(
    tool: PerfAnalyzer, servers: Sequence[tuple[str, serving.Server]], points: Sequence[Point],
    protocols: Sequence[str], args: argparse.Namespace, folder: Path,
    results: dict[Key, Measurement], costs: Costs,
) -> None:
    """Each point on each of ``servers`` (label, server) in turn, the order reversed from one
    point to the next, so that two servers compared meet the machine's drift alike."""
    alive = list(servers)
    turn = 0
    for point in points:
        for protocol in protocols:
            for concurrency in point.concurrency:
                order = alive if turn % 2 == 0 else alive[::-1]
                turn += 1
                for server_label, server in order:
                    if server.process.poll() is not None:
                        # Its remaining points stay empty in the table; the others still run.
                        print(f"\n{server.name} died during the run:\n{server.log_tail()}",
                              flush=True)
                        alive.remove((server_label, server))
                        continue
                    measure_point(tool, server_label, server, point, protocol, concurrency,
                                  args, folder, results, costs)


def measure_point(
    tool: PerfAnalyzer, server_label: str, server: serving.Server, point: Point,
    protocol: str, concurrency: int, args: argparse.Namespace, folder: Path,
    results: dict[Key, Measurement], costs: Costs,
) -> None:
    print(f"\n[{server_label}] {point.label}, {protocol}, concurrency {concurrency}",
          flush=True)
    place = folder / f"{server_label}-{point.key}"
    place.mkdir(exist_ok=True)
    key = (server_label, point.key, protocol, concurrency)
    with metered(server, server_label, point.model) as cost:
        results[key] = perf_analyzer.measure(
            tool, server, protocol, concurrency, args, place, model=point.model,
            extra=point.extra, prefix=args.client_prefix)
    if cost is not None:
        costs[key] = cost
        print(f"  {cost.describe()}", flush=True)
    if point is IDENTITY_SHM and results[key].infer_per_s is None:
        remove_leaked_regions()


@contextmanager
def metered(
    server: serving.Server, server_label: str, model: str
) -> Iterator[server_cpu.CpuPerInference | None]:
    """The server's CPU per inference over the block; None for the floor, which keeps no
    statistics to count its inferences by."""
    if server_label == "floor":
        yield None
        return
    with server_cpu.metering(server.process.pid, server.address("http"), model) as cost:
        yield cost


def remove_leaked_regions(max_age_secs: float = 600.0) -> None:
    """perf_analyzer names its system shared memory regions after the tensors (``/INPUT0``)
    and may leave them in /dev/shm when a run fails (when the server refuses to register
    them, say): remove those it left in this run."""
    for name in ("INPUT0", "OUTPUT0"):
        region = Path("/dev/shm") / name
        try:
            if time.time() - region.stat().st_mtime < max_age_secs:
                region.unlink()
                print(f"  removed {region}, left by perf_analyzer", flush=True)
        except FileNotFoundError:
            pass


def measure_servers(
    tool: PerfAnalyzer, triton: Triton | None, args: argparse.Namespace, folder: Path,
) -> tuple[dict[Key, Measurement], Costs, dict[str, str]]:
    results: dict[Key, Measurement] = {}
    costs: Costs = {}
    versions: dict[str, str] = {}
    if "inferd" in args.only:
        if chosen(MODEL_POINTS, args):
            with contextlib.ExitStack() as stack:
                print("\n=== inferd serve", flush=True)
                servers = [("inferd", stack.enter_context(running_inferd(args, folder)))]
                if args.before_python:
                    # Both serve at once, measured point by point in turn: a change's
                    # before and after a few seconds apart, not minutes.
                    print(f"\n=== inferd serve, before: {args.before_python}", flush=True)
                    servers.append(("before", stack.enter_context(
                        running_inferd(args, folder, python=args.before_python))))
                measure_points(tool, servers, chosen(MODEL_POINTS, args), args.protocols,
                               args, folder, results, costs)
        if chosen(list(PLACEMENT_POINTS), args):
            print(f"\n=== inferd serve {' '.join(OTHER_PLACEMENT)}", flush=True)
            with running_inferd(args, folder, *OTHER_PLACEMENT) as server:
                measure_points(tool, [("inferd", server)], chosen(list(PLACEMENT_POINTS), args),
                               args.protocols, args, folder, results, costs)
    if triton is not None and chosen(MODEL_POINTS, args):
        print("\n=== tritonserver (python backend twins)", flush=True)
        with running_triton(triton, args, folder) as server:
            versions["triton"] = server_version(server)
            print(f"tritonserver {versions['triton']} ready: HTTP {server.address('http')}, "
                  f"gRPC {server.address('grpc')}", flush=True)
            measure_points(tool, [("triton", server)], chosen(MODEL_POINTS, args),
                           args.protocols, args, folder, results, costs)
    if "floor" in args.only and SIMPLE.key in args.points:
        floors = {"http": "echo_asgi.py", "grpc": "echo_grpc.py"}
        for protocol in args.protocols:
            script = FLOOR_FOLDER / floors[protocol]
            if not script.exists():
                print(f"\n{script} is missing: no {protocol} floor", flush=True)
                continue
            print(f"\n=== floor: {script.name}", flush=True)
            port = serving.free_port()
            command = [*args.server_prefix, sys.executable, str(script), str(port)]
            with running_peer(command, {protocol: port}, name=script.name, models=["simple"],
                              via=protocol, log=folder / f"floor-{protocol}.log") as server:
                measure_points(tool, [("floor", server)], [SIMPLE], [protocol], args, folder,
                               results, costs)
    return results, costs, versions


def measure_in_process(args: argparse.Namespace) -> dict[tuple[str, int], Baseline]:
    baselines = {}
    for model, batches in (("simple", (1,)), ("mlp", MLP_BATCHES)):
        if model == "mlp" and MLP.key not in args.points:
            continue
        for batch in batches:
            baseline = bench_kserve.measure_baseline(REPOSITORY / model / "1" / "model.onnx",
                                                     args.baseline_seconds, batch)
            baselines[(model, batch)] = baseline
            print(f"onnxruntime in-process, {model}, batch {batch}, 1 thread: "
                  f"{baseline.calls_per_s * batch:,.0f} rows/s, p50 {baseline.p50_us:,.1f} µs "
                  "per call", flush=True)
    return baselines


# ------------------------------------------------------------------------------ main


def parse_cpus(text: str) -> str:
    """A taskset CPU list (``0``, ``0,1``, ``0-1``), checked against this machine."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    if not cpus <= os.sched_getaffinity(0):
        raise ValueError(f"CPUs {text} are not all usable here")
    return text


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="perf_analyzer against inferd, real Triton (python-backend twins) and the "
                    "Python frontend floor, on issue 9's points, next to in-process "
                    "onnxruntime.")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 s windows, at most 4, no retries, 0.5 s in-process")
    parser.add_argument("--only", default=",".join(SERVERS),
                        help=f"servers, comma-separated (default {','.join(SERVERS)})")
    parser.add_argument("--points", default=",".join(point.key for point in POINTS),
                        help="points, comma-separated (default all: "
                             f"{','.join(point.key for point in POINTS)})")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help="http, grpc or both (default http,grpc)")
    bench_kserve.add_window_options(parser, window_ms=2500, max_trials=6, retries=1)
    parser.add_argument("--baseline-seconds", type=float, default=2.0,
                        help="in-process onnxruntime time per model and batch (default 2)")
    parser.add_argument("--skip-setup", action="store_true",
                        help="no apt-get or pip: use what is already in bench/.peers")
    parser.add_argument("--pin", metavar="SERVER:CLIENT",
                        help="taskset CPU lists for the servers and perf_analyzer, e.g. 1:0 "
                             "(default: not pinned)")
    parser.add_argument("--server-args", type=shlex.split, default=[],
                        help="more options for inferd serve, one string")
    parser.add_argument("--before-python", default="", metavar="PYTHON",
                        help="also measure the inferd of this interpreter (another checkout's "
                             "venv: the code before a change) on the same points, and print "
                             "before/after")
    parser.add_argument("--before-args", type=shlex.split, default=None,
                        help="the before server's options instead of --server-args, one "
                             "string: with --before-python this venv's own interpreter, "
                             "two settings of one checkout side by side")
    parser.add_argument("--verbose", action="store_true",
                        help="print perf_analyzer's whole output")
    args = parser.parse_args(argv)
    if args.quick:
        args.window_ms, args.max_trials, args.retries = 1000, 4, 0
        args.baseline_seconds = min(args.baseline_seconds, 0.5)
    args.only = bench_kserve.parse_list(args.only)
    args.points = bench_kserve.parse_list(args.points)
    args.protocols = bench_kserve.parse_list(args.protocols)
    for name, values, allowed in (("--only", args.only, SERVERS),
                                  ("--points", args.points, [p.key for p in POINTS]),
                                  ("--protocols", args.protocols, PROTOCOLS)):
        if unknown := set(values) - set(allowed):
            parser.error(f"{name}: unknown {', '.join(sorted(unknown))}")
    args.server_prefix, args.client_prefix = [], []
    if args.pin:
        server_cpus, _, client_cpus = args.pin.partition(":")
        try:
            args.server_prefix = ["taskset", "-c", parse_cpus(server_cpus)]
            args.client_prefix = ["taskset", "-c", parse_cpus(client_cpus)]
        except ValueError as error:
            parser.error(f"--pin {args.pin}: {error}")
    return args


def pinning(args: argparse.Namespace) -> str:
    if not args.pin:
        return "not pinned (client and servers share every core)"
    return (f"pinned with taskset: servers on CPUs {args.server_prefix[-1]}, perf_analyzer on "
            f"{args.client_prefix[-1]}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    signal.signal(signal.SIGTERM, bench_kserve.exit_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    try:
        tool = perf_analyzer.setup_perf_analyzer(args.skip_setup)
        generate_bench_models()
        triton = None
        if "triton" in args.only:
            triton = setup_triton(args.skip_setup)
            generate_twins()
        print(f"machine: {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable; "
              f"{pinning(args)}; onnxruntime {onnxruntime.__version__}; perf_analyzer from "
              f"{tool.version}", flush=True)
        before = load_average()
        print(f"load average before: {before}", flush=True)
        baselines = measure_in_process(args)
        with serving.temporary_folder("bench-peers-") as folder:
            results, costs, versions = measure_servers(tool, triton, args, folder)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    minutes, seconds = divmod(time.monotonic() - started, 60)
    print(f"\nperf_analyzer windows of {args.window_ms} ms, stability {args.stability} %, at "
          f"most {args.max_trials} windows (then {args.retries} more run(s), windows doubled, "
          f"when unstable); batch 1; Triton {versions.get('triton', '-')} python backend; "
          f"{pinning(args)}")
    print(f"load average before: {before}; after: {load_average()}; took {minutes:.0f} min "
          f"{seconds:.0f} s")
    print(results_table(results, baselines, args))
    print("\nserver CPU per inference (µs; every process of the server, then its busiest):")
    print(cpu_table(costs, args))
    if args.before_python:
        print("\ninferd before and after (the before server: --before-python):")
        print(before_after_table(results, costs, args))
    print("\n".join(verdicts(results, costs, baselines, args)))
    failed = [key for key, measurement in results.items()
              if rate(measurement) is None and not shm_refused(measurement)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
