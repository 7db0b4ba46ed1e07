"""Moving a version label under load (issue 37, point 2): requests, failures and latency while
``stable`` moves between versions of one model, against the same traffic with no move.

One ONNX model (``rollout``: an FP32 MatMul x[?,W] -> y[?,W], versions 1, 2 and 3 with
different weights, ``version_policy { latest { num_versions: 1 } }``, ``version_labels.toml``
saying ``stable = 1``) is served in EXPLICIT mode with ``--load-model rollout``: versions 1
(the label) and 3 (the policy) load. ``--clients`` tritonclient HTTP clients send requests that
name no version back to back, and the script, through ``POST v2/repository/models/rollout/
labels``, moves ``stable`` to 2, then back to 1, ``--moves`` times: each move loads (and warms
up) the target, routes the requests to it, and unloads the version it left (the policy keeps
3). Between moves the traffic runs ``--settle`` seconds with nothing moving.

The table gives, for the requests that started while a move was under way (``switching``) and
for those that started between moves (``steady``): requests, failures, requests/s, p50 and
p99 latency; then each move's time, and how many requests started after a move were answered
by its target. A failure is any error a client saw. A script, not a
test: on a shared machine the figures move.

    .venv/bin/python -m bench.performance.label_switch [--clients 8] [--moves 5] [--width 512]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from bench.common import serving

MODEL = "rollout"


def write_model(repository: Path, width: int) -> None:
    folder = repository / MODEL
    for version in (1, 2, 3):
        rng = np.random.default_rng(version)
        weights = numpy_helper.from_array(
            rng.standard_normal((width, width), dtype=np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], f"{MODEL}{version}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
            [weights])
        (folder / str(version)).mkdir(parents=True)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                    ir_version=8), folder / str(version) / "model.onnx")
    (folder / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [{{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
        f'output [{{ name: "y" data_type: TYPE_FP32 dims: [ {width} ] }}]\n'
        "dynamic_batching { }\nversion_policy { latest { num_versions: 1 } }\n"
        # Each version is warmed up at load, before any request is routed to it.
        f'model_warmup [{{ name: "w" batch_size: 1 inputs {{ key: "x" value {{ '
        f'data_type: TYPE_FP32 dims: [ {width} ] random_data: true }} }} }}]\n')
    (folder / "version_labels.toml").write_text("[labels]\nstable = 1\n")


@dataclass(frozen=True, slots=True)
class Sample:
    started: float
    seconds: float
    version: str  # "" for a failure
    error: str = ""


def client(address: str, width: int, stop: threading.Event, samples: list[Sample]) -> None:
    connection = httpclient.InferenceServerClient(address, network_timeout=60)
    inputs = [httpclient.InferInput("x", [1, width], "FP32")]
    inputs[0].set_data_from_numpy(np.ones((1, width), dtype=np.float32))
    try:
        while not stop.is_set():
            started = time.monotonic()
            try:
                result = connection.infer(MODEL, inputs)
                version = result.get_response()["model_version"]
                samples.append(Sample(started, time.monotonic() - started, version))
            except Exception as error:  # noqa: BLE001 - every failure is the figure
                samples.append(Sample(started, time.monotonic() - started, "", str(error)))
    finally:
        connection.close()


def move(address: str, version: int) -> float:
    """Move ``stable`` to ``version``; the seconds the switch took."""
    started = time.monotonic()
    request = urllib.request.Request(
        f"http://{address}/v2/repository/models/{MODEL}/labels",
        data=json.dumps({"labels": {"stable": version}}).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())
    assert answer["labels"]["stable"] == version, answer
    return time.monotonic() - started


def row(name: str, samples: list[Sample], seconds: float) -> str:
    failures = [s for s in samples if not s.version]
    latencies = np.array([s.seconds for s in samples if s.version]) * 1000
    p50, p99 = (np.percentile(latencies, 50), np.percentile(latencies, 99)) \
        if len(latencies) else (0.0, 0.0)
    rate = len(samples) / seconds if seconds else 0.0
    return (f"{name:<10} {len(samples):>9} {len(failures):>9} {rate:>10.1f} "
            f"{p50:>8.2f} {p99:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--moves", type=int, default=5, help="odd: stable ends on 2")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds of traffic between moves")
    parser.add_argument("--width", type=int, default=512, help="the MatMul's width")
    arguments = parser.parse_args()
    with serving.temporary_folder("inferd-label-switch-") as folder:
        repository = folder / "repository"
        write_model(repository, arguments.width)
        with serving.running(repository, "--model-control-mode=explicit",
                             f"--load-model={MODEL}", log=folder / "server.log", model=MODEL,
                             via="http") as server:
            address = server.address("http")
            stop = threading.Event()
            per_client: list[list[Sample]] = [[] for _ in range(arguments.clients)]
            threads = [threading.Thread(target=client, args=(address, arguments.width, stop,
                                                             samples))
                       for samples in per_client]
            for thread in threads:
                thread.start()
            windows: list[tuple[float, float]] = []
            time.sleep(arguments.settle)
            began = time.monotonic()
            for index in range(arguments.moves):
                started = time.monotonic()
                move(address, 2 if index % 2 == 0 else 1)
                windows.append((started, time.monotonic()))
                time.sleep(arguments.settle)
            stop.set()
            for thread in threads:
                thread.join()
            ended = time.monotonic()
    samples = [s for each in per_client for s in each if s.started >= began]
    switching = [s for s in samples if any(a <= s.started < b for a, b in windows)]
    steady = [s for s in samples if not any(a <= s.started < b for a, b in windows)]
    switch_secs = sum(b - a for a, b in windows)
    print(f"{arguments.clients} HTTP clients, {arguments.moves} moves of 'stable' (1 -> 2 -> "
          f"1 ...), MatMul width {arguments.width}, {arguments.settle:g} s between moves")
    print(f"{'phase':<10} {'requests':>9} {'failures':>9} {'req/s':>10} {'p50 ms':>8} "
          f"{'p99 ms':>8}")
    print(row("switching", switching, switch_secs))
    print(row("steady", steady, ended - began - switch_secs))
    print("moves (s): " + ", ".join(f"{b - a:.2f}" for a, b in windows))
    errors = sorted({s.error for s in samples if s.error})
    for error in errors[:5]:
        print(f"  failure: {error}")
    targets = [2 if index % 2 == 0 else 1 for index in range(len(windows))]
    bounds = [b for _, b in windows]
    nexts = [a for a, _ in windows[1:]] + [ended]
    after = [s for end, following, target in zip(bounds, nexts, targets, strict=True)
             for s in samples if end <= s.started < following and s.version]
    on_target = sum(1 for end, following, target in zip(bounds, nexts, targets, strict=True)
                    for s in samples if end <= s.started < following
                    and s.version == str(target))
    print(f"requests started after a move answered by its target: {on_target}/{len(after)}")
    last = [each[-1].version for each in per_client if each]
    print(f"last version answered per client (stable ends on {targets[-1]}): "
          f"{', '.join(last)}")


if __name__ == "__main__":
    main()
