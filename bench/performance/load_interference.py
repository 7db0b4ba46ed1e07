"""Do model loads slow down inference of other models? (issue: "loads never slow other models")

One ``inferd serve`` (EXPLICIT mode) serves ``simple``. Four tritonclient gRPC clients send it
requests back to back, in two phases of ``--seconds`` each, in the same run:

``quiet``
    nothing else happens;
``loading``
    a fifth client loads and unloads another model in a loop: a generated ONNX MLP with about
    ``--weights-mb`` MB of weights, so each load does real work (file read, graph
    optimisation, session creation).

The table gives each phase's request count, p50 and p99 latency, and the loading/quiet ratios.
A ratio near 1.0 means loads run off the inference path; the target is p99 ≤ 1.5×. On a
2-core machine the load itself competes for the same cores as the clients and the server, so
some rise is physical, not a scheduling fault.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper

from bench.common import serving

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 4


def write_big_model(folder: Path, weights_mb: float) -> None:
    """An FP32 MLP x[?,W] -> W -> W -> y[?,W] with W chosen for ``weights_mb`` of weights."""
    width = int((weights_mb * 1e6 / 4 / 3) ** 0.5)
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((width, width), dtype=np.float32),
                                       f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"]),
             helper.make_node("Relu", ["h0"], ["r0"]),
             helper.make_node("MatMul", ["r0", "w1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    (folder / "big" / "1").mkdir(parents=True)
    onnx.save(model, folder / "big" / "1" / "model.onnx")
    (folder / "big" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')


def simple_inputs() -> list[grpcclient.InferInput]:
    row = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(row)
    return inputs


def run_phase(url: str, seconds: float, with_loads: bool) -> tuple[list[float], int]:
    """Latencies (µs) of every request the clients sent, and how many loads completed."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(CLIENTS)]
    loads = [0]

    def client_loop(index: int) -> None:
        client, inputs = grpcclient.InferenceServerClient(url), simple_inputs()
        while not stop.is_set():
            started = time.perf_counter()
            client.infer("simple", inputs)
            latencies[index].append((time.perf_counter() - started) * 1e6)

    def load_loop() -> None:
        client = grpcclient.InferenceServerClient(url)
        while not stop.is_set():
            client.load_model("big")
            client.unload_model("big")
            loads[0] += 1

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(CLIENTS)]
    if with_loads:
        threads.append(threading.Thread(target=load_loop))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    return [value for values in latencies for value in values], loads[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--weights-mb", type=float, default=48.0)
    parser.add_argument("--server-args", default="",
                        help="extra `inferd serve` flags, e.g. '--cpu-executors 2'")
    args = parser.parse_args()
    with serving.temporary_folder("inferd-bench-") as work:
        repository = work / "repository"
        shutil.copytree(ROOT / "model_repository" / "simple", repository / "simple")
        print(f"generating a {args.weights_mb:g} MB model to load in a loop...", file=sys.stderr)
        write_big_model(repository, args.weights_mb)
        flags = ["--model-control-mode", "explicit", "--load-model", "simple",
                 "--log-verbose", "-1", *args.server_args.split()]
        with serving.running(repository, *flags, log=work / "inferd.log", model="simple",
                             via="grpc") as server:
            url = server.address("grpc")
            print(f"load average {os.getloadavg()[0]:.2f}; warming up...", file=sys.stderr)
            run_phase(url, 1.0, with_loads=False)
            rows = []
            for name, with_loads in (("quiet", False), ("loading", True)):
                print(f"phase {name}: {args.seconds:g} s...", file=sys.stderr)
                latencies, loads = run_phase(url, args.seconds, with_loads)
                rows.append((name, len(latencies), loads, *np.percentile(latencies, [50, 99])))
    print(f"\nsimple at concurrency {CLIENTS} (tritonclient gRPC), {args.seconds:g} s per phase,"
          f" load average {os.getloadavg()[0]:.2f}")
    print(f"{'phase':<8} {'requests':>9} {'loads':>6} {'p50 µs':>9} {'p99 µs':>9}")
    for name, count, loads, p50, p99 in rows:
        print(f"{name:<8} {count:>9} {loads:>6} {p50:>9.0f} {p99:>9.0f}")
    quiet, loading = rows
    print(f"loading/quiet: p50 {loading[3] / quiet[3]:.2f}×, p99 {loading[4] / quiet[4]:.2f}×,"
          f" throughput {loading[1] / quiet[1]:.2f}×")


if __name__ == "__main__":
    main()
