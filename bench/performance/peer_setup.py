"""What the peers bench measures, and where its peers live: ``bench/.peers``' layout, the
points (``Point``: a model, its concurrencies, perf_analyzer's extra flags), and the setup of
real Triton (a venv of its own from the ``nvidia-pytriton`` wheel), the bench repository and
its python-backend twin repository.

Owns the setup steps and the points; it starts no server and measures nothing
(``peers`` does), and never touches ``model_repository/`` but through its ``generate.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnxruntime

from bench.performance import kserve as bench_kserve
from bench.performance import perf_analyzer, server_cpu
from bench.performance.perf_analyzer import step

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
            created = perf_analyzer.run_shown([perf_analyzer.base_python(), "-m", "venv",
                                               str(TRITON_VENV)], timeout=300)
            if created.returncode != 0:
                raise RuntimeError("could not create the Triton venv")
        check = [str(python), "-c", "import pytriton, onnxruntime, numpy"]
        if subprocess.run(check, capture_output=True, timeout=120, check=False).returncode:
            # The same onnxruntime as inferd's, so both run the same kernels.
            pip = [str(python), "-m", "pip", "install", "--quiet", PYTRITON,
                   f"onnxruntime=={onnxruntime.__version__}", "numpy"]
            if perf_analyzer.run_shown(pip, timeout=PIP_TIMEOUT_SECS).returncode != 0:
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


def chosen(points: Sequence[Point], args: argparse.Namespace) -> list[Point]:
    return [point for point in points if point.key in args.points]

