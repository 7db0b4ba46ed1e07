"""One ensemble call against the same pipeline orchestrated by the client.

The example repository's OCR pipeline (``preprocess`` → ``craft`` → ``refinenet`` →
``postprocess_0``, wired as the ensemble ``ocr``) is served by one ``inferd serve``. In the
same run, over gRPC with tritonclient, at concurrency 1 and 8 (``--concurrency``), for
``--seconds`` each:

``ensemble``
    one ``ocr`` call per request: strings in, strings out; the images, score maps and
    features between the steps never leave the server;
``client``
    the client calls the four models one after the other, sending each step the tensors the
    ensemble would have passed inside the server (so the intermediates cross the wire twice).

The table gives requests per second, p50 and p99 latency, and the tensor bytes each request
puts on the wire (sent plus received, tensor contents only: protocol framing excluded); then
the ensemble/client ratios. The target is an ensemble throughput of at least 1.5× the
client-orchestrated one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from bench.common import serving

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ("preprocess", "craft", "refinenet", "postprocess_0", "ocr")
TEXTS = 4  # strings per request
TEXT_BYTES = 1024


def texts() -> np.ndarray:
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 256, TEXT_BYTES, dtype=np.uint8).tobytes() for _ in range(TEXTS)]
    return np.array(rows, dtype=np.object_).reshape(TEXTS, 1)


def call(client: grpcclient.InferenceServerClient, model: str,
         inputs: dict[str, np.ndarray], outputs: list[str]) -> tuple[dict[str, np.ndarray], int]:
    """Outputs of one call, and the tensor bytes it moved (sent plus received)."""
    tensors = []
    sent = 0
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
        sent += _nbytes(array)
    result = client.infer(model, tensors,
                          outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
    answers = {name: result.as_numpy(name) for name in outputs}
    return answers, sent + sum(_nbytes(a) for a in answers.values())


def _nbytes(array: np.ndarray) -> int:
    if array.dtype == np.object_:
        return sum(4 + len(item) for item in array.flat)
    return int(array.nbytes)


def ensemble_request(client: grpcclient.InferenceServerClient, data: np.ndarray) -> int:
    answers, moved = call(client, "ocr", {"INPUT": data}, ["OUTPUT"])
    assert answers["OUTPUT"].shape == (TEXTS, 2)
    return moved


def client_request(client: grpcclient.InferenceServerClient, data: np.ndarray) -> int:
    pre, moved1 = call(client, "preprocess", {"INPUT": data}, ["images", "sizes"])
    craft, moved2 = call(client, "craft", {"images": pre["images"]}, ["score", "features"])
    refine, moved3 = call(client, "refinenet", craft, ["refined"])
    post, moved4 = call(client, "postprocess_0", {
        "score": craft["score"], "refined": refine["refined"], "texts": data,
        "sizes": pre["sizes"]}, ["OUTPUT"])
    assert post["OUTPUT"].shape == (TEXTS, 2)
    return moved1 + moved2 + moved3 + moved4


def measure(url: str, request: Callable[[grpcclient.InferenceServerClient, np.ndarray], int],
            concurrency: int, seconds: float) -> tuple[float, float, float, int]:
    """(requests/s, p50 µs, p99 µs, bytes per request) of ``request`` in a closed loop."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    moved = [0]

    def loop(index: int) -> None:
        client, data = grpcclient.InferenceServerClient(url), texts()
        while not stop.is_set():
            started = time.perf_counter()
            moved[0] = request(client, data)
            latencies[index].append((time.perf_counter() - started) * 1e6)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    values = [v for per_thread in latencies for v in per_thread]
    p50, p99 = np.percentile(values, [50, 99])
    return len(values) / seconds, float(p50), float(p99), moved[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", default="1,8")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    rows = []
    with serving.temporary_folder("inferd-bench-") as work:
        repository = work / "repository"
        for name in PIPELINE:
            shutil.copytree(ROOT / "model_repository" / name, repository / name)
        with serving.running(repository, "--log-verbose", "-1", log=work / "inferd.log",
                             model="ocr", via="grpc") as server:
            url = server.address("grpc")
            for concurrency in concurrencies:
                for name, request in (("ensemble", ensemble_request),
                                      ("client", client_request)):
                    print(f"{name} at concurrency {concurrency}: {args.seconds:g} s...",
                          file=sys.stderr)
                    measure(url, request, concurrency, 1.0)  # warm-up
                    rows.append((name, concurrency,
                                 *measure(url, request, concurrency, args.seconds)))
    print(f"\nOCR pipeline, {TEXTS} strings of {TEXT_BYTES} B per request, tritonclient gRPC,"
          f" {args.seconds:g} s per cell, load average {os.getloadavg()[0]:.2f}")
    print(f"{'path':<9} {'conc':>4} {'req/s':>8} {'p50 µs':>9} {'p99 µs':>9} {'wire B/req':>11}")
    for name, concurrency, rate, p50, p99, moved in rows:
        print(f"{name:<9} {concurrency:>4} {rate:>8.1f} {p50:>9.0f} {p99:>9.0f} {moved:>11}")
    for concurrency in concurrencies:
        ensemble = next(r for r in rows if r[0] == "ensemble" and r[1] == concurrency)
        client = next(r for r in rows if r[0] == "client" and r[1] == concurrency)
        print(f"concurrency {concurrency}: ensemble/client throughput {ensemble[2] / client[2]:.2f}×,"
              f" p50 {ensemble[3] / client[3]:.2f}×, wire bytes {ensemble[5] / client[5]:.3f}×")


if __name__ == "__main__":
    main()
