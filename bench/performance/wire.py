"""What one inference costs on the kernel wire, next to a bare ZeroMQ echo of the same frames.

Three paths are measured in one run, for FP32 tensors of 64 B, 64 KiB and 4 MiB (``--sizes``):

``floor``
    A bare ZeroMQ echo. This process's DEALER sends, over ``ipc://``, exactly the frames
    ``wire.encode`` makes for an ``InferBatch`` carrying the tensor (encoded once, before the
    clock starts), and a child process's ROUTER sends them straight back; ``copy=False`` both
    ways, nothing decoded. It is what moving the bytes there and back costs: the floor.
``kernel``
    One kernel hop. This process's ``Router`` and hub ``ProcessLink`` ask a real executor
    process, started as the executor pool starts one, to run ``identity_fp32`` through
    onnxruntime: encode, send, decode, dispatch on the executor's loop, run the model in a
    worker thread, encode the result, send it back, decode it and resolve the ask.
``server``
    The whole server. ``inferd serve`` runs in a subprocess and the native ``Client``
    (``AsyncClient`` for the concurrent rows) asks it: client → zmq frontend → scheduler →
    executor process → back, so two process hops and the scheduler's queue.

Each (path, size) cell warms up, then runs round trips one at a time for ``--seconds``, then
with ``--concurrency`` requests in flight for as long again. The latency table gives the median
round trip. The throughput table gives requests per second and, in brackets, MB/s of tensor
payload (10^6 bytes per second, each way).

Reading the ratios: every ``×floor`` column is that path's cost per request divided by the
floor's (the median round trip, or the inverse of throughput), so 1.0 means free and larger
means overhead. At 64 B the ratio is the fixed cost per message (Python, msgpack, the event
loops, the worker thread); at 4 MiB it shows extra copies of the tensor. ``server`` crosses two
process hops, so its zero-copy ideal at 4 MiB is about 2×, not 1×; and the identity model
itself writes a new 4 MiB output, which the floor never does. With many 4 MiB messages in
flight the echo itself can slow down (each received frame is a fresh allocation, and on a small
machine both processes' main and zmq I/O threads share the cores), so a ratio below 1 there
says the floor degraded, not that the kernel beat it. The bench is a script, not a test:
numbers on a busy machine move, ratios measured in the same run move less.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

import anyio
import numpy as np
import zmq
import zmq.asyncio

from bench.common import serving
from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import EXECUTORS
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.runtime.process_link import ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols import wire
from inferd.protocols.client import AsyncClient, Client
from inferd.protocols.messages import (
    BatchResult,
    Envelope,
    ExecutorHello,
    Failure,
    InferBatch,
    InferRequest,
    InferResponse,
    LoadVersion,
    Message,
    Shutdown,
    Tensor,
    VersionLoaded,
)
from inferd.protocols.tensors import from_numpy

MODEL = "identity_fp32"
INPUT = "INPUT0"
OUTPUT = "OUTPUT0"
EXECUTOR = "executor/bench"
POOL_ADDRESS = EXECUTORS  # the pool executors greet
PATHS = ("floor", "kernel", "server")

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
DEFAULT_SIZES = "64B,64KiB,4MiB"
MIN_SAMPLES = 5
MIN_WARMUP_CALLS = 3
REPLY_TIMEOUT_SECS = 30.0
START_TIMEOUT_SECS = 120.0  # a loaded machine may take a while to import onnxruntime
STOP_TIMEOUT_SECS = 20.0
PARENT_CHECK_MS = 1000

ResultT = TypeVar("ResultT")


# ------------------------------------------------------------------------------ measuring


@dataclass(frozen=True, slots=True)
class Cell:
    """One (path, size) measurement."""

    p50_us: float
    sequential_per_s: float
    concurrent_per_s: float | None


class Samples:
    """Round trips timed one at a time until the time budget is spent."""

    def __init__(self, seconds: float) -> None:
        self.started = time.perf_counter_ns()
        self.end = self.started + int(seconds * 1e9)
        self.latencies_ns: list[int] = []
        self.last = self.started

    def more(self) -> bool:
        return self.last < self.end or len(self.latencies_ns) < MIN_SAMPLES

    def record(self, sent_ns: int) -> None:
        self.last = time.perf_counter_ns()
        self.latencies_ns.append(self.last - sent_ns)

    def p50_us(self) -> float:
        return median(self.latencies_ns) / 1e3

    def per_second(self) -> float:
        return len(self.latencies_ns) / ((self.last - self.started) / 1e9)


def warmup_seconds(seconds: float) -> float:
    return min(0.25, seconds / 4)


def measure_sync(call: Callable[[], object], seconds: float) -> Samples:
    warm_until = time.perf_counter() + warmup_seconds(seconds)
    for count in range(1_000_000):
        call()
        if count + 1 >= MIN_WARMUP_CALLS and time.perf_counter() >= warm_until:
            break
    samples = Samples(seconds)
    while samples.more():
        sent = time.perf_counter_ns()
        call()
        samples.record(sent)
    return samples


async def measure_async(call: Callable[[], Awaitable[object]], seconds: float) -> Samples:
    warm_until = time.perf_counter() + warmup_seconds(seconds)
    for count in range(1_000_000):
        await call()
        if count + 1 >= MIN_WARMUP_CALLS and time.perf_counter() >= warm_until:
            break
    samples = Samples(seconds)
    while samples.more():
        sent = time.perf_counter_ns()
        await call()
        samples.record(sent)
    return samples


async def measure_concurrent(
    call: Callable[[], Awaitable[object]], seconds: float, concurrency: int
) -> float:
    """Requests per second with ``concurrency`` callers each asking again as soon as
    its previous answer arrives."""
    completed = 0
    end = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal completed
        while time.perf_counter() < end:
            await call()
            completed += 1

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(concurrency):
            tasks.start_soon(caller)
    return completed / (time.perf_counter() - started)


def run_async(function: Callable[..., Awaitable[ResultT]], *args: Any) -> ResultT:
    """Run on the event loop the server itself uses (asyncio, with uvloop when present)."""
    return anyio.run(function, *args, backend="asyncio", backend_options={"use_uvloop": True})


# ------------------------------------------------------------------------------ payloads


def tensor_of(size_bytes: int) -> Tensor:
    return from_numpy(INPUT, np.arange(size_bytes // 4, dtype=np.float32))


def infer_batch(tensor: Tensor, version: int, instance: int) -> InferBatch:
    return InferBatch(MODEL, version, instance, (InferRequest(MODEL, (tensor,)),))


def check_identity(response: InferResponse, tensor: Tensor) -> None:
    """The one correctness check: the model really ran and sent the tensor back."""
    output = {out.name: out for out in response.outputs}.get(OUTPUT)
    if output is None or not np.array_equal(output.data, tensor.data):
        raise RuntimeError(f"{MODEL} did not return its input as {OUTPUT}")


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*(b|k|ki|kib|m|mi|mib)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 64B, 64KiB or 4MiB")
    unit = (match.group(2) or "b").lower()[:1]
    size = int(match.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20}[unit]
    if size <= 0 or size % 4:
        raise argparse.ArgumentTypeError(f"{text!r}: an FP32 tensor needs a multiple of 4 bytes")
    return size


def parse_sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def size_label(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def progress(path: str, size: int, cell: Cell, concurrency: int) -> None:
    line = (f"  {path:<6} {size_label(size):>8}: p50 {cell.p50_us:9.1f} µs, "
            f"{cell.sequential_per_s:8.0f} req/s")
    if cell.concurrent_per_s is not None:
        line += f"; {concurrency} in flight: {cell.concurrent_per_s:8.0f} req/s"
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ processes
#
# The echo child and the executor run in sessions of their own, so a Ctrl-C in the terminal
# reaches only this process, which stops them in order (both also exit when it dies). The
# server stays in the terminal's process group: it has no such watch, and stops on SIGINT.


def tune(sock: zmq.Socket[Any]) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)


# ------------------------------------------------------------------------------ floor


def serve_echo(endpoint: str, parent_pid: int) -> None:
    """The floor's child process: send every message straight back until the parent goes."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    tune(router)
    router.bind(endpoint)
    try:
        while os.getppid() == parent_pid:
            if router.poll(PARENT_CHECK_MS, zmq.POLLIN):
                while int(router.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                    router.send_multipart(router.recv_multipart(copy=False), copy=False)
    except KeyboardInterrupt:
        pass
    finally:
        router.close(linger=0)
        context.term()


def receive(dealer: zmq.Socket[Any]) -> list[zmq.Frame]:
    if not dealer.poll(int(REPLY_TIMEOUT_SECS * 1000), zmq.POLLIN):
        raise TimeoutError(f"no echo within {REPLY_TIMEOUT_SECS:g} s")
    return dealer.recv_multipart(copy=False)


def floor_concurrent(
    dealer: zmq.Socket[Any], frames: list[Any], seconds: float, concurrency: int
) -> float:
    started = time.perf_counter()
    end = started + seconds
    for _ in range(concurrency):
        dealer.send_multipart(frames, copy=False)
    completed = 0
    while time.perf_counter() < end:
        receive(dealer)
        completed += 1
        dealer.send_multipart(frames, copy=False)
    for _ in range(concurrency):
        receive(dealer)
    return (completed + concurrency) / (time.perf_counter() - started)


def floor_cell(dealer: zmq.Socket[Any], size: int, seconds: float, concurrency: int) -> Cell:
    envelope = Envelope(1, "main", EXECUTOR, infer_batch(tensor_of(size), 1, 1))
    frames: list[Any] = [b"", *wire.encode(envelope)]

    def round_trip() -> None:
        dealer.send_multipart(frames, copy=False)
        receive(dealer)

    samples = measure_sync(round_trip, seconds)
    concurrent = floor_concurrent(dealer, frames, seconds, concurrency) if concurrency else None
    return Cell(samples.p50_us(), samples.per_second(), concurrent)


def measure_floor(sizes: Sequence[int], seconds: float, concurrency: int) -> dict[int, Cell]:
    with serving.temporary_folder("bench-wire-") as folder:
        endpoint = f"ipc://{folder}/echo"
        command = [sys.executable, "-m", "bench.performance.wire", "--echo", endpoint, "--parent-pid", str(os.getpid())]
        echo = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        tune(dealer)
        try:
            dealer.connect(endpoint)
            results = {}
            for size in sizes:
                results[size] = floor_cell(dealer, size, seconds, concurrency)
                progress("floor", size, results[size], concurrency)
            return results
        finally:
            dealer.close(linger=0)
            context.term()
            serving.stop_process(echo, grace=5)


# ------------------------------------------------------------------------------ kernel hop


class HelloCatcher(Actor):
    """Stands in for the executor pool: notes that the executor has said hello."""

    address = POOL_ADDRESS

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self.arrived = anyio.Event()

    async def on_executor_hello(self, hello: ExecutorHello, envelope: Envelope) -> None:
        self.arrived.set()


def start_executor(hub: str) -> subprocess.Popen[bytes]:
    """An executor process, started with the arguments the executor pool gives one."""
    command = [
        sys.executable, "-m", "inferd.kernel.actors.executor.main",
        "--name", EXECUTOR, "--hub", hub,
        "--options", '{"intra_op_threads": 1}',
        "--parent-pid", str(os.getpid()),
        "--log-verbose", "-1",
    ]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)


async def wait_for_hello(hello: HelloCatcher, process: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(START_TIMEOUT_SECS):
        while not hello.arrived.is_set():
            if process.poll() is not None:
                raise RuntimeError(f"the executor exited with code {process.returncode}")
            with anyio.move_on_after(0.1):
                await hello.arrived.wait()


async def load_identity(router: Router, repository: Path) -> tuple[int, int]:
    """Load the model as control would; return (version, instance id)."""
    resolved = ModelRepository([repository], Plugins.load().backends()).resolve(MODEL)
    version = resolved.versions[-1]
    load = LoadVersion(
        load_id=1, model=MODEL, version=version, backend=resolved.backend,
        config=resolved.config, path=resolved.path, instance_count=1,
    )
    loaded = await router.ask(EXECUTOR, load, timeout=START_TIMEOUT_SECS)
    assert isinstance(loaded, VersionLoaded)
    return version, loaded.instance_ids[0]


def batch_response(reply: Message) -> InferResponse:
    if not isinstance(reply, BatchResult):
        raise TypeError(f"expected a BatchResult, got {reply.kind()}")
    result = reply.results[0]
    if isinstance(result, Failure):
        raise RuntimeError(f"the executor failed the batch: {result.code}: {result.message}")
    return result


async def kernel_cell(
    router: Router, batch: InferBatch, seconds: float, concurrency: int
) -> Cell:
    async def round_trip() -> None:
        batch_response(await router.ask(EXECUTOR, batch, timeout=REPLY_TIMEOUT_SECS))

    check_identity(batch_response(await router.ask(EXECUTOR, batch, timeout=REPLY_TIMEOUT_SECS)),
                   batch.requests[0].inputs[0])
    samples = await measure_async(round_trip, seconds)
    concurrent = (await measure_concurrent(round_trip, seconds, concurrency)
                  if concurrency else None)
    return Cell(samples.p50_us(), samples.per_second(), concurrent)


async def kernel_session(
    hub: str, process: subprocess.Popen[bytes], repository: Path,
    sizes: Sequence[int], seconds: float, concurrency: int,
) -> dict[int, Cell]:
    router = Router("main")
    context = zmq.Context()
    link = ProcessLink.hub(router, context, hub)
    hello = HelloCatcher(router)
    results: dict[int, Cell] = {}
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(link.run)
            await tasks.start(hello.run)
            try:
                await wait_for_hello(hello, process)
                version, instance = await load_identity(router, repository)
                for size in sizes:
                    batch = infer_batch(tensor_of(size), version, instance)
                    results[size] = await kernel_cell(router, batch, seconds, concurrency)
                    progress("kernel", size, results[size], concurrency)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    if process.poll() is None and hello.arrived.is_set():
                        await router.ask(EXECUTOR, Shutdown(), timeout=5)
                tasks.cancel_scope.cancel()
    finally:
        link.close()
        context.term()
    return results


def measure_kernel(
    repository: Path, sizes: Sequence[int], seconds: float, concurrency: int
) -> dict[int, Cell]:
    with serving.temporary_folder("bench-wire-") as folder:
        hub = f"ipc://{folder}/hub"
        process = start_executor(hub)
        try:
            return run_async(kernel_session, hub, process, repository, sizes, seconds, concurrency)
        finally:
            # The executor ignores SIGTERM by design: after Shutdown it has exited already,
            # otherwise it is killed once the grace period is over.
            serving.stop_process(process, grace=3)


# ------------------------------------------------------------------------------ full server


async def server_concurrent(url: str, tensor: Tensor, seconds: float, concurrency: int) -> float:
    inputs = [tensor]
    async with AsyncClient(url, timeout=REPLY_TIMEOUT_SECS) as client:
        for _ in range(MIN_WARMUP_CALLS):
            await client.infer(MODEL, inputs)

        async def round_trip() -> None:
            await client.infer(MODEL, inputs)

        return await measure_concurrent(round_trip, seconds, concurrency)


def server_cell(
    client: Client, url: str, size: int, seconds: float, concurrency: int
) -> Cell:
    tensor = tensor_of(size)
    inputs = {INPUT: tensor.data}
    check_identity(client.infer(MODEL, inputs).response, tensor)
    samples = measure_sync(lambda: client.infer(MODEL, inputs), seconds)
    concurrent = (run_async(server_concurrent, url, tensor, seconds, concurrency)
                  if concurrency else None)
    return Cell(samples.p50_us(), samples.per_second(), concurrent)


def measure_server(
    repository: Path, sizes: Sequence[int], seconds: float, concurrency: int
) -> dict[int, Cell]:
    flags = ["--model-control-mode", "explicit", "--load-model", MODEL, "--log-verbose", "-1"]
    with serving.temporary_folder("bench-wire-") as folder, serving.running(
        repository, *flags, log=folder / "server.log", model=MODEL, via="zmq",
        timeout=START_TIMEOUT_SECS, grace=STOP_TIMEOUT_SECS,
    ) as server:
        results = {}
        with Client(server.zmq_url, timeout=REPLY_TIMEOUT_SECS) as client:
            for size in sizes:
                results[size] = server_cell(client, server.zmq_url, size, seconds, concurrency)
                progress("server", size, results[size], concurrency)
        return results


# ------------------------------------------------------------------------------ report


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


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain columns: the first left-aligned, numbers right-aligned."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


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


# ------------------------------------------------------------------------------ main


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Round trip and throughput of an inference through main process → "
                    "executor → main, against a bare zmq echo of the same frames.")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="time budget per cell and mode (default 2)")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES),
                        help=f"tensor sizes in bytes (default {DEFAULT_SIZES})")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="requests in flight for the throughput rows (0: skip them)")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"which paths to measure (default {','.join(PATHS)})")
    parser.add_argument("--model-repository", type=Path, default=REPOSITORY)
    parser.add_argument("--echo", help=argparse.SUPPRESS)  # the floor's child process
    parser.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.paths = [path.strip() for path in args.paths.split(",") if path.strip()]
    if unknown := set(args.paths) - set(PATHS):
        parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.echo:
        serve_echo(args.echo, args.parent_pid or os.getppid())
        return 0
    print("\n".join(machine_facts()), flush=True)
    measure = {"floor": lambda: measure_floor(args.sizes, args.seconds, args.concurrency),
               "kernel": lambda: measure_kernel(args.model_repository, args.sizes,
                                                args.seconds, args.concurrency),
               "server": lambda: measure_server(args.model_repository, args.sizes,
                                                args.seconds, args.concurrency)}
    results: dict[str, dict[int, Cell]] = {}
    try:
        for path in PATHS:
            if path in args.paths:
                results[path] = measure[path]()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"\nLatency: median round trip, one request in flight ({args.seconds:g} s per cell)")
    print(latency_table(results, args.sizes))
    print("\nThroughput: requests per second (MB/s of tensor payload each way)")
    print(throughput_table(results, args.sizes, args.concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
