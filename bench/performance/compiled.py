"""The compiled request path against its pure-Python source, one step of a request at a time.

Each row is one thing an inference does on its way through the server, timed on ``simple``'s
tensors (two INT32 [1, 16] inputs, two outputs): the HTTP frontend's decode of a binary infer
body and encode of its response, the gRPC frontend's split and decode of a ModelInferRequest
and encode of its response, the kernel wire's encode and decode of an ``InferBatch`` (1 and 8
requests) and of its ``BatchResult``, and the scheduler's own work for one request (admit,
form the batch, hand back its result). The rows run twice, in two child processes: once with
``INFERD_COMPILE=0`` (``inferd.protocols.build`` then loads every compiled module from its
source) and once as installed. The two alternate ``--rounds`` times; the table gives, for each
step, the least CPU time per call over every timing of its build (CPU time of this process,
so that waiting for a core on a shared machine does not count), pure beside compiled, and
the speed-up. A script, not a test: numbers on a busy machine still move.

    .venv/bin/python -m bench.performance.compiled [--rounds 3] [--repeats 5] [--seconds 0.2]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from bench.common.pure_or_compiled import ROOT, Step, cpu_microseconds, run_child

MODULE = "bench.performance.compiled"


def _simple_tensors() -> tuple[Any, Any]:
    from inferd.protocols.messages import Tensor

    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.ones((1, 16), dtype=np.int32)
    return Tensor("INPUT0", "INT32", (1, 16), first), Tensor("INPUT1", "INT32", (1, 16), second)


def _http_steps() -> dict[str, Step]:
    from inferd.protocols.kserve_http import infer as kserve_http
    from inferd.protocols.messages import InferResponse

    first, second = _simple_tensors()
    header = json.dumps({
        "inputs": [
            {"name": t.name, "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}} for t in (first, second)
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT1", "parameters": {"binary_data": True}}],
    }).encode()
    body = header + first.data.tobytes() + second.data.tobytes()
    length = len(header)
    _, encoding = kserve_http.decode_infer_request("simple", "", body, length)
    response = InferResponse("simple", "1", (first, second))
    return {
        "HTTP decode_infer_request": lambda: kserve_http.decode_infer_request(
            "simple", "", body, length),
        "HTTP encode_infer_response": lambda: kserve_http.encode_infer_response(
            response, encoding),
    }


def _grpc_steps() -> dict[str, Step]:
    from tritonclient.grpc import service_pb2

    from inferd.protocols.kserve_grpc import framing as kserve_grpc_wire
    from inferd.protocols.kserve_grpc import infer as kserve_grpc
    from inferd.protocols.messages import InferResponse

    first, second = _simple_tensors()
    request = service_pb2.ModelInferRequest(model_name="simple")
    for tensor in (first, second):
        request.inputs.add(name=tensor.name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(tensor.data.tobytes())
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.add(name=name)
    data = request.SerializeToString()
    response = InferResponse("simple", "1", (first, second))

    def decode() -> object:
        parsed = kserve_grpc_wire.parse_infer_request(data)
        return kserve_grpc.decode_infer_request(parsed.header, parsed.raw_input_contents)

    def encode() -> object:
        header, raw = kserve_grpc.encode_infer_response(response)
        return kserve_grpc_wire.serialize_infer_response(header, raw)

    return {"gRPC parse + decode_infer_request": decode, "gRPC encode + serialize": encode}


def _wire_steps() -> dict[str, Step]:
    from inferd.protocols.messages import (
        BatchResult,
        Envelope,
        InferBatch,
        InferRequest,
        InferResponse,
    )
    from inferd.protocols.wire import codec as wire

    first, second = _simple_tensors()
    request = InferRequest("simple", (first, second), id="42")
    response = InferResponse("simple", "1", (first, second), id="42")
    steps: dict[str, Step] = {}
    for count in (1, 8):
        batch = Envelope(7, "scheduler", "executor/cpu", InferBatch(
            "simple", 1, 0, (request,) * count), reply_to=None, deadline=None)
        frames = [bytes(frame) for frame in wire.encode(batch)]
        steps[f"wire encode InferBatch x{count}"] = lambda b=batch: wire.encode(b)
        steps[f"wire decode InferBatch x{count}"] = lambda f=frames: wire.decode(f)
    result = Envelope(8, "executor/cpu", "scheduler",
                      BatchResult((response,) * 8, (1, 2, 3), 5), reply_to=7)
    result_frames = [bytes(frame) for frame in wire.encode(result)]
    steps["wire encode BatchResult x8"] = lambda: wire.encode(result)
    steps["wire decode BatchResult x8"] = lambda: wire.decode(result_frames)
    return steps


def _scheduler_steps() -> dict[str, Step]:

    from google.protobuf import text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from inferd.kernel.actors.scheduler.progress import Progress
    from inferd.kernel.actors.scheduler.requests import Slot
    from inferd.kernel.actors.scheduler.version import Version
    from inferd.protocols.messages import BatchResult, InferRequest, InferResponse

    config = text_format.Parse(
        (ROOT / "model_repository/simple/config.pbtxt").read_text(),
        ModelConfig())
    version = Version.of("simple", 1, config, [Slot("executor/cpu0", 0)], Progress())
    first, second = _simple_tensors()
    request = InferRequest("simple", (first, second), id="42")
    reply = BatchResult((InferResponse("simple", "1", (first, second), id="42"),))

    def answer(version: Version, slot: Slot, batch: list[Any]) -> None:
        version.finish_batch(slot, batch, reply)  # an executor that answers at once

    def one_request() -> object:
        queued = version.admit(request, time.perf_counter_ns())
        version.pump(answer, answer)  # type: ignore[arg-type]
        assert queued.result is not None
        return queued.result

    return {"scheduler admit + pump + finish_batch": one_request}


def _child(seconds: float, repeats: int) -> None:
    from inferd.protocols import build

    steps = {**_http_steps(), **_grpc_steps(), **_wire_steps(), **_scheduler_steps()}
    timings = {name: cpu_microseconds(step, seconds, repeats) for name, step in steps.items()}
    print(json.dumps({"build": build.describe(), "timings": timings}))


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    timings = {name: min(run["timings"][name] for run in runs) for name in runs[0]["timings"]}
    return {"build": runs[0]["build"], "timings": timings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per step (least)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating pure/compiled runs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(options.seconds, options.repeats)
        return
    # Alternating rounds, each step's best kept: a burst of load elsewhere hits one round.
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(options.rounds):
        for compiled_run in (False, True):
            runs[compiled_run].append(
                run_child(MODULE, compiled_run, options.seconds, options.repeats))
    pure, compiled = (_best(runs[False]), _best(runs[True]))
    print(f"pure:     {pure['build']}")
    print(f"compiled: {compiled['build']}")
    width = max(len(name) for name in pure["timings"])
    print(f"\n{'step':<{width}}  {'pure µs':>9}  {'compiled µs':>11}  {'speed-up':>8}")
    for name, pure_us in pure["timings"].items():
        compiled_us = compiled["timings"][name]
        speed_up = pure_us / compiled_us
        print(f"{name:<{width}}  {pure_us:9.2f}  {compiled_us:11.2f}  {speed_up:7.2f}×")


if __name__ == "__main__":
    main()
