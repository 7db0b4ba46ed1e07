"""Many models in the memory of a few: ``--model-load-on-demand`` within ``--model-memory-budget``
against the same models all loaded (issue 29).

``--models`` ONNX models (``m00``, ``m01``, ...; an FP32 MatMul x[?,W] -> y[?,W] whose
weights grow from about 0.25 MB to ``--largest-mb``) are served twice, one server after the
other, with the same request mix: ``--clients`` tritonclient gRPC clients sending requests
back to back for ``--seconds``, each request's model drawn from a Zipf distribution (model i
with weight 1/(i+1)^s, ``--zipf`` s) in an order shuffled once (so popularity and size do not
go together).

``on demand``
    EXPLICIT mode, nothing loaded at start, ``--model-load-on-demand``, and a CPU budget of
    about ``--room`` models (``--room`` times the mean model file, times ``--overhead`` for
    what onnxruntime holds beyond the weights);
``all loaded``
    EXPLICIT mode with ``--load-model '*'``: every model loaded before the clients start.

With ``--declared`` each config declares its footprint (``INFERD_MEMORY_BYTES``), so cold
loads run side by side; without it each is measured, one load at a time.

The table gives per phase the requests, infer/s, hit rate (requests that did not wait for a
load: 1 - ``inferd_model_load_waits_total`` / requests), p50 and p99 of the hits and of the
cold requests (a request counts as cold when it took longer than ``--cold-ms``: the server
does not tell the client whether it waited), loads, evictions per second, and the memory the
server and its executors held at the end. A script, not a test: on a shared machine the
numbers move.

    .venv/bin/python -m bench.performance.on_demand [--models 50] [--room 10] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper

from bench.common import serving

ROOT = Path(__file__).resolve().parents[2]


def write_models(repository: Path, count: int, largest_mb: float, declared: float = 0.0
                 ) -> list[int]:
    """``count`` models of growing size; the size of each one's file, in bytes. With
    ``declared``, each config declares ``INFERD_MEMORY_BYTES`` as that many times its file."""
    sizes = []
    for index in range(count):
        megabytes = 0.25 + (largest_mb - 0.25) * index / max(1, count - 1)
        width = max(8, int((megabytes * 1e6 / 4) ** 0.5))
        rng = np.random.default_rng(index)
        weights = numpy_helper.from_array(
            rng.standard_normal((width, width), dtype=np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], f"m{index:02d}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
            [weights])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)
        folder = repository / f"m{index:02d}"
        (folder / "1").mkdir(parents=True)
        onnx.save(model, folder / "1" / "model.onnx")
        size = (folder / "1" / "model.onnx").stat().st_size
        parameter = (f'parameters {{ key: "INFERD_MEMORY_BYTES" value {{ string_value: '
                     f'"{int(size * declared)}" }} }}\n' if declared else "")
        (folder / "config.pbtxt").write_text(
            f'name: "m{index:02d}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
            f'input [{{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
            f'output [{{ name: "y" data_type: TYPE_FP32 dims: [ {width} ] }}]\n' + parameter)
        sizes.append(size)
    return sizes


def widths(repository: Path, count: int) -> list[int]:
    found = []
    for index in range(count):
        text = (repository / f"m{index:02d}" / "config.pbtxt").read_text()
        found.append(int(text.split("dims: [ ")[1].split(" ]")[0]))
    return found


def metric_sum(server: serving.Server, family: str) -> float:
    url = f"http://{server.address('metrics')}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(family + "{") or line.startswith(family + " "))


def run_mix(url: str, model_widths: list[int], *, clients: int, seconds: float, zipf: float,
            seed: int) -> list[float]:
    """Latencies (ms) of every request the clients sent."""
    count = len(model_widths)
    order = np.random.default_rng(seed).permutation(count)
    weights = 1.0 / np.arange(1, count + 1) ** zipf
    weights /= weights.sum()
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(clients)]

    def client_loop(index: int) -> None:
        rng = np.random.default_rng(seed + 1 + index)
        client = grpcclient.InferenceServerClient(url)
        while not stop.is_set():
            model = int(order[rng.choice(count, p=weights)])
            inputs = [grpcclient.InferInput("x", [1, model_widths[model]], "FP32")]
            inputs[0].set_data_from_numpy(np.ones((1, model_widths[model]), np.float32))
            started = time.perf_counter()
            client.infer(f"m{model:02d}", inputs, client_timeout=300)
            latencies[index].append((time.perf_counter() - started) * 1e3)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=300)
    return [value for values in latencies for value in values]


def percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(values, [50, 99])
    return float(p50), float(p99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--largest-mb", type=float, default=8.0)
    parser.add_argument("--room", type=float, default=10.0,
                        help="how many mean-sized models the budget holds")
    parser.add_argument("--overhead", type=float, default=2.0,
                        help="what a loaded model holds per byte of its file")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--cold-ms", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--declared", action="store_true",
                        help="each model declares INFERD_MEMORY_BYTES (--overhead times its "
                             "file): loads run side by side instead of one at a time")
    parser.add_argument("--server-args", default="")
    args = parser.parse_args()

    from inferd.kernel.sdk.memory_meter import resident_bytes

    with serving.temporary_folder("inferd-bench-on-demand-") as work:
        repository = work / "repository"
        print(f"writing {args.models} models...", file=sys.stderr)
        sizes = write_models(repository, args.models, args.largest_mb,
                             args.overhead if args.declared else 0.0)
        model_widths = widths(repository, args.models)
        budget = int(np.mean(sizes) * args.room * args.overhead)
        phases = {
            "on demand": ["--model-load-on-demand", "--model-memory-budget", f"cpu={budget}B"],
            "all loaded": ["--load-model", "*"],
        }
        rows = []
        for name, flags in phases.items():
            print(f"phase {name}: {args.seconds:g} s...", file=sys.stderr)
            with serving.running(
                repository, "--model-control-mode", "explicit", *flags, "--log-verbose", "-1",
                *args.server_args.split(), log=work / f"{name.replace(' ', '-')}.log",
                model="m00", via="grpc", timeout=600,
            ) as server:
                latencies = run_mix(server.address("grpc"), model_widths, clients=args.clients,
                                    seconds=args.seconds, zipf=args.zipf, seed=args.seed)
                waits = metric_sum(server, "inferd_model_load_waits_total")
                loads = metric_sum(server, "inferd_model_on_demand_loads_total")
                evictions = metric_sum(server, "inferd_model_evictions_total")
                held = resident_bytes(server.process.pid) or 0
            # m00's ready check loads it in the on-demand phase: not one of the mix's.
            waits = max(0.0, waits - 1)
            hits = [ms for ms in latencies if ms <= args.cold_ms]
            cold = [ms for ms in latencies if ms > args.cold_ms]
            rows.append((name, len(latencies), len(latencies) / args.seconds,
                         1 - waits / max(1, len(latencies)), *percentiles(hits),
                         *percentiles(cold), loads, evictions / args.seconds, held / 2**20))
    print(f"\n{args.models} models ({min(sizes) / 1e6:.2f}–{max(sizes) / 1e6:.2f} MB files, "
          f"{sum(sizes) / 1e6:.0f} MB in all), budget {budget / 2**20:.0f} MiB "
          f"(~{args.room:g} models, {'declared' if args.declared else 'measured'}), "
          f"Zipf s={args.zipf:g}, {args.clients} gRPC clients, "
          f"{args.seconds:g} s per phase, cold = over {args.cold_ms:g} ms, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'phase':<11} {'requests':>8} {'infer/s':>8} {'hit rate':>8} {'hit p50':>8} "
          f"{'hit p99':>8} {'cold p50':>9} {'cold p99':>9} {'loads':>6} {'evict/s':>8} "
          f"{'MiB held':>9}")
    for name, count, rate, hit_rate, hp50, hp99, cp50, cp99, loads, evict, held in rows:
        print(f"{name:<11} {count:>8} {rate:>8.0f} {hit_rate:>8.3f} {hp50:>8.2f} {hp99:>8.2f} "
              f"{cp50:>9.1f} {cp99:>9.1f} {loads:>6.0f} {evict:>8.2f} {held:>9.0f}")


if __name__ == "__main__":
    main()
