"""The first request to an ensemble after a load and after a composing model's reload, with
and without ``model_warmup`` on the ensemble (issue 37, point 4).

Two ensembles of one step each, ``warm`` (with a warm-up sample) and ``cold`` (without), over
two copies of a python model whose first ``execute`` after ``initialize`` stands for a cold
start (first-call compilation, lazy allocation): it sleeps ``--cold-start-ms``, later calls
do not. For each ensemble the table gives the latency of the first request after the load and
after a reload of its composing model (a changed config: a new python process), the median of
the ``--requests`` that follow, and the first's ratio to that median, plus how long the load and
the reload took (the warm-up moves the cold start there). A script, not a test: on a shared
machine the numbers move.

    .venv/bin/python -m bench.performance.warm_ensembles [--cold-start-ms 500] [--requests 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from bench.common import serving

MODEL = """import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.cold = True

    def execute(self, requests):
        if self.cold:
            time.sleep({seconds})
            self.cold = False
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
WARMUP = """model_warmup [ { name: "zeros" batch_size: 1
  inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""


def composing_config(name: str, generation: int) -> str:
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
            f'parameters {{ key: "generation" value {{ string_value: "{generation}" }} }}\n')


def ensemble_config(name: str, step: str, warmup: str) -> str:
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            f'ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1 '
            'input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } } ] }\n'
            + warmup)


def write_repository(root: Path, cold_start_secs: float) -> None:
    for ensemble, step, warmup in (("warm", "warm_step", WARMUP), ("cold", "cold_step", "")):
        (root / ensemble / "1").mkdir(parents=True)
        (root / ensemble / "config.pbtxt").write_text(ensemble_config(ensemble, step, warmup))
        (root / step / "1").mkdir(parents=True)
        (root / step / "config.pbtxt").write_text(composing_config(step, 1))
        (root / step / "1" / "model.py").write_text(MODEL.format(seconds=cold_start_secs))


def latencies_ms(client: grpcclient.InferenceServerClient, model: str, count: int
                 ) -> list[float]:
    tensor = grpcclient.InferInput("X", [4], "FP32")
    tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.infer(model, [tensor])
        times.append((time.perf_counter() - started) * 1000)
    return times


def timed_ms(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def server_ready(client: grpcclient.InferenceServerClient) -> bool:
    try:
        return bool(client.is_server_ready())
    except Exception:  # noqa: BLE001 - not listening yet
        return False


Row = tuple[str, str, float, float, float, float]


def measure(client: grpcclient.InferenceServerClient, repository: Path, ensemble: str,
            step: str, requests: int) -> list[Row]:
    """Load ``ensemble``, time its requests, reload ``step`` (a changed config), time again."""
    load_ms = timed_ms(lambda: client.load_model(ensemble))
    after_load = latencies_ms(client, ensemble, requests + 1)
    (repository / step / "config.pbtxt").write_text(composing_config(step, 2))
    reload_ms = timed_ms(lambda: client.load_model(step))
    after_reload = latencies_ms(client, ensemble, requests + 1)
    rows = []
    for moment, took, times in (("load", load_ms, after_load),
                                ("reload", reload_ms, after_reload)):
        median = statistics.median(times[1:])
        rows.append((ensemble, moment, took, times[0], median, times[0] / median))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold-start-ms", type=float, default=500.0)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    rows: list[Row] = []
    with serving.temporary_folder("inferd-warm-ensembles-") as folder:
        write_repository(folder / "repository", args.cold_start_ms / 1000)
        server = serving.start(folder / "repository", "--model-control-mode", "explicit",
                               log=folder / "server.log")
        try:
            with grpcclient.InferenceServerClient(server.address("grpc")) as client:
                serving.wait_ready(server, lambda: server_ready(client))
                for ensemble, step in (("warm", "warm_step"), ("cold", "cold_step")):
                    rows += measure(client, folder / "repository", ensemble, step,
                                    args.requests)
        finally:
            serving.stop_process(server.process)
    print(f"cold start {args.cold_start_ms:g} ms, {args.requests} requests after each first")
    print(f"{'ensemble':<9} {'after':<7} {'load ms':>8} {'first ms':>9} {'median ms':>10} "
          f"{'first/median':>13}")
    for ensemble, moment, took, first, median, ratio in rows:
        print(f"{ensemble:<9} {moment:<7} {took:>8.1f} {first:>9.1f} {median:>10.2f} "
              f"{ratio:>13.1f}")


if __name__ == "__main__":
    main()
