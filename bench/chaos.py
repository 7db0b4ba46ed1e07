"""A bounded chaos run against a real ``inferd serve``: steady HTTP and gRPC inference from
client threads while, at random, executor processes are killed (SIGKILL), models are
reloaded, unloaded and loaded again, and malformed and oversized requests are sent.

The server serves bench/reliability_repository.py's models in EXPLICIT mode (two onnx models,
a python-backend model in its own executor, and an ensemble of the python model and an onnx
one). Every request ends in exactly one of:

* succeeded: 200 (gRPC OK) with the right outputs (checked against numpy);
* failed correctly: a 4xx or 503 (gRPC INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE,
  RESOURCE_EXHAUSTED) with a message: a model being unloaded or reloaded, an executor that
  was killed with the request in flight or is restarting, a malformed request;
* wrong: a wrong answer, a 2xx for a malformed request, any other 5xx or gRPC code, or an
  error without a message;
* hung: no answer within ``--deadline`` seconds;
* lost: the connection broke without an answer.

wrong, hung and lost must be 0. The run prints a table of them per kind of traffic, the chaos
actions taken, and the server's memory (RSS) and descriptors before (after a warm-up) and
after (load stopped, every model loaded again); the exit code is 1 if anything was wrong,
hung or lost, or the server died or did not exit 0 on SIGTERM.

    python bench/chaos.py --duration 180
"""

from __future__ import annotations

import argparse
import faulthandler
import gzip
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, str(Path(__file__).parent))
import reliability_repository  # noqa: E402
import serving  # noqa: E402

ENSEMBLE = reliability_repository.ENSEMBLE
MAX_INPUT_SIZE = 1 << 20  # --http-max-input-size and --grpc-max-input-size: oversize is cheap
OUTCOMES = ("sent", "succeeded", "failed correctly", "wrong", "hung", "lost")
CORRECT_GRPC = frozenset({"StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND",
                          "StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"})
SHOWN_PROBLEMS = 12


class Wrong(Exception):
    """An answer that is not the right one."""


@dataclass
class Tally:
    """Outcomes per kind of traffic, shared by the threads."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    errors: dict[str, Counter[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, outcome: str, detail: str = "") -> None:
        with self.lock:
            counter = self.counts.setdefault(kind, Counter())
            counter["sent"] += 1
            counter[outcome] += 1
            if outcome == "failed correctly":
                self.errors.setdefault(kind, Counter())[_shape_of(detail)] += 1
            elif outcome != "succeeded":
                self.problems.append(f"{kind}: {outcome}: {detail[:300]}")


def _shape_of(message: str) -> str:
    """A message with its numbers and names blurred, to count errors by kind."""
    return "".join("#" if c.isdigit() else c for c in message)[:90]


# ---------------------------------------------------------------- requests and answers


def inputs_for(model: str, rng: random.Random) -> dict[str, np.ndarray]:
    if model == "simple":
        return {"INPUT0": rng_array(rng, (1, 16), np.int32), "INPUT1": rng_array(rng, (1, 16),
                                                                                 np.int32)}
    if model == "identity_fp32":
        return {"INPUT0": rng_array(rng, (rng.randint(1, 64),), np.float32)}
    if model == "add_sub":
        return {"INPUT0": rng_array(rng, (4,), np.float32), "INPUT1": rng_array(rng, (4,),
                                                                                np.float32)}
    return {"A": rng_array(rng, (4,), np.float32), "B": rng_array(rng, (4,), np.float32)}


def rng_array(rng: random.Random, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return np.array([rng.randint(-1000, 1000) for _ in range(int(np.prod(shape)))],
                    dtype=dtype).reshape(shape)


def expected_outputs(model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if model in ("simple", "add_sub"):
        return {"OUTPUT0": inputs["INPUT0"] + inputs["INPUT1"],
                "OUTPUT1": inputs["INPUT0"] - inputs["INPUT1"]}
    if model == "identity_fp32":
        return {"OUTPUT0": inputs["INPUT0"]}
    return {"SUM": inputs["A"] + inputs["B"]}


DATATYPE = {np.dtype(np.int32): "INT32", np.dtype(np.float32): "FP32"}


def http_infer(session: requests.Session, base: str, model: str, rng: random.Random,
               deadline: float) -> tuple[int, str]:
    """One inference, JSON or binary at random; ``(status, error message)``, raising
    ``Wrong`` for a wrong 200."""
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
    if binary:
        body = header + b"".join(array.tobytes() for array in inputs.values())
        headers = {"Inference-Header-Content-Length": str(len(header)),
                   "Content-Type": "application/octet-stream"}
    else:
        body, headers = header, {"Content-Type": "application/json"}
    response = session.post(f"{base}/v2/models/{model}/infer", data=body, headers=headers,
                            timeout=(5, deadline))
    if response.status_code != 200:
        return response.status_code, _error_of(response)
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    for name, want in expected_outputs(model, inputs).items():
        got = np.array(outputs[name]["data"], dtype=want.dtype).reshape(outputs[name]["shape"])
        if not np.array_equal(got, want.reshape(got.shape)) or got.size != want.size:
            raise Wrong(f"{model} {name}: got {got.ravel()[:4]}..., want {want.ravel()[:4]}...")
    return 200, ""


def _error_of(response: requests.Response) -> str:
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return ""
    return message if isinstance(message, str) else ""


def grpc_infer(client: grpcclient.InferenceServerClient, model: str, rng: random.Random,
               deadline: float) -> None:
    inputs = inputs_for(model, rng)
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), DATATYPE[array.dtype])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors, client_timeout=deadline)
    for name, want in expected_outputs(model, inputs).items():
        got = result.as_numpy(name)
        if got is None or got.size != want.size or not np.array_equal(got.ravel(), want.ravel()):
            raise Wrong(f"{model} {name} over gRPC: got {got}, want {want.ravel()[:4]}...")


def classify_http(status: int, message: str) -> str:
    if status == 200:
        return "succeeded"
    if (400 <= status < 500 or status == 503) and message:
        return "failed correctly"
    return "wrong"


def classify_grpc(error: InferenceServerException) -> str:
    status = str(error.status())
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return "hung"
    if status in CORRECT_GRPC and error.message():
        return "failed correctly"
    return "wrong"


# ---------------------------------------------------------------- load


def http_worker(base: str, seed: int, stop: threading.Event, tally: Tally,
                deadline: float) -> None:
    rng = random.Random(seed)
    session = requests.Session()
    while not stop.is_set():
        model = rng.choice(reliability_repository.MODELS)
        try:
            status, message = http_infer(session, base, model, rng, deadline)
            tally.add("HTTP infer", classify_http(status, message), f"{status} {message}")
        except Wrong as error:
            tally.add("HTTP infer", "wrong", str(error))
        except requests.Timeout as error:
            tally.add("HTTP infer", "hung", f"{model}: {error}")
        except requests.RequestException as error:
            tally.add("HTTP infer", "lost", f"{model}: {error}")
            session = requests.Session()


def grpc_worker(address: str, seed: int, stop: threading.Event, tally: Tally,
                deadline: float) -> None:
    rng = random.Random(seed)
    with grpcclient.InferenceServerClient(address) as client:
        while not stop.is_set():
            model = rng.choice(reliability_repository.MODELS)
            try:
                grpc_infer(client, model, rng, deadline)
                tally.add("gRPC infer", "succeeded")
            except Wrong as error:
                tally.add("gRPC infer", "wrong", str(error))
            except InferenceServerException as error:
                outcome = classify_grpc(error)
                tally.add("gRPC infer", outcome, f"{error.status()} {error.message()}")


# ---------------------------------------------------------------- malformed requests


def raw_http(address: tuple[str, int], data: bytes, deadline: float) -> tuple[int, str]:
    """Send ``data`` on a fresh connection; the status and error of the first response."""
    with socket.create_connection(address, timeout=deadline) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before everything was sent: read the answer
        received = b""
        while b"\r\n\r\n" not in received or len(received) < _expected_length(received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    if not received.startswith(b"HTTP/1.1 "):
        raise ConnectionError(f"no HTTP response: {received[:80]!r}")
    status = int(received[9:12])
    body = received.split(b"\r\n\r\n", 1)[1]
    try:
        message = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        message = ""
    return status, message if isinstance(message, str) else ""


def _expected_length(received: bytes) -> int:
    head, _, _ = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + 4 + int(line.split(b":", 1)[1])
    return len(received)


def malformed_http(base: str, address: tuple[str, int], rng: random.Random,
                   deadline: float) -> tuple[str, int, str]:
    """One malformed or oversized request, chosen at random: (what, status, message)."""
    url = f"{base}/v2/models/simple/infer"
    good = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}
                       for n in ("INPUT0", "INPUT1")]}
    choice = rng.randrange(11)
    if choice == 0:
        what, body, headers = "invalid JSON", b'{"inputs": [', {}
    elif choice == 1:
        bad = json.loads(json.dumps(good))
        bad["inputs"][0]["shape"] = [1, 15]
        what, body, headers = "wrong shape", json.dumps(bad).encode(), {}
    elif choice == 2:
        bad = json.loads(json.dumps(good))
        bad["inputs"][1]["datatype"] = "FP64"
        what, body, headers = "wrong datatype", json.dumps(bad).encode(), {}
    elif choice == 3:
        one_input = {"inputs": good["inputs"][:1]}
        what, body, headers = "missing input", json.dumps(one_input).encode(), {}
    elif choice == 4:
        what, body = "truncated binary", b'{"inputs":[{"name":"INPUT0","shape":[4],"datatype":' \
            b'"FP32","parameters":{"binary_data_size":16}}]}' + b"\0" * 7
        headers = {"Inference-Header-Content-Length": str(len(body) - 7)}
        url = f"{base}/v2/models/identity_fp32/infer"
    elif choice == 5:
        what, body, headers = "JSON nested 100000 deep", b"[" * 100_000 + b"]" * 100_000, {}
    elif choice == 6:
        bomb = gzip.compress(b"\0" * (MAX_INPUT_SIZE * 8))
        what, body, headers = "gzip bomb", bomb, {"Content-Encoding": "gzip"}
    elif choice == 7:
        what = "oversized body"
        head = (f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                f"Content-Length: {MAX_INPUT_SIZE * 2}\r\n\r\n").encode()
        status, message = raw_http(address, head + b"{" * 4096, deadline)
        return what, status, message
    elif choice == 8:
        what = "oversized head"
        head = b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
        status, message = raw_http(address, head, deadline)
        return what, status, message
    elif choice == 9:
        what = "garbage bytes"
        status, message = raw_http(address, bytes(rng.randrange(256) for _ in range(64))
                                   + b"\r\n\r\n", deadline)
        return what, status, message
    else:
        what, body, headers = "unknown model", json.dumps(good).encode(), {}
        url = f"{base}/v2/models/no_such_model/infer"
    response = requests.post(url, data=body, headers=headers, timeout=(5, deadline))
    return what, response.status_code, _error_of(response)


def malformed_grpc(client: grpcclient.InferenceServerClient, rng: random.Random,
                   deadline: float) -> str:
    choice = rng.randrange(3)
    if choice == 0:
        what, model = "oversized message", "identity_fp32"
        tensor = grpcclient.InferInput("INPUT0", [MAX_INPUT_SIZE // 2], "FP32")
        tensor.set_data_from_numpy(np.zeros(MAX_INPUT_SIZE // 2, np.float32))
    elif choice == 1:
        what, model = "wrong shape", "add_sub"
        tensor = grpcclient.InferInput("INPUT0", [5], "FP32")
        tensor.set_data_from_numpy(np.zeros(5, np.float32))
    else:
        what, model = "unknown model", "no_such_model"
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.zeros(4, np.float32))
    client.infer(model, [tensor], client_timeout=deadline)
    return what


def malformed_worker(base: str, address: tuple[str, int], grpc_address: str, seed: int,
                     stop: threading.Event, tally: Tally, deadline: float) -> None:
    rng = random.Random(seed)
    with grpcclient.InferenceServerClient(grpc_address) as client:
        while not stop.wait(rng.uniform(0.02, 0.2)):
            if rng.random() < 0.7:
                try:
                    what, status, message = malformed_http(base, address, rng, deadline)
                except (requests.Timeout, TimeoutError) as error:
                    tally.add("HTTP malformed", "hung", str(error))
                    continue
                except (requests.RequestException, OSError) as error:
                    tally.add("HTTP malformed", "lost", str(error))
                    continue
                # 503: the model is being unloaded or reloaded, which is checked first (as
                # Triton does) and is the right answer too.
                outcome = ("failed correctly" if (400 <= status < 500 or status == 503)
                           and message else "wrong")
                tally.add("HTTP malformed", outcome, f"{what}: {status} {message}")
                continue
            try:
                what = malformed_grpc(client, rng, deadline)
                tally.add("gRPC malformed", "wrong", f"{what}: accepted")
            except InferenceServerException as error:
                outcome = classify_grpc(error)
                tally.add("gRPC malformed", outcome, f"{error.status()} {error.message()}")


# ---------------------------------------------------------------- chaos


@dataclass
class Chaos:
    server_pid: int
    base: str
    tally: Tally
    deadline: float
    actions: Counter[str] = field(default_factory=Counter)

    killed: set[int] = field(default_factory=set)

    def kill_executor(self, rng: random.Random) -> None:
        children = psutil.Process(self.server_pid).children(recursive=True)
        executors = [c for c in children if "inferd.kernel.executor_process" in
                     " ".join(_cmdline(c))]
        if not executors:
            return
        victim = rng.choice(executors)
        name = _cmdline(victim)[_cmdline(victim).index("--name") + 1]
        try:
            self.killed.add(victim.pid)
            os.kill(victim.pid, signal.SIGKILL)
            self.actions[f"killed {name}"] += 1
        except ProcessLookupError:
            pass

    def control(self, action: str, model: str) -> None:
        try:
            response = requests.post(f"{self.base}/v2/repository/models/{model}/{action}",
                                     timeout=(5, self.deadline * 4))
        except requests.Timeout as error:
            self.tally.add("control", "hung", f"{action} {model}: {error}")
            return
        except requests.RequestException as error:
            self.tally.add("control", "lost", f"{action} {model}: {error}")
            return
        self.tally.add("control", classify_http(response.status_code, _error_of(response)),
                       f"{action} {model}: {response.status_code} {_error_of(response)}")
        self.actions[f"{action} {model}"] += 1

    def run(self, seed: int, stop: threading.Event, interval: float) -> None:
        rng = random.Random(seed)
        while not stop.wait(rng.uniform(interval / 2, interval * 1.5)):
            choice = rng.random()
            model = rng.choice(reliability_repository.MODELS)
            if choice < 0.4:
                self.kill_executor(rng)
            elif choice < 0.7:
                self.control("load", model)  # a reload of a READY model
            else:
                self.control("unload", model)
                if not stop.wait(rng.uniform(0.2, 2.0)):
                    self.control("load", model)


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Footprint:
    main_rss: int
    executors_rss: int
    executors: int
    descriptors: int
    threads: int


def footprint(pid: int) -> Footprint:
    main = psutil.Process(pid)
    executors = [c for c in main.children(recursive=True)]
    rss = 0
    for child in executors:
        try:
            rss += child.memory_info().rss
        except psutil.Error:
            pass
    return Footprint(main.memory_info().rss, rss, len(executors), main.num_fds(),
                     main.num_threads())


def load_all(base: str, deadline: float) -> None:
    """Every model loaded and answering again (bounded)."""
    limit = time.monotonic() + deadline * 4
    for model in reliability_repository.MODELS:
        while True:
            try:
                if requests.post(f"{base}/v2/repository/models/{model}/load",
                                 timeout=(5, deadline * 2)).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > limit:
                raise TimeoutError(f"{model} could not be loaded again")
            time.sleep(0.5)


def verify_serving(base: str, grpc_address: str, deadline: float) -> None:
    rng = random.Random(0)
    session = requests.Session()
    with grpcclient.InferenceServerClient(grpc_address) as client:
        for model in reliability_repository.MODELS:
            status, message = http_infer(session, base, model, rng, deadline)
            if status != 200:
                raise Wrong(f"after the run {model} answers {status} {message}")
            grpc_infer(client, model, rng, deadline)


def warm(base: str, seconds: float, deadline: float) -> None:
    rng = random.Random(1)
    session = requests.Session()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for model in reliability_repository.MODELS:
            http_infer(session, base, model, rng, deadline)


# ---------------------------------------------------------------- report


EXIT_LINE = re.compile(r"executor process (\S+) \(pid (\d+)\) exited with code (-?\d+)")


def unexpected_exits(log: str, killed: set[int]) -> list[str]:
    """The executor exits the server logged that no SIGKILL of this run caused."""
    return [f"{name} (pid {pid}) exited with code {code}"
            for name, pid, code in EXIT_LINE.findall(log) if int(pid) not in killed]


def print_report(tally: Tally, actions: Counter[str], before: Footprint, after: Footprint,
                 seconds: float, exit_code: int | None, unexpected: list[str]) -> bool:
    width = 16
    print(f"\nchaos run: {seconds:.0f} s\n")
    print("| traffic | " + " | ".join(OUTCOMES) + " |")
    print("|---|" + "---:|" * len(OUTCOMES))
    totals: Counter[str] = Counter()
    for kind in ("HTTP infer", "gRPC infer", "HTTP malformed", "gRPC malformed", "control"):
        counter = tally.counts.get(kind, Counter())
        totals.update(counter)
        print(f"| {kind:<{width}} | " + " | ".join(str(counter[o]) for o in OUTCOMES) + " |")
    print(f"| {'total':<{width}} | " + " | ".join(str(totals[o]) for o in OUTCOMES) + " |")
    print("\n| chaos action | times |\n|---|---:|")
    for action, times in sorted(actions.items()):
        print(f"| {action} | {times} |")
    print("\n| server | before | after |\n|---|---:|---:|")
    mib = 1 << 20
    print(f"| main process RSS (MiB) | {before.main_rss / mib:.1f} | {after.main_rss / mib:.1f} |")
    print(f"| executors' RSS (MiB, {before.executors} / {after.executors} processes) | "
          f"{before.executors_rss / mib:.1f} | {after.executors_rss / mib:.1f} |")
    print(f"| main process open descriptors | {before.descriptors} | {after.descriptors} |")
    print(f"| main process threads | {before.threads} | {after.threads} |")
    print("\nerrors answered (failed correctly), by message:")
    for kind, errors in tally.errors.items():
        for message, times in errors.most_common(8):
            print(f"  {kind}: {times} x {message}")
    print(f"\nexecutor exits not caused by a kill: {len(unexpected)}")
    for line in unexpected:
        print(f"  {line}")
    for problem in tally.problems[:SHOWN_PROBLEMS]:
        print(f"PROBLEM {problem}")
    bad = totals["wrong"] + totals["hung"] + totals["lost"]
    print(f"\nwrong + hung + lost = {bad}; server exit code on SIGTERM: {exit_code}")
    print(json.dumps({"sent": totals["sent"], "succeeded": totals["succeeded"],
                      "failed_correctly": totals["failed correctly"], "wrong": totals["wrong"],
                      "hung": totals["hung"], "lost": totals["lost"],
                      "rss_before": before.main_rss, "rss_after": after.main_rss,
                      "exit_code": exit_code, "unexpected_exits": len(unexpected)}))
    return bad == 0 and exit_code == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of chaos")
    parser.add_argument("--http-clients", type=int, default=4)
    parser.add_argument("--grpc-clients", type=int, default=2)
    parser.add_argument("--chaos-interval", type=float, default=2.0,
                        help="mean seconds between chaos actions (default 2)")
    parser.add_argument("--deadline", type=float, default=30.0,
                        help="seconds after which a request without an answer is hung")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the server's log (with its executors') here at the end")
    arguments = parser.parse_args()
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> shows where a run is stuck
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the server on the way out
    deadline = arguments.deadline
    with serving.temporary_folder("inferd-chaos-") as folder:
        repository = reliability_repository.build(folder)
        flags = ["--model-control-mode=explicit", f"--http-max-input-size={MAX_INPUT_SIZE}",
                 f"--grpc-max-input-size={MAX_INPUT_SIZE}", "--exit-timeout-secs=10"]
        flags += [f"--load-model={name}" for name in reliability_repository.MODELS]
        server = serving.start(repository, *flags, log=folder / "server.log")
        exit_code: int | None = None
        try:
            serving.wait_model_ready(server, ENSEMBLE, via="http")
            base = f"http://{server.address('http')}"
            address = ("127.0.0.1", server.ports["http"])
            grpc_address = server.address("grpc")
            warm(base, 5.0, deadline)
            before = footprint(server.process.pid)
            tally, stop = Tally(), threading.Event()
            chaos = Chaos(server.process.pid, base, tally, deadline)
            threads: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
            seed = arguments.seed * 1000
            for index in range(arguments.http_clients):
                threads.append((http_worker, (base, seed + index, stop, tally, deadline)))
            for index in range(arguments.grpc_clients):
                threads.append((grpc_worker, (grpc_address, seed + 100 + index, stop, tally,
                                              deadline)))
            threads.append((malformed_worker, (base, address, grpc_address, seed + 200, stop,
                                               tally, deadline)))
            threads.append((chaos.run, (seed + 300, stop, arguments.chaos_interval)))
            started = time.monotonic()
            running = [threading.Thread(target=target, args=args, daemon=True)
                       for target, args in threads]
            for thread in running:
                thread.start()
            stop.wait(arguments.duration)
            stop.set()
            for thread in running:
                thread.join(deadline * 5)
                if thread.is_alive():
                    tally.add("control", "hung", f"client thread {thread.name} never returned")
            seconds = time.monotonic() - started
            if server.process.poll() is not None:
                print(f"the server died:\n{server.log_tail()}")
                return 1
            try:
                load_all(base, deadline)
                verify_serving(base, grpc_address, deadline)
            except (TimeoutError, Wrong, requests.RequestException,
                    InferenceServerException) as error:
                tally.add("control", "hung", f"after the run: {error}")
            warm(base, 5.0, deadline)
            time.sleep(2.0)
            after = footprint(server.process.pid)
        finally:
            serving.stop_process(server.process, grace=30)
            exit_code = server.process.returncode
            log = server.log.read_text(errors="replace")
            if arguments.keep_log is not None:
                arguments.keep_log.write_text(log)
        unexpected = unexpected_exits(log, chaos.killed)
        fine = print_report(tally, chaos.actions, before, after, seconds, exit_code, unexpected)
        return 0 if fine else 1


if __name__ == "__main__":
    sys.exit(main())
