"""The traffic of the chaos mix: its model repository, the reference answers, the clients and
how each answer is judged.

Owns the repository the chaos test (``tests/e2e/test_chaos.py``), ``chaos.py`` and ``soak.py``
serve (``reliability_repository``'s four models, ``simple`` with dynamic batching, the
``accumulate`` sequence model and the ``stream_words`` decoupled one), the stateless clients
(HTTP, gRPC unary, the native zmq client), each checking its answers against a reference
computed here, and ``Tally``, which counts every request by outcome. The stateful clients
(sequences, streams, shared memory, broken connections) are ``mix_clients``'. It starts no
server and takes no chaos action (``mix_chaos`` does); callers import it with bench/ on
``sys.path``.

Every request ends in one outcome:

* ``ok``: the right answer;
* ``retryable``: 503 (gRPC UNAVAILABLE) with a message, as while an executor restarts;
* ``own doing``: an error the client side caused: its model unloaded or reloaded by the
  chaos, its shared memory region unregistered, its sequence dropped by a reload, its own
  broken connection or cancelled call;
* ``wrong``, ``hung`` (no answer within the deadline), ``lost`` (the connection broke
  without an answer): never allowed.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import reliability_repository

from inferd.protocols.client import Client as NativeClient
from inferd.protocols.errors import InferdError

OUTCOMES = ("ok", "retryable", "own doing", "wrong", "hung", "lost")
BAD = ("wrong", "hung", "lost")
ENSEMBLE = reliability_repository.ENSEMBLE
SEQUENCE = "accumulate"
DECOUPLED = "stream_words"
STATELESS = reliability_repository.MODELS  # plain, batched, python, ensemble
MODELS = (*STATELESS, SEQUENCE, DECOUPLED)
BATCHING = "\ndynamic_batching { max_queue_delay_microseconds: 500 }\n"
# The server's flags for the mix: every model loaded at start-up and controlled by the chaos,
# and the onnx models in a CPU executor process rather than the server's own, so a SIGKILL
# of the executors reaches them too.
SERVER_FLAGS = ("--model-control-mode=explicit", "--exit-timeout-secs=10",
                "--cpu-executor=process", "--allow-client-shm=true",
                *(f"--load-model={name}" for name in MODELS))
# 4xx answers the chaos itself causes: a model it unloaded or is reloading, a region it
# unregistered, a sequence whose state a reload or an executor's death dropped.
OWN_DOING = re.compile(
    r"unknown model|not found|not ready|unloading|shared memory region|START flag",
    re.IGNORECASE)
# What a stream's in-band errors say (they carry no status): an executor that died or
# restarts, a model being reloaded; each asks the client to retry.
RETRYABLE_IN_STREAM = re.compile(r"retry|exited with code|being reloaded|restarting",
                                 re.IGNORECASE)
DATATYPE = {np.dtype(np.int32): "INT32", np.dtype(np.float32): "FP32"}
WORDS = ("alpha", "beta", "gamma", "delta", "eta", "theta", "kappa", "lambda")


def build_repository(folder: Path) -> Path:
    """The mix's repository under ``folder``; returns its root."""
    root = reliability_repository.build(folder)
    for name in (SEQUENCE, DECOUPLED):
        shutil.copytree(reliability_repository.EXAMPLES / name, root / name)
    with (root / "simple" / "config.pbtxt").open("a", encoding="utf-8") as config:
        config.write(BATCHING)
    return root


@dataclass
class Tally:
    """Requests by kind and outcome, the current phase's successes, and the problems seen;
    shared by every client thread."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    phase: str = "warm-up"
    ok_by_phase: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, outcome: str, detail: str = "", seconds: float = 0.0) -> None:
        with self.lock:
            self.counts.setdefault(kind, Counter())[outcome] += 1
            if outcome == "ok":
                self.ok_by_phase[self.phase] += 1
                self.latencies.append(seconds)
            elif outcome in BAD:
                self.problems.append(f"{kind}: {outcome}: {detail[:300]}")
            else:
                self.errors[f"{kind}: {outcome}: {_shape_of(detail)}"] += 1

    def totals(self) -> Counter[str]:
        with self.lock:
            total: Counter[str] = Counter()
            for counter in self.counts.values():
                total.update(counter)
            return total

    def take_latencies(self) -> list[float]:
        with self.lock:
            taken, self.latencies = self.latencies, []
            return taken


def _shape_of(message: str) -> str:
    """A message with its numbers blurred, to count errors by kind."""
    return re.sub(r"\d+", "#", message)[:100]


class Wrong(Exception):
    """An answer that is not the right one."""


@dataclass(frozen=True)
class Target:
    """Where the clients find the server."""

    http: str  # host:port
    grpc: str
    zmq: str  # tcp://host:port
    deadline: float  # seconds a request may wait for its answer

    @property
    def base(self) -> str:
        return f"http://{self.http}"


# ---------------------------------------------------------------- references


def inputs_for(model: str, rng: random.Random) -> dict[str, np.ndarray]:
    if model == "simple":
        return {"INPUT0": random_array(rng, (1, 16), np.int32), "INPUT1": random_array(rng, (1, 16),
                                                                            np.int32)}
    if model == "identity_fp32":
        return {"INPUT0": random_array(rng, (rng.randint(1, 64),), np.float32)}
    if model == "add_sub":
        return {"INPUT0": random_array(rng, (4,), np.float32),
                "INPUT1": random_array(rng, (4,), np.float32)}
    return {"A": random_array(rng, (4,), np.float32), "B": random_array(rng, (4,), np.float32)}


def random_array(rng: random.Random, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    values = [rng.randint(-1000, 1000) for _ in range(int(np.prod(shape)))]
    return np.array(values, dtype=dtype).reshape(shape)


def expected_outputs(model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if model in ("simple", "add_sub"):
        return {"OUTPUT0": inputs["INPUT0"] + inputs["INPUT1"],
                "OUTPUT1": inputs["INPUT0"] - inputs["INPUT1"]}
    if model == "identity_fp32":
        return {"OUTPUT0": inputs["INPUT0"]}
    return {"SUM": inputs["A"] + inputs["B"]}


def check(model: str, name: str, got: np.ndarray | None, want: np.ndarray) -> None:
    if got is None or got.size != want.size or not np.array_equal(got.ravel(), want.ravel()):
        shown = None if got is None else got.ravel()[:4]
        raise Wrong(f"{model} {name}: got {shown}, want {want.ravel()[:4]}")


# ---------------------------------------------------------------- judging errors


def judge_http(status: int, message: str) -> str:
    if status == 503 and message:
        return "retryable"
    if 400 <= status < 500 and OWN_DOING.search(message):
        return "own doing"
    return "wrong"


def judge_grpc(error: InferenceServerException) -> str:
    status, message = str(error.status()), error.message() or ""
    if error.status() is None:  # an error inside a stream: its message alone says what
        if RETRYABLE_IN_STREAM.search(message):
            return "retryable"
        return "own doing" if OWN_DOING.search(message) else "wrong"
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return "hung"
    if status == "StatusCode.UNAVAILABLE" and message:
        return "retryable"
    if status in ("StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND") and \
            OWN_DOING.search(message):
        return "own doing"
    return "wrong"


def judge_native(error: InferdError) -> str:
    if "timed out" in error.message or error.code.value == "DEADLINE_EXCEEDED" and \
            "no reply" in error.message:
        return "hung"
    if error.code.value == "UNAVAILABLE":
        return "retryable"
    if error.code.value in ("INVALID_ARGUMENT", "NOT_FOUND") and OWN_DOING.search(error.message):
        return "own doing"
    return "wrong"


def error_of(response: requests.Response) -> str:
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return ""
    return message if isinstance(message, str) else ""


# ---------------------------------------------------------------- clients


def http_once(session: requests.Session, target: Target, rng: random.Random) -> tuple[str, str]:
    """One stateless inference, JSON or binary at random: (outcome, detail)."""
    model = rng.choice(STATELESS)
    inputs = inputs_for(model, rng)
    binary = rng.random() < 0.5
    entries = []
    for name, array in inputs.items():
        entry: dict[str, Any] = {"name": name, "shape": list(array.shape),
                                 "datatype": DATATYPE[array.dtype]}
        if binary:
            entry["parameters"] = {"binary_data_size": array.nbytes}
        else:
            entry["data"] = array.ravel().tolist()
        entries.append(entry)
    header = json.dumps({"inputs": entries}).encode()
    headers = {"Content-Type": "application/json"}
    body = header
    if binary:
        body = header + b"".join(array.tobytes() for array in inputs.values())
        headers = {"Inference-Header-Content-Length": str(len(header)),
                   "Content-Type": "application/octet-stream"}
    response = session.post(f"{target.base}/v2/models/{model}/infer", data=body,
                            headers=headers, timeout=(5, target.deadline))
    if response.status_code != 200:
        message = error_of(response)
        return judge_http(response.status_code, message), f"{model} {response.status_code} " \
            f"{message}"
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    for name, want in expected_outputs(model, inputs).items():
        got = np.array(outputs[name]["data"], dtype=want.dtype)
        check(model, name, got, want)
    return "ok", ""


def grpc_tensors(inputs: dict[str, np.ndarray]) -> list[Any]:
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), DATATYPE[array.dtype])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def grpc_once(client: Any, target: Target, rng: random.Random) -> tuple[str, str]:
    model = rng.choice(STATELESS)
    inputs = inputs_for(model, rng)
    result = client.infer(model, grpc_tensors(inputs), client_timeout=target.deadline)
    for name, want in expected_outputs(model, inputs).items():
        check(model, name, result.as_numpy(name), want)
    return "ok", ""


def native_once(client: NativeClient, target: Target, rng: random.Random) -> tuple[str, str]:
    model = rng.choice(STATELESS)
    inputs = inputs_for(model, rng)
    result = client.infer(model, inputs)
    for name, want in expected_outputs(model, inputs).items():
        check(model, name, result.as_numpy(name), want)
    return "ok", ""
