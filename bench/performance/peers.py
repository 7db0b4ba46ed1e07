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
``model.onnx`` and ``bench/performance/peer_models/onnx_twin.py`` as ``model.py``, which runs the graph
through onnxruntime with one intra-op thread and merges a dynamic batch into one run. The
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
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import onnxruntime

from bench.common import serving
from bench.performance import kserve as bench_kserve
from bench.performance import server_cpu
from bench.performance.kserve import Baseline, Measurement, PerfAnalyzer, load_average, number, step

ROOT = bench_kserve.ROOT
PEERS = ROOT / "bench" / ".peers"
# The examples the points measure, with the wide ``mlp`` (model_repository/generate.py's
# BENCH_MODELS), written here on every run: inferd, the twins and the baselines all read it.
REPOSITORY = PEERS / "inferd-models"
TRITON_VENV = PEERS / "triton"
TWIN_REPOSITORY = PEERS / "triton-models"
TWIN_MODEL = Path(__file__).resolve().parent / "peer_models" / "onnx_twin.py"
FLOOR_FOLDER = ROOT.parent / "shared" / "bench-floor"
PYTRITON = "nvidia-pytriton==0.7.0"
MODELS = ("simple", "mlp", "identity_fp32")
SERVERS = ("inferd", "triton", "floor")
PROTOCOLS = bench_kserve.PROTOCOLS
MLP_BATCHES = (1, 8, 64)
IDENTITY_ELEMENTS = 262144  # 1 MiB of FP32
SHM_OPTIONS = ("--shared-memory", "system", "--output-shared-memory-size",
               str(IDENTITY_ELEMENTS * 4))
PIP_TIMEOUT_SECS = 1800.0
START_TIMEOUT_SECS = 120.0
STOP_TIMEOUT_SECS = 20.0
ONNX_TYPES = {"tensor(float)": "TYPE_FP32", "tensor(int32)": "TYPE_INT32",
              "tensor(int64)": "TYPE_INT64"}


@dataclass(frozen=True)
class Point:
    """One perf_analyzer setting, run on every server that serves it."""

    key: str  # for --points
    label: str
    model: str
    concurrency: tuple[int, ...]
    extra: tuple[str, ...] = ()


SIMPLE = Point("simple", "simple", "simple", (1, 8))
MLP = Point("mlp", "mlp", "mlp", (32,))
# inferd's other executor placement (crash containment), judged against the default's CPU.
OTHER_PLACEMENT = ("--cpu-executor", "process")
SIMPLE_INLINE = Point("simple-process", f"simple, inferd {' '.join(OTHER_PLACEMENT)}", "simple",
                      (8,))
MLP_INLINE = Point("mlp-process", f"mlp, inferd {' '.join(OTHER_PLACEMENT)}", "mlp", (32,))
PLACEMENT_POINTS = {SIMPLE_INLINE: SIMPLE, MLP_INLINE: MLP}
IDENTITY = Point("identity", "identity 1 MiB", "identity_fp32", (1,),
                 ("--shape", f"INPUT0:{IDENTITY_ELEMENTS}"))
IDENTITY_SHM = Point("identity-shm", "identity 1 MiB, shm", "identity_fp32", (1,),
                     (*IDENTITY.extra, *SHM_OPTIONS))
POINTS = (SIMPLE, SIMPLE_INLINE, MLP, MLP_INLINE, IDENTITY, IDENTITY_SHM)
MODEL_POINTS = (SIMPLE, MLP, IDENTITY, IDENTITY_SHM)

Key = tuple[str, str, str, int]  # server, point key, protocol, concurrency
Costs = dict[Key, server_cpu.CpuPerInference]


@dataclass(frozen=True)
class Triton:
    binary: Path
    site_packages: Path
    environment: dict[str, str]


# ------------------------------------------------------------------------------ setup


def triton_site_packages() -> Path:
    found = sorted((TRITON_VENV / "lib").glob("python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages in {TRITON_VENV}: run once without --skip-setup")
    return found[-1]


def setup_triton(skip: bool) -> Triton:
    python = TRITON_VENV / "bin" / "python"
    if skip:
        step("--skip-setup: using the Triton already in bench/.peers/triton")
    else:
        if not python.exists():
            step(f"creating venv {TRITON_VENV.relative_to(ROOT)}")
            created = bench_kserve.run_shown([bench_kserve.base_python(), "-m", "venv",
                                              str(TRITON_VENV)], timeout=300)
            if created.returncode != 0:
                raise RuntimeError("could not create the Triton venv")
        check = [str(python), "-c", "import pytriton, onnxruntime, numpy"]
        if subprocess.run(check, capture_output=True, timeout=120, check=False).returncode:
            # The same onnxruntime as inferd's, so both run the same kernels.
            pip = [str(python), "-m", "pip", "install", "--quiet", PYTRITON,
                   f"onnxruntime=={onnxruntime.__version__}", "numpy"]
            if bench_kserve.run_shown(pip, timeout=PIP_TIMEOUT_SECS).returncode != 0:
                raise RuntimeError(f"pip could not install {PYTRITON} into the Triton venv")
        else:
            step(f"Triton venv present ({TRITON_VENV.relative_to(ROOT)})")
    site_packages = triton_site_packages()
    tritonserver = site_packages / "pytriton" / "tritonserver"
    binary = tritonserver / "bin" / "tritonserver"
    if not binary.exists():
        raise RuntimeError(f"{PYTRITON} installed no {binary}")
    # The wheel ships the python backend's stub per Python version beside the backend; the
    # backend looks for it in its own folder.
    stub = tritonserver / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():
        version = site_packages.parent.name.removeprefix("python")
        source = tritonserver / "python_backend_stubs" / version / stub.name
        step(f"copying the python {version} backend stub into backends/python")
        shutil.copy2(source, stub)
    library_path = [str(site_packages / "nvidia_pytriton.libs"),
                    str(sysconfig.get_config_var("LIBDIR"))]
    environment = {**os.environ, "LD_LIBRARY_PATH": ":".join(library_path),
                   "PYTHONPATH": str(site_packages),
                   "PATH": f"{TRITON_VENV / 'bin'}:{os.environ.get('PATH', '')}"}
    step(f"tritonserver ready: {binary.relative_to(ROOT)}")
    return Triton(binary, site_packages, environment)


def twin_config(model: str) -> str:
    """inferd's config for ``model`` with the python backend in place of the platform, the
    inputs and outputs written out if inferd would read them from the graph, and one CPU
    instance."""
    config = (REPOSITORY / model / "config.pbtxt").read_text()
    lines = [line for line in config.splitlines() if not line.startswith("platform:")]
    lines.append('backend: "python"')
    if "input [" not in config:
        session = onnxruntime.InferenceSession(str(REPOSITORY / model / "1" / "model.onnx"),
                                               providers=["CPUExecutionProvider"])
        batched = "max_batch_size: 0" not in config
        lines += tensor_block("input", session.get_inputs(), batched)
        lines += tensor_block("output", session.get_outputs(), batched)
    if "instance_group" not in config:
        lines.append("instance_group [ { kind: KIND_CPU count: 1 } ]")
    return "\n".join(lines) + "\n"


def tensor_block(kind: str, tensors: Sequence[onnxruntime.NodeArg], batched: bool) -> list[str]:
    entries = []
    for tensor in tensors:
        shape = tensor.shape[1:] if batched else tensor.shape
        dims = ", ".join(str(dim) if isinstance(dim, int) else "-1" for dim in shape)
        entries.append(f'  {{ name: "{tensor.name}" data_type: {ONNX_TYPES[tensor.type]} '
                       f"dims: [ {dims} ] }}")
    return [f"{kind} [", ",\n".join(entries), "]"]


def generate_bench_models() -> None:
    specification = importlib.util.spec_from_file_location(
        "generate", bench_kserve.REPOSITORY / "generate.py")
    assert specification is not None and specification.loader is not None
    generate = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(generate)
    rows = generate.generate(REPOSITORY, generate.BENCH_MODELS)
    written = sum(1 for _, _, status in rows if status == "written")
    step(f"bench repository: {REPOSITORY.relative_to(ROOT)} ({', '.join(MODELS)}; "
         f"{written} file(s) written, mlp is x[1024] through 4 Gemm 1024x1024)")


def generate_twins() -> None:
    """The twin repository, rewritten from the bench repository on every run."""
    shutil.rmtree(TWIN_REPOSITORY, ignore_errors=True)
    for model in MODELS:
        version = TWIN_REPOSITORY / model / "1"
        version.mkdir(parents=True)
        (TWIN_REPOSITORY / model / "config.pbtxt").write_text(twin_config(model))
        shutil.copy2(REPOSITORY / model / "1" / "model.onnx", version / "model.onnx")
        shutil.copy2(TWIN_MODEL, version / "model.py")
    step(f"twin repository written: {TWIN_REPOSITORY.relative_to(ROOT)} ({', '.join(MODELS)})")


# ------------------------------------------------------------------------------ servers


@contextmanager
def running_peer(
    command: Sequence[str], ports: dict[str, int], *, name: str, models: Sequence[str],
    via: str, log: Path, environment: dict[str, str] | None = None,
) -> Iterator[serving.Server]:
    server = serving.start_process(command, ports, log=log, environment=environment,
                                   name=name, cwd=ROOT)
    try:
        for model in models:
            serving.wait_model_ready(server, model, via=via, timeout=START_TIMEOUT_SECS)
        yield server
    finally:
        serving.stop_process(server.process, grace=STOP_TIMEOUT_SECS)


@contextmanager
def running_inferd(
    args: argparse.Namespace, folder: Path, *flags: str, python: str = ""
) -> Iterator[serving.Server]:
    loads = [option for model in MODELS for option in ("--load-model", model)]
    extra = args.before_args if python and args.before_args is not None else args.server_args
    # The shm point's regions; a before server that knows the flag is given it by --before-args.
    own = () if python else ("--allow-client-shm=true",)
    every = ["--model-control-mode", "explicit", *loads, *own, *flags, *extra]
    log = folder / f"inferd{'-before' if python else ''}.log"
    # Not in ROOT: the executors' sys.path starts with their working directory, where this
    # checkout's inferd.egg-info would give another checkout's server these entry points.
    with serving.running(REPOSITORY, *every, log=log, model=MODELS[0],
                         via="http", cwd=folder, timeout=START_TIMEOUT_SECS,
                         grace=STOP_TIMEOUT_SECS, prefix=args.server_prefix,
                         python=python) as server:
        for model in MODELS[1:]:
            serving.wait_model_ready(server, model, via="http", timeout=START_TIMEOUT_SECS)
        yield server


@contextmanager
def running_triton(
    triton: Triton, args: argparse.Namespace, folder: Path
) -> Iterator[serving.Server]:
    ports = {"http": serving.free_port(), "grpc": serving.free_port()}
    tritonserver = triton.binary.parent.parent
    command = [*args.server_prefix, str(triton.binary),
               f"--model-repository={TWIN_REPOSITORY}",
               f"--backend-directory={tritonserver / 'backends'}",
               f"--cache-directory={tritonserver / 'caches'}",
               "--model-control-mode=explicit", *(f"--load-model={model}" for model in MODELS),
               "--http-address=127.0.0.1", f"--http-port={ports['http']}",
               "--grpc-address=127.0.0.1", f"--grpc-port={ports['grpc']}",
               "--allow-metrics=false"]
    with running_peer(command, ports, name="tritonserver", models=MODELS, via="http",
                      log=folder / "triton.log", environment=triton.environment) as server:
        yield server


def server_version(server: serving.Server) -> str:
    try:
        with urllib.request.urlopen(f"http://{server.address('http')}/v2", timeout=5) as reply:
            return str(json.load(reply).get("version", "?"))
    except (OSError, ValueError):
        return "?"


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
        results[key] = bench_kserve.measure(
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


def chosen(points: Sequence[Point], args: argparse.Namespace) -> list[Point]:
    return [point for point in points if point.key in args.points]


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


# ------------------------------------------------------------------------------ report


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
        tool = bench_kserve.setup_perf_analyzer(args.skip_setup)
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
