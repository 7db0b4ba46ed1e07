"""The traffic of the chaos mix: its model repository, the reference answers, the clients and
how each answer is judged.

Owns the repository the chaos test (``tests/e2e/test_chaos.py``), ``chaos.py`` and ``soak.py``
serve (``reliability_repository``'s four models, ``simple`` with dynamic batching, the
``accumulate`` sequence model and the ``stream_words`` decoupled one), the server's flags for
each placement of the onnx models, the stateless clients (HTTP, gRPC unary, the native zmq
client), each checking its answers against a reference computed here, and ``Tally``, which
keeps every request (``Call``: when it ran, on which model, how it ended). The stateful
clients (sequences, streams, shared memory, broken connections) are ``mix_clients'``. It
starts no server and takes no chaos action (``mix_chaos`` does; ``mix_faults`` ties each
failed request to the fault that explains it).

Every request ends in one outcome:

* ``ok``: the right answer;
* ``failed``: an error with a status and a message, kept whole (``Call.code``,
  ``Call.message``) for ``mix_faults`` to tie to an injected fault; one no fault explains is
  a problem;
* ``wrong``, ``hung`` (no answer within the deadline), ``lost`` (the connection broke
  without an answer): never allowed.

The client that breaks its own connections counts ``broken on purpose``, never a failure.
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

from bench.reliability import repository as reliability_repository
from inferd.protocols.client import Client as NativeClient
from inferd.protocols.errors import InferdError

OUTCOMES = ("ok", "failed", "wrong", "hung", "lost")
BAD = ("wrong", "hung", "lost")
BROKEN = "broken on purpose"  # the outcome of a request its own client broke
ENSEMBLE = reliability_repository.ENSEMBLE
SEQUENCE = "accumulate"
DECOUPLED = "stream_words"
STATELESS = reliability_repository.MODELS  # plain, batched, python, ensemble
MODELS = (*STATELESS, SEQUENCE, DECOUPLED)
ONNX_MODELS = ("simple", "identity_fp32", SEQUENCE)  # onnxruntime: placed by --cpu-executor
PYTHON_MODELS = ("add_sub", DECOUPLED)  # always in processes of their own
# The models whose requests go through others: the ensemble's steps (its config).
STEPS = {ENSEMBLE: ("add_sub", "identity_fp32")}
SHARED_MEMORY_MODEL = "identity_fp32"
BATCHING = "\ndynamic_batching { max_queue_delay_microseconds: 500 }\n"
# Where the onnx models' CPU instances run: the server's own process (inferd's default) or a
# CPU executor process, which a SIGKILL of the executors reaches too.
PLACEMENTS = {"server": (), "process": ("--cpu-executor=process",)}
# What an error's status becomes: the gRPC name of the code (HTTP's statuses as inferd maps
# them); an error inside a stream carries none.
HTTP_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 503: "UNAVAILABLE"}
IN_STREAM = "in-stream"
DATATYPE = {np.dtype(np.int32): "INT32", np.dtype(np.float32): "FP32"}
WORDS = ("alpha", "beta", "gamma", "delta", "eta", "theta", "kappa", "lambda")


def server_flags(placement: str) -> tuple[str, ...]:
    """The server's flags for the mix: every model loaded at start-up and controlled by the
    chaos, the onnx models placed as ``placement`` (a ``PLACEMENTS`` key) says."""
    return ("--model-control-mode=explicit", "--exit-timeout-secs=10",
            "--allow-client-shm=true", *PLACEMENTS[placement],
            *(f"--load-model={name}" for name in MODELS))


SERVER_FLAGS = server_flags("process")  # soak.py's: a SIGKILL of the executors reaches all


def build_repository(folder: Path) -> Path:
    """The mix's repository under ``folder``; returns its root."""
    root = reliability_repository.build(folder)
    for name in (SEQUENCE, DECOUPLED):
        shutil.copytree(reliability_repository.EXAMPLES / name, root / name)
    with (root / "simple" / "config.pbtxt").open("a", encoding="utf-8") as config:
        config.write(BATCHING)
    return root


# (outcome, code, message): how one request ended, its error's status and message if any.
Outcome = tuple[str, str, str]
OK: Outcome = ("ok", "", "")


def failed(code: str, message: str) -> Outcome:
    """An error answered: ``failed``, for ``mix_faults`` to explain; one without a message
    explains nothing and is wrong."""
    return ("failed", code, message) if message else ("wrong", code, "an error without a message")


@dataclass(frozen=True, slots=True)
class Call:
    """One request of a client: what it asked, when, and how it ended. ``since`` is when what
    it depends on began: the request itself, or its client's sequence, stream or registered
    shared memory region (a fault since then may explain its failure)."""

    kind: str
    model: str
    since: float  # time.monotonic()
    started: float
    ended: float
    outcome: str
    code: str = ""
    message: str = ""


@dataclass
class Tally:
    """Every request, the counts by kind and outcome, and the problems seen; shared by every
    client thread."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, call: Call) -> None:
        """A client's request."""
        with self.lock:
            self.calls.append(call)
            self._count(call.kind, call.outcome, f"{call.model}: {call.code} {call.message}",
                        call.ended - call.started)

    def add(self, kind: str, outcome: str, detail: str = "", seconds: float = 0.0) -> None:
        """Anything else: a control request, a malformed one, a connection broken on
        purpose."""
        with self.lock:
            self._count(kind, outcome, detail, seconds)

    def _count(self, kind: str, outcome: str, detail: str, seconds: float) -> None:
        self.counts.setdefault(kind, Counter())[outcome] += 1
        if outcome == "ok":
            self.latencies.append(seconds)
        elif outcome in BAD:
            self.problems.append(f"{kind}: {outcome}: {detail[:300]}")
        elif outcome != BROKEN:
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

    def calls_so_far(self) -> list[Call]:
        with self.lock:
            return list(self.calls)


def _shape_of(message: str) -> str:
    """A message with its numbers blurred, to count errors by kind."""
    return re.sub(r"\d+", "#", message)[:120]


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


def http_error(status: int, message: str) -> Outcome:
    return failed(HTTP_CODES.get(status, f"HTTP {status}"), message)


def grpc_error(error: InferenceServerException) -> Outcome:
    message = error.message() or ""
    if error.status() is None:  # an error inside a stream: its message alone says what
        return failed(IN_STREAM, message)
    status = str(error.status())
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return "hung", status, message
    return failed(status.removeprefix("StatusCode."), message)


def native_error(error: InferdError) -> Outcome:
    if "timed out" in error.message or error.code.value == "DEADLINE_EXCEEDED" and \
            "no reply" in error.message:
        return "hung", error.code.value, error.message
    return failed(error.code.value, error.message)


def error_of(response: requests.Response) -> str:
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return ""
    return message if isinstance(message, str) else ""


# ---------------------------------------------------------------- clients


def http_once(session: requests.Session, target: Target, model: str,
              rng: random.Random) -> Outcome:
    """One stateless inference on ``model``, JSON or binary at random."""
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
        return http_error(response.status_code, error_of(response))
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    for name, want in expected_outputs(model, inputs).items():
        got = np.array(outputs[name]["data"], dtype=want.dtype)
        check(model, name, got, want)
    return OK


def grpc_tensors(inputs: dict[str, np.ndarray]) -> list[Any]:
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), DATATYPE[array.dtype])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def grpc_once(client: Any, target: Target, model: str, rng: random.Random) -> Outcome:
    inputs = inputs_for(model, rng)
    result = client.infer(model, grpc_tensors(inputs), client_timeout=target.deadline)
    for name, want in expected_outputs(model, inputs).items():
        check(model, name, result.as_numpy(name), want)
    return OK


def native_once(client: NativeClient, model: str, rng: random.Random) -> Outcome:
    inputs = inputs_for(model, rng)
    result = client.infer(model, inputs)
    for name, want in expected_outputs(model, inputs).items():
        check(model, name, result.as_numpy(name), want)
    return OK
