"""The GPU check (run by ``bench/gpu_check.sh`` on a machine with an NVIDIA GPU): does inferd
really run TorchScript on CUDA and ONNX through onnxruntime-gpu, with the CPU's answers?

It writes a repository into a temporary folder with two models, each twice, a ``KIND_CPU``
twin and a ``KIND_GPU`` twin of the same file: ``mlp`` (ONNX, x[1024] through four Gemm
1024x1024, ``model_repository/generate.py``'s wide mlp) and ``torch_mlp`` (TorchScript, the
same shape in ``torch.nn.Linear`` layers). It serves them with one ``inferd serve`` (EXPLICIT
mode, every model loaded) and then:

1. checks every model is READY (a GPU twin that is not says why: the index's reason);
2. sends each pair the same random batch over HTTP and compares the GPU twin's answer with
   the CPU twin's (``--rtol``/``--atol``);
3. runs each model for ``--seconds`` with ``--concurrency`` gRPC clients sending batches of
   ``--batch`` rows, and prints a table: model, device, requests/s, rows/s, p50 ms, and the
   GPU twin's speed-up over the CPU twin.

``--cpu-only`` leaves the GPU twins out (a smoke run of the script on a machine without a
GPU). Exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import serving
from inferd.kernel.server import format_table

ROOT = Path(__file__).resolve().parents[1]
FEATURES = 1024
DEVICES = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}


def generate_module():  # type: ignore[no-untyped-def]
    specification = importlib.util.spec_from_file_location(
        "generate", ROOT / "model_repository" / "generate.py")
    assert specification is not None and specification.loader is not None
    module = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(module)
    return module


def write_repository(root: Path, devices: list[str]) -> list[str]:
    """The models, one twin per device; returns their names."""
    import torch

    onnx_model = generate_module().wide_mlp_model().SerializeToString()
    layers: list[torch.nn.Module] = []
    for index in range(4):
        layers.append(torch.nn.Linear(FEATURES, FEATURES))
        if index < 3:
            layers.append(torch.nn.ReLU())
    scripted = torch.jit.script(torch.nn.Sequential(*layers).eval())
    names = []
    for device in devices:
        kind = DEVICES[device]
        mlp = root / f"mlp_{device}"
        (mlp / "1").mkdir(parents=True)
        (mlp / "1" / "model.onnx").write_bytes(onnx_model)
        (mlp / "config.pbtxt").write_text(
            f'platform: "onnxruntime_onnx"\nmax_batch_size: 256\n'
            f"instance_group [{{ kind: {kind} count: 1 }}]\n")
        torch_mlp = root / f"torch_mlp_{device}"
        (torch_mlp / "1").mkdir(parents=True)
        scripted.save(str(torch_mlp / "1" / "model.pt"))
        (torch_mlp / "config.pbtxt").write_text(
            'platform: "pytorch_libtorch"\nmax_batch_size: 256\n'
            f'input [{{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {FEATURES} ] }}]\n'
            f'output [{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {FEATURES} ] }}]\n'
            f"instance_group [{{ kind: {kind} count: 1 }}]\n")
        names += [mlp.name, torch_mlp.name]
    return names


def io_names(model: str) -> tuple[str, str]:
    return ("INPUT__0", "OUTPUT__0") if model.startswith("torch_") else ("x", "y")


def infer_http(server: serving.Server, model: str, batch: np.ndarray) -> np.ndarray:
    source, target = io_names(model)
    with httpclient.InferenceServerClient(server.address("http")) as client:
        tensor = httpclient.InferInput(source, list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=True)
        return client.infer(model, [tensor]).as_numpy(target)


def throughput(server: serving.Server, model: str, batch: np.ndarray, seconds: float,
               concurrency: int) -> tuple[float, float]:
    """(requests/s, p50 ms) of ``concurrency`` gRPC clients sending ``batch`` back to back."""
    source, _ = io_names(model)
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client_loop() -> None:
        with grpcclient.InferenceServerClient(server.address("grpc")) as client:
            tensor = grpcclient.InferInput(source, list(batch.shape), "FP32")
            tensor.set_data_from_numpy(batch)
            while time.monotonic() < deadline:
                started = time.perf_counter()
                client.infer(model, [tensor])
                with lock:
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client_loop) for _ in range(concurrency)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    elapsed = time.monotonic() - began
    return len(latencies) / elapsed, statistics.median(latencies) * 1e3 if latencies else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per model")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-3)
    parser.add_argument("--cpu-only", action="store_true", help="no GPU twins (a smoke run)")
    args = parser.parse_args(argv)
    devices = ["cpu"] if args.cpu_only else ["cpu", "gpu"]
    problems: list[str] = []
    with serving.temporary_folder("gpu-check-") as folder:
        names = write_repository(folder / "repository", devices)
        print(f"repository: {', '.join(names)}", flush=True)
        flags = ["--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false"]
        with serving.running(folder / "repository", *flags, log=folder / "inferd.log",
                             model=names[0], via="http", cwd=ROOT) as server:
            with httpclient.InferenceServerClient(server.address("http")) as client:
                for entry in client.get_model_repository_index():
                    print(f"  {entry['name']:<16} {entry.get('state', '-'):<12}"
                          f" {entry.get('reason', '')}", flush=True)
                    if entry.get("state") != "READY":
                        problems.append(f"{entry['name']} is not READY: {entry.get('reason')}")
            ready = [name for name in names if f"{name} is not READY" not in " ".join(problems)]
            batch = np.random.default_rng(0).standard_normal(
                (args.batch, FEATURES)).astype(np.float32)
            answers = {name: infer_http(server, name, batch) for name in ready}
            for name in ready:
                if name.endswith("_gpu") and name.replace("_gpu", "_cpu") in answers:
                    cpu = answers[name.replace("_gpu", "_cpu")]
                    if not np.allclose(answers[name], cpu, rtol=args.rtol, atol=args.atol):
                        worst = float(np.max(np.abs(answers[name] - cpu)))
                        problems.append(f"{name} differs from its CPU twin (max |Δ| {worst:g})")
                    else:
                        print(f"  {name}: the same answer as its CPU twin", flush=True)
            rows = []
            rates: dict[str, float] = {}
            for name in ready:
                print(f"measuring {name} ({args.seconds:g} s, {args.concurrency} clients, "
                      f"batch {args.batch})...", flush=True)
                rate, p50 = throughput(server, name, batch, args.seconds, args.concurrency)
                rates[name] = rate
                twin = rates.get(name.replace("_gpu", "_cpu")) if name.endswith("_gpu") else None
                speedup = f"{rate / twin:.2f}×" if twin else ""
                rows.append((name, name.rsplit("_", 1)[1], f"{rate:,.1f}",
                             f"{rate * args.batch:,.0f}", f"{p50:,.2f}", speedup))
            print(format_table(("model", "device", "req/s", "rows/s", "p50 ms", "×CPU"), rows))
            print(f"server log: {server.log_tail()}" if problems else "", flush=True)
    for problem in problems:
        print(f"FAIL  {problem}")
    print("PASS" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
