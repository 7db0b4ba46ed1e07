"""Throughput of 1, 2 and 3 inferd replicas behind nginx on this machine, next to one replica
asked directly (what the proxy costs).

Three ``inferd serve`` replicas start over the example repository with only ``simple`` loaded
(EXPLICIT mode, the server's default one intra-op thread), and three real nginx (Debian's,
foreground, generated configs: ``bench/common/replica_nginx.py``) in front of the first 1, 2
and 3 of them, each balancing HTTP and gRPC. For each protocol and concurrency the load generator
measures, back to back, replica 0 directly (no nginx), then each nginx, so the machine's
other load of the moment weighs on all four alike; ``--rounds`` repeats the whole sequence
and the table shows the median. Replicas and nginx not measured in a row sit idle.

The load generator is perf_analyzer when it is available (set up as ``bench/performance/kserve.py``
does, in ``bench/.peers/perf_analyzer``), else (or with ``--load python``) the harness's own
closed loop of tritonclient threads, which costs far more CPU per request. With perf_analyzer
behind nginx over several replicas, the statistics endpoints are sent to replica 0 (its
window-to-window counts must only rise); its server-side breakdown is then replica 0's only.

Reading the table: ``infer/s`` per protocol and concurrency; ``×1 replica`` divides by the
1-replica-behind-nginx figure of the same protocol and concurrency; ``×direct`` by the direct
figure; "(unstable)" marks a figure whose windows never agreed within ``--stability`` (the
mean of its last three windows). The last column (and a line under each measurement while it
runs) says where the CPU time went during the measurement (psutil, per process tree), in
percent of one core: each replica (server and executors), nginx, the load generator, and
everything else the machine ran meanwhile (other users: a busy machine shows here). On a
2-core machine the replicas, nginx and the load generator share the same two cores, so more
replicas cannot add throughput once the cores are busy: the ratio says how much of the
machine one replica leaves idle, not how the design scales on more cores.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.common import replica_harness, replica_nginx, steady_load
from bench.performance import kserve as bench_kserve
from bench.performance import perf_analyzer

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
MODEL = "simple"
PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class Row:
    setup: str  # "direct" or "nginx"
    replicas: int
    protocol: str
    concurrency: int
    infer_per_s: float | None
    problem: str | None
    cpu: str  # where the CPU went during the measurement: replicas / nginx / load / others
    rounds: str = ""  # every round's infer/s, when there were several


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_kserve.add_window_options(parser, window_ms=3000, max_trials=6, retries=1)
    parser.add_argument("--replicas", type=int, default=3, help="most replicas (default 3)")
    parser.add_argument("--concurrency", default="4,16",
                        help="requests in flight, comma-separated (default 4,16)")
    parser.add_argument("--protocols", default="http,grpc", help="http, grpc or both")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat every measurement this many times and report the median "
                             "(default 1)")
    parser.add_argument("--nginx-workers", type=int, default=1,
                        help="nginx worker_processes (default 1)")
    parser.add_argument("--load", choices=("auto", "perf_analyzer", "python"), default="auto",
                        help="load generator: perf_analyzer when available (auto), or the "
                             "harness's tritonclient threads")
    parser.add_argument("--python-seconds", type=float, default=6.0,
                        help="measurement length with --load python (default 6)")
    parser.add_argument("--skip-setup", action="store_true",
                        help="no apt-get or pip: use the perf_analyzer already in bench/.peers")
    parser.add_argument("--verbose", action="store_true", help="print perf_analyzer's output")
    args = parser.parse_args(argv)
    args.concurrency = [int(value) for value in bench_kserve.parse_list(args.concurrency)]
    args.protocols = bench_kserve.parse_list(args.protocols)
    if unknown := set(args.protocols) - set(PROTOCOLS):
        parser.error(f"unknown protocols: {', '.join(sorted(unknown))}")
    return args


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------ CPU accounting


def tree_cpu(pid: int) -> float:
    """User+system CPU seconds of a process and its live descendants."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def own_cpu() -> float:
    """CPU seconds of this process and of the children it has waited for: the load
    generator (the Python driver's threads, or perf_analyzer once its run has ended)."""
    times = psutil.Process().cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def machine_cpu() -> float:
    times = psutil.cpu_times()
    return float(times.user + times.system + getattr(times, "nice", 0.0)
                 + getattr(times, "irq", 0.0) + getattr(times, "softirq", 0.0))


class CpuMeter:
    """CPU used by the replicas, nginx, the load generator and everything else on the
    machine (other users' work) over one measurement, in percent of one core (200 % = both
    of 2 cores busy)."""

    def __init__(self, replicas: Sequence[replica_harness.Replica], nginx_pid: int | None):
        self.replicas = replicas
        self.nginx_pid = nginx_pid

    def __enter__(self) -> CpuMeter:
        self.start = time.monotonic()
        self.replica_start = [tree_cpu(r.process.pid) for r in self.replicas]
        self.nginx_start = tree_cpu(self.nginx_pid) if self.nginx_pid else 0.0
        self.own_start = own_cpu()
        self.machine_start = machine_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        replicas = [tree_cpu(r.process.pid) - s
                    for r, s in zip(self.replicas, self.replica_start, strict=True)]
        nginx = (tree_cpu(self.nginx_pid) - self.nginx_start) if self.nginx_pid else 0.0
        generator = own_cpu() - self.own_start
        machine = machine_cpu() - self.machine_start
        others = max(machine - sum(replicas) - nginx - generator, 0.0)

        def percent(used: float) -> str:
            return f"{100 * used / elapsed:.0f}"

        shares = "+".join(percent(used) for used in replicas)
        cores = 100 * (os.cpu_count() or 1)
        self.compact = (f"{shares} / {percent(nginx)} / {percent(generator)} / "
                        f"{percent(others)} of {cores}")
        self.summary = (f"CPU: replicas {shares} %, nginx {percent(nginx)} %, load generator "
                        f"{percent(generator)} %, others {percent(others)} % of {cores} %")


# ------------------------------------------------------------------------------ measuring


Measure = Callable[[Any, str, int, Path], tuple[float | None, str | None]]


def perf_analyzer_measure(args: argparse.Namespace) -> tuple[Measure, str]:
    tool = perf_analyzer.setup_perf_analyzer(args.skip_setup)

    def measure(target: Any, protocol: str, concurrency: int,
                folder: Path) -> tuple[float | None, str | None]:
        result = perf_analyzer.measure(tool, target, protocol, concurrency, args, folder,
                                       model=MODEL)
        if result.infer_per_s is None and result.unstable and len(result.windows) >= 3:
            # The windows never agreed within --stability (a busy shared machine): their
            # last three's mean, marked as such, says more than no number.
            last = result.windows[-3:]
            mean = sum(last) / len(last)
            print(f"  unstable: the last three windows' mean, {mean:,.0f} infer/s", flush=True)
            return mean, f"unstable: {perf_analyzer.spread(result.windows)}"
        return result.infer_per_s, result.problem

    return measure, f"perf_analyzer from {tool.version}"


def python_measure(args: argparse.Namespace) -> tuple[Measure, str]:
    def measure(target: Any, protocol: str, concurrency: int,
                folder: Path) -> tuple[float | None, str | None]:
        workers = {"http_workers": 0, "grpc_workers": 0, f"{protocol}_workers": concurrency}
        with steady_load.SteadyLoad(target.address("http"), target.address("grpc"),
                                    model=MODEL, **workers) as load:
            time.sleep(1.0)  # warm-up: connections made, first requests out of the way
            mark, start = load.counts(), time.monotonic()
            time.sleep(args.python_seconds)
            counts, elapsed = load.since(mark), time.monotonic() - start
        rate = counts.total_successes / elapsed
        print(f"  {rate:,.0f} infer/s", flush=True)
        return rate, (counts.summary() if counts.failures else None)

    return measure, "the harness's tritonclient threads (Python)"


def choose_load(args: argparse.Namespace) -> tuple[Measure, str]:
    if args.load == "python":
        return python_measure(args)
    try:
        return perf_analyzer_measure(args)
    except Exception as error:  # noqa: BLE001 - auto falls back, and says why
        if args.load == "perf_analyzer":
            raise
        progress(f"perf_analyzer unavailable ({error}); using the harness's load driver")
        return python_measure(args)


def measure_row(
    measure: Measure, target: Any, setup: str, count: int, replicas: Sequence[Any],
    nginx_pid: int | None, protocol: str, concurrency: int, folder: Path,
) -> Row:
    progress(f"{setup}, {count} replica(s), {protocol}, concurrency {concurrency}")
    with CpuMeter(replicas, nginx_pid) as meter:
        rate, problem = measure(target, protocol, concurrency, folder)
    print(f"  {meter.summary}", flush=True)
    return Row(setup, count, protocol, concurrency, rate, problem, meter.compact)


def run(args: argparse.Namespace, measure: Measure, folder: Path) -> list[Row]:
    """Every setup is measured back to back for one protocol and concurrency (direct, then
    nginx over 1, 2, 3 replicas), so the machine's other load of the moment weighs on all of
    them alike; ``--rounds`` repeats the whole sequence."""
    flags = ["--model-control-mode=explicit", f"--load-model={MODEL}"]
    progress(f"starting {args.replicas} replicas over {REPOSITORY.relative_to(ROOT)}")
    replicas = replica_harness.start_replicas(args.replicas, REPOSITORY, *flags,
                                              folder=folder / "replicas", model=MODEL)
    rows: list[Row] = []
    proxies: list[replica_nginx.Nginx] = []
    try:
        progress("replicas ready: " + ", ".join(
            f"{r.index}: HTTP {r.http_url} gRPC {r.grpc_url}" for r in replicas))
        for count in range(1, args.replicas + 1):
            proxies.append(replica_nginx.start_nginx(
                folder / f"nginx-{count}", replicas[:count], workers=args.nginx_workers,
                statistics_from=0 if count > 1 else None))
            progress(f"nginx in front of {count} replica(s): HTTP {proxies[-1].http_url} "
                     f"gRPC {proxies[-1].grpc_url}")
        for round_number in range(1, args.rounds + 1):
            if args.rounds > 1:
                progress(f"round {round_number} of {args.rounds}")
            for protocol in args.protocols:
                for concurrency in args.concurrency:
                    rows.append(measure_row(measure, replicas[0], "direct", 1, replicas[:1],
                                            None, protocol, concurrency, folder))
                    for count, nginx in enumerate(proxies, start=1):
                        rows.append(measure_row(measure, nginx, "nginx", count,
                                                replicas[:count], nginx.process.pid,
                                                protocol, concurrency, folder))
        for replica in replicas:
            if replica.process.poll() is not None:
                print(f"replica {replica.index} died during the run:\n{replica.log_tail()}")
    finally:
        for nginx in proxies:
            nginx.stop()
        for replica in replicas:
            replica.stop()
    return rows


def combine(rows: Sequence[Row]) -> list[Row]:
    """One row per setup, protocol and concurrency: the median round (its CPU shares with
    it), every round's figure kept in ``rounds``."""
    groups: dict[tuple[str, int, str, int], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.setup, row.replicas, row.protocol, row.concurrency),
                          []).append(row)
    combined = []
    for group in groups.values():
        measured = sorted((r for r in group if r.infer_per_s is not None),
                          key=lambda r: r.infer_per_s or 0.0)
        chosen = measured[(len(measured) - 1) // 2] if measured else group[-1]
        problems = "; ".join(r.problem for r in group if r.problem) or None
        rounds = " ".join(bench_kserve.number(r.infer_per_s) for r in group)
        combined.append(Row(chosen.setup, chosen.replicas, chosen.protocol,
                            chosen.concurrency, chosen.infer_per_s, problems, chosen.cpu,
                            rounds))
    return combined


# ------------------------------------------------------------------------------ report


def results_table(rows: Sequence[Row]) -> str:
    def rate_of(setup: str, count: int, row: Row) -> float | None:
        for other in rows:
            if (other.setup, other.replicas, other.protocol, other.concurrency) == (
                    setup, count, row.protocol, row.concurrency):
                return other.infer_per_s
        return None

    def ratio(value: float | None, base: float | None) -> str:
        return "-" if value is None or not base else f"{value / base:.2f}"

    lines = []
    for row in sorted(rows, key=lambda r: (r.protocol, r.concurrency, r.setup != "direct",
                                           r.replicas)):
        label = "1 replica, direct" if row.setup == "direct" else f"{row.replicas} behind nginx"
        note = " (failed)" if row.infer_per_s is None else (
            " (unstable)" if row.problem and row.problem.startswith("unstable") else
            " (warnings)" if row.problem else "")
        lines.append([row.protocol, str(row.concurrency), label + note,
                      bench_kserve.number(row.infer_per_s),
                      ratio(row.infer_per_s, rate_of("nginx", 1, row)),
                      ratio(row.infer_per_s, rate_of("direct", 1, row)), row.cpu,
                      row.rounds])
    header = ["protocol", "concurrency", "setup", "infer/s", "×1 replica", "×direct",
              "CPU % replicas / nginx / load / others", "rounds"]
    return bench_kserve.table(header, lines)


LIMITS = """\
What limits scaling here: this machine has {cpus} CPU core(s), shared by every replica (its
server process and its onnxruntime executor), nginx and the load generator. `simple` costs
microseconds of model time; nearly all of a request's cost is CPU in the serving path (HTTP/
gRPC parsing, the kernel's actors, the executor hop), so one replica at concurrency >= 4
already keeps most of the cores busy (the CPU column: one replica, nginx and the load
generator together use most of the {total} %), and a second or third replica can only split
the same cores. nginx adds a hop (its CPU share, plus one more loopback round trip per
request), which the 'direct' rows price. On a busy machine ('others' well above 0) more
replicas also win a larger share of the CPU from the other work, which is not scaling
either. On a machine with more cores than one replica uses (or on separate machines, as in
a cluster) the replicas do not share CPU, and throughput grows with their count until the
load balancer or the network is the limit."""


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    signal.signal(signal.SIGTERM, bench_kserve.exit_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if replica_nginx.nginx_executable() is None:
        print("nginx is not installed: apt-get install -y nginx", file=sys.stderr)
        return 2
    try:
        measure, generator = choose_load(args)
        print(f"machine   {platform.machine()}, {os.cpu_count()} CPUs, not pinned; "
              f"load generator {generator}; nginx workers {args.nginx_workers}", flush=True)
        print(f"load average before: {bench_kserve.load_average()}", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-replicas-") as name:
            rows = combine(run(args, measure, Path(name)))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"\n{MODEL}, batch 1, through nginx over 1..{args.replicas} replicas and direct; "
          f"{args.rounds} round(s), median shown; "
          f"load average after: {bench_kserve.load_average()}")
    print(results_table(rows))
    print()
    print(LIMITS.format(cpus=os.cpu_count(), total=100 * (os.cpu_count() or 1)))
    return 1 if any(row.infer_per_s is None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
