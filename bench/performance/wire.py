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
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import zmq
import zmq.asyncio

from bench.common import serving
from bench.performance.wire_floor import (
    measure_floor,
    serve_echo,
)
from bench.performance.wire_report import (
    PATHS,
    latency_table,
    machine_facts,
    throughput_table,
)
from bench.performance.wire_samples import (
    EXECUTOR,
    INPUT,
    MIN_WARMUP_CALLS,
    MODEL,
    REPLY_TIMEOUT_SECS,
    Cell,
    check_identity,
    infer_batch,
    measure_async,
    measure_concurrent,
    measure_sync,
    parse_sizes,
    progress,
    run_async,
    tensor_of,
)
from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import EXECUTORS
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.runtime.process_link import ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols.client import AsyncClient, Client
from inferd.protocols.messages import (
    BatchResult,
    Envelope,
    ExecutorHello,
    Failure,
    InferBatch,
    InferResponse,
    LoadVersion,
    Message,
    Shutdown,
    Tensor,
    VersionLoaded,
)

POOL_ADDRESS = EXECUTORS  # the pool executors greet

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
DEFAULT_SIZES = "64B,64KiB,4MiB"
START_TIMEOUT_SECS = 120.0  # a loaded machine may take a while to import onnxruntime
STOP_TIMEOUT_SECS = 20.0


# ------------------------------------------------------------------------------ kernel hop
#
# The echo child and the executor run in sessions of their own, so a Ctrl-C in the terminal
# reaches only this process, which stops them in order (both also exit when it dies). The
# server stays in the terminal's process group: it has no such watch, and stops on SIGINT.


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
