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
``bench.performance.kserve`` runs and parses it): a closed loop of C synchronous requests of batch 1,
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
import asyncio
import importlib.metadata
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import serving
from bench.performance import kserve as bench_kserve
from bench.performance.kserve import Measurement, PerfAnalyzer, load_average, number, step

ROOT = bench_kserve.ROOT
GRPCLIB_FOLDER = ROOT / "bench" / ".peers" / "grpclib"
GRPCLIB = "grpclib==0.4.9"
SERVICE = "inference.GRPCInferenceService"
MODEL = "simple"
BASELINE = "aio-protobuf"
START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 10.0
PIP_TIMEOUT_SECS = 300.0
SAMPLE_SECS = 0.25
READY = "READY"
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
KINDS = ("aio-protobuf", "aio-raw", "aio-raw-asyncio", "aio-raw-ort", "aio-raw-numpy",
         "sync-threads-1", "sync-threads-4", "grpclib")
DEFAULT_PAIRS = ("aio-raw", "reuseport-2")


# ------------------------------------------------------------------------------ the floors


def replies() -> dict[str, Any]:
    """The protobuf reply of each RPC perf_analyzer makes for ``simple``, as the floor's."""
    import numpy as np
    from tritonclient.grpc import model_config_pb2 as mc
    from tritonclient.grpc import service_pb2 as pb

    data = np.arange(16, dtype=np.int32).tobytes()
    pairs = (0, 1)
    infer = pb.ModelInferResponse(
        model_name=MODEL, model_version="1",
        outputs=[pb.ModelInferResponse.InferOutputTensor(name=f"OUTPUT{i}", datatype="INT32",
                                                         shape=[1, 16]) for i in pairs],
        raw_output_contents=[data, data])
    metadata = pb.ModelMetadataResponse(
        name=MODEL, versions=["1"], platform="onnxruntime_onnx",
        inputs=[pb.ModelMetadataResponse.TensorMetadata(name=f"INPUT{i}", datatype="INT32",
                                                        shape=[-1, 16]) for i in pairs],
        outputs=[pb.ModelMetadataResponse.TensorMetadata(name=f"OUTPUT{i}", datatype="INT32",
                                                         shape=[-1, 16]) for i in pairs])
    config = pb.ModelConfigResponse(config=mc.ModelConfig(
        name=MODEL, platform="onnxruntime_onnx", max_batch_size=8,
        input=[mc.ModelInput(name=f"INPUT{i}", data_type=mc.TYPE_INT32, dims=[16])
               for i in pairs],
        output=[mc.ModelOutput(name=f"OUTPUT{i}", data_type=mc.TYPE_INT32, dims=[16])
                for i in pairs]))
    return {
        "ServerLive": pb.ServerLiveResponse(live=True),
        "ServerReady": pb.ServerReadyResponse(ready=True),
        "ModelReady": pb.ModelReadyResponse(ready=True),
        "ServerMetadata": pb.ServerMetadataResponse(name="floor", version="0"),
        "ModelMetadata": metadata,
        "ModelConfig": config,
        "ModelStatistics": pb.ModelStatisticsResponse(),
        "ModelInfer": infer,
    }


def raw_replies() -> dict[str, bytes]:
    return {name: reply.SerializeToString() for name, reply in replies().items()}


def grpc_options(reuseport: bool) -> list[tuple[str, Any]]:
    return [("grpc.so_reuseport", 1 if reuseport else 0)]


def simple_run(kind: str) -> Callable[[], object]:
    """One run of ``simple`` (two INT32[1,16] inputs, their sum and difference) the way
    ``kind`` computes it: onnxruntime (``*-ort``), numpy (``*-numpy``) or not at all."""
    import numpy as np

    rows = np.arange(16, dtype=np.int32).reshape(1, 16)
    if kind.endswith("-numpy"):
        return lambda: (rows + rows, rows - rows)
    if not kind.endswith("-ort"):
        return lambda: None
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(ROOT / "model_repository" / MODEL / "1" / "model.onnx"),
                                   options, providers=["CPUExecutionProvider"])
    feeds = {"INPUT0": rows, "INPUT1": rows}
    return lambda: session.run(None, feeds)


def raw_handler(asynchronous: bool, run: Callable[[], object] = lambda: None) -> Any:
    """A generic handler of the service whose methods take the request's bytes and return
    prebuilt bytes: no (de)serializer, no protobuf object per message. ModelInfer calls
    ``run`` first."""
    import grpc

    def method(name: str, reply: bytes) -> Any:
        if asynchronous and name == "ModelInfer":
            async def answer(request: bytes, context: Any) -> bytes:
                run()
                return reply
        elif asynchronous:
            async def answer(request: bytes, context: Any) -> bytes:
                return reply
        else:
            def answer(request: bytes, context: Any) -> bytes:  # type: ignore[misc]
                return reply
        return grpc.unary_unary_rpc_method_handler(answer, request_deserializer=None,
                                                   response_serializer=None)

    handlers = {name: method(name, reply) for name, reply in raw_replies().items()}
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def announce(kind: str, port: int) -> None:
    loop = type(asyncio.get_running_loop()).__module__ if kind != "sync" else "threads"
    print(f"{READY} pid {os.getpid()} port {port} loop {loop}", flush=True)


def bind(server: Any, port: int) -> None:
    if server.add_insecure_port(f"127.0.0.1:{port}") != port:
        raise RuntimeError(f"could not bind 127.0.0.1:{port}")


async def serve_aio(kind: str, port: int, reuseport: bool) -> None:
    import grpc
    from tritonclient.grpc import service_pb2_grpc as svc

    server = grpc.aio.server(options=grpc_options(reuseport))
    if kind == "aio-protobuf":
        protobuf = replies()

        class Floor(svc.GRPCInferenceServiceServicer):  # type: ignore[misc]
            async def ServerLive(self, request: Any, context: Any) -> Any:
                return protobuf["ServerLive"]

            async def ServerReady(self, request: Any, context: Any) -> Any:
                return protobuf["ServerReady"]

            async def ModelReady(self, request: Any, context: Any) -> Any:
                return protobuf["ModelReady"]

            async def ServerMetadata(self, request: Any, context: Any) -> Any:
                return protobuf["ServerMetadata"]

            async def ModelMetadata(self, request: Any, context: Any) -> Any:
                return protobuf["ModelMetadata"]

            async def ModelConfig(self, request: Any, context: Any) -> Any:
                return protobuf["ModelConfig"]

            async def ModelStatistics(self, request: Any, context: Any) -> Any:
                return protobuf["ModelStatistics"]

            async def ModelInfer(self, request: Any, context: Any) -> Any:
                return protobuf["ModelInfer"]

        svc.add_GRPCInferenceServiceServicer_to_server(Floor(), server)
    else:
        server.add_generic_rpc_handlers((raw_handler(True, simple_run(kind)),))
    bind(server, port)
    await server.start()
    announce(kind, port)
    await server.wait_for_termination()


def serve_threads(workers: int, port: int, reuseport: bool) -> None:
    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=workers),
                         options=grpc_options(reuseport))
    server.add_generic_rpc_handlers((raw_handler(asynchronous=False),))
    bind(server, port)
    server.start()
    announce("sync", port)
    server.wait_for_termination()


async def serve_grpclib(port: int, reuseport: bool) -> None:
    from grpclib.const import Cardinality, Handler
    from grpclib.encoding.base import CodecBase
    from grpclib.server import Server, Stream

    class RawCodec(CodecBase):  # type: ignore[misc]
        """Messages are bytes both ways; content type application/grpc(+proto)."""

        __content_subtype__ = "proto"

        def encode(self, message: bytes, message_type: Any) -> bytes:
            return message

        def decode(self, data: bytes, message_type: Any) -> bytes:
            return data

    def method(reply: bytes) -> Callable[[Stream], Any]:
        async def answer(stream: Stream) -> None:
            await stream.recv_message()
            await stream.send_message(reply)
        return answer

    class Service:
        def __mapping__(self) -> dict[str, Handler]:
            return {f"/{SERVICE}/{name}": Handler(method(reply), Cardinality.UNARY_UNARY,
                                                  bytes, bytes)
                    for name, reply in raw_replies().items()}

    server = Server([Service()], codec=RawCodec())
    await server.start("127.0.0.1", port, reuse_port=reuseport)
    announce("grpclib", port)
    await server.wait_closed()


def event_loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop, as the floor and inferd serve use, except for ``*-asyncio``."""
    if kind.endswith("-asyncio"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def serve(kind: str, port: int, reuseport: bool) -> None:
    if kind.startswith("sync-threads-"):
        serve_threads(int(kind.rsplit("-", 1)[1]), port, reuseport)
        return
    main = (serve_grpclib(port, reuseport) if kind == "grpclib"
            else serve_aio(kind, port, reuseport))
    with asyncio.Runner(loop_factory=event_loop_factory(kind)) as runner:
        runner.run(main)


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
            result = bench_kserve.run_shown(command, timeout=PIP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            step("pip timed out: grpclib not measured")
            return None
        if result.returncode != 0:
            step("pip failed: grpclib not measured")
            return None
    found = sorted(GRPCLIB_FOLDER.glob("grpclib-*.dist-info"))
    return found[-1].name.removeprefix("grpclib-").removesuffix(".dist-info") if found else "?"


# ------------------------------------------------------------------------------ connections


def established(port: int, pids: Sequence[int]) -> tuple[int, list[int]]:
    """Established TCP connections whose local port is ``port`` (the server's side of each),
    and how many of them each of ``pids`` holds."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "01" and \
                    int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    held = []
    for pid in pids:
        count = 0
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            descriptors = []
        for descriptor in descriptors:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                count += 1
        held.append(count)
    return len(inodes), held


@dataclass
class ConnectionSampler:
    """The most established connections to ``port`` seen while the block runs."""

    port: int
    pids: Sequence[int]
    peak: int = 0
    split: list[int] = field(default_factory=list)

    @contextmanager
    def sampling(self) -> Iterator[ConnectionSampler]:
        done = threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_SECS):
                total, held = established(self.port, self.pids)
                if total > self.peak:
                    self.peak, self.split = total, held

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join(5)

    def describe(self) -> str:
        if len(self.split) > 1:
            return f"{self.peak} = {'+'.join(str(count) for count in self.split)}"
        return str(self.peak)


# ------------------------------------------------------------------------------ CPU


def process_cpu_secs(pid: int) -> float:
    """User and system time of a process, all its threads, so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_secs() -> float:
    """CPU time of this process's children that have been waited for: perf_analyzer."""
    times = os.times()
    return times.children_user + times.children_system


@dataclass
class CpuMeter:
    """Cores the servers and perf_analyzer used while the block ran (wall-clock averages)."""

    pids: Sequence[int]
    server_cores: float = 0.0
    client_cores: float = 0.0

    @contextmanager
    def metering(self) -> Iterator[CpuMeter]:
        wall = time.monotonic()
        server = sum(process_cpu_secs(pid) for pid in self.pids)
        client = children_cpu_secs()
        try:
            yield self
        finally:
            elapsed = max(time.monotonic() - wall, 1e-9)
            used = sum(process_cpu_secs(pid) for pid in self.pids) - server
            self.server_cores = used / elapsed
            self.client_cores = (children_cpu_secs() - client) / elapsed


# ------------------------------------------------------------------------------ measuring


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
        measurement = bench_kserve.measure(tool, servers[0], "grpc", concurrency, args, folder)
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
        futures = [pool.submit(bench_kserve.run_perf_analyzer, tool, servers[0], "grpc",
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


# ------------------------------------------------------------------------------ report


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
        tool = bench_kserve.setup_perf_analyzer(args.skip_setup)
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
