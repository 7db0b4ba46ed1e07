"""A chaos run against a real ``inferd serve`` for as long as asked, with a report: the chaos
test's mix (``mix_traffic``: HTTP, gRPC unary, sequence and streaming, the native zmq client,
system shared memory and connections broken mid-request, on plain, batched, sequence,
decoupled, ensemble and python models; ``mix_chaos``: executors SIGKILLed, models reloaded,
unloaded and loaded, shared memory regions unregistered) plus malformed and oversized HTTP and
gRPC requests, which must be refused (a 4xx or 503 with a message; gRPC INVALID_ARGUMENT,
NOT_FOUND, UNAVAILABLE or RESOURCE_EXHAUSTED).

wrong, hung and lost must be 0, and every failed request must be tied to the chaos action
that caused it (``mix_faults``: during it, on a model it touched, its message naming what the
action hit). The run prints the requests by outcome per kind of traffic, the failed ones by
the action that explains them, the chaos actions with their recovery times, and the server's
footprint after a warm-up and at the end (load stopped, every model loaded again); the exit
code is 1 if anything was wrong, hung, lost or unexplained, or the server died or did not
exit 0 on SIGTERM. ``--cpu-executor`` places the onnx models: ``process`` (the default here,
so a SIGKILL of the executors reaches them) or ``server`` (inferd's own default: only the
python models' processes can be killed). ``tests/e2e/test_chaos.py`` runs the same mix under
both placements in the suite.

    python -m bench.reliability.chaos --duration 180
"""

from __future__ import annotations

import argparse
import faulthandler
import gzip
import json
import random
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench.common import serving
from bench.reliability import mix_chaos, mix_faults, mix_measure, mix_traffic

MAX_INPUT_SIZE = 1 << 20  # --http-max-input-size and --grpc-max-input-size: oversize is cheap
REFUSED_GRPC = frozenset({"StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND",
                          "StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"})
SHOWN_PROBLEMS = 12
Tally = mix_traffic.Tally


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
    return what, response.status_code, mix_traffic.error_of(response)


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
                outcome = ("refused" if (400 <= status < 500 or status == 503)
                           and message else "wrong")
                tally.add("HTTP malformed", outcome, f"{what}: {status} {message}")
                continue
            try:
                what = malformed_grpc(client, rng, deadline)
                tally.add("gRPC malformed", "wrong", f"{what}: accepted")
            except InferenceServerException as error:
                status = str(error.status())
                outcome = ("hung" if status == "StatusCode.DEADLINE_EXCEEDED" else "refused"
                           if status in REFUSED_GRPC and error.message() else "wrong")
                tally.add("gRPC malformed", outcome, f"{status} {error.message()}")


# ---------------------------------------------------------------- report


EXIT_LINE = re.compile(r"executor process (\S+) \(pid (\d+)\) exited with code (-?\d+)")


def unexpected_exits(log: str, killed: set[int]) -> list[str]:
    """The executor exits the server logged that no SIGKILL of this run caused."""
    return [f"{name} (pid {pid}) exited with code {code}"
            for name, pid, code in EXIT_LINE.findall(log) if int(pid) not in killed]


def print_report(tally: Tally, chaos: mix_chaos.Chaos, before: mix_measure.Footprint,
                 after: mix_measure.Footprint, seconds: float, exit_code: int | None,
                 unexpected: list[str]) -> bool:
    print(f"\nchaos run: {seconds:.0f} s\n")
    print("\n".join(mix_measure.outcome_rows(tally)))
    explained: Counter[str] = Counter()
    unexplained = chaos.unexplained()
    for call in tally.calls_so_far():
        if call.outcome == "failed":
            fault = mix_faults.explain(call, chaos.faults)
            explained[fault.kind if fault else "unexplained"] += 1
    print("\nfailed requests, by the chaos action that explains them:")
    for kind, times in explained.most_common():
        print(f"  {times} x {kind}")
    for call in unexplained[:SHOWN_PROBLEMS]:
        print(f"UNEXPLAINED {call}")
    print()
    print("\n".join(mix_measure.recovery_rows(chaos)))
    print()
    print("\n".join(mix_measure.footprint_rows(before, after)))
    print("\nerrors answered, by message:")
    for message, times in tally.errors.most_common(20):
        print(f"  {times} x {message}")
    print(f"\nexecutor exits not caused by a kill: {len(unexpected)}")
    for line in unexpected:
        print(f"  {line}")
    for problem in tally.problems[:SHOWN_PROBLEMS]:
        print(f"PROBLEM {problem}")
    totals = tally.totals()
    bad = sum(totals[outcome] for outcome in mix_traffic.BAD)
    print(f"\nwrong + hung + lost = {bad}; unexplained failures: {len(unexplained)}; server "
          f"exit code on SIGTERM: {exit_code}")
    print(json.dumps({**{o: totals[o] for o in (*mix_traffic.OUTCOMES, "refused")},
                      "unexplained": len(unexplained),
                      "rss_before": before.main_rss, "rss_after": after.main_rss,
                      "exit_code": exit_code, "unexpected_exits": len(unexpected)}))
    return bad == 0 and not unexplained and exit_code == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of chaos")
    parser.add_argument("--chaos-interval", type=float, default=2.0,
                        help="mean seconds between chaos actions (default 2)")
    parser.add_argument("--deadline", type=float, default=30.0,
                        help="seconds after which a request without an answer is hung")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu-executor", choices=sorted(mix_traffic.PLACEMENTS),
                        default="process", help="where the onnx models run (default process)")
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the server's log (with its executors') here at the end")
    arguments = parser.parse_args()
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> shows where a run is stuck
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the server on the way out
    deadline = arguments.deadline
    with serving.temporary_folder("inferd-chaos-") as folder:
        repository = mix_traffic.build_repository(folder)
        flags = [*mix_traffic.server_flags(arguments.cpu_executor),
                 f"--http-max-input-size={MAX_INPUT_SIZE}",
                 f"--grpc-max-input-size={MAX_INPUT_SIZE}"]
        server = serving.start(repository, *flags, log=folder / "server.log")
        exit_code: int | None = None
        try:
            serving.wait_model_ready(server, mix_traffic.ENSEMBLE, via="http")
            target = mix_traffic.Target(server.address("http"), server.address("grpc"),
                                        server.zmq_url, deadline)
            if not mix_chaos.wait_all_ready(target, 120):
                raise TimeoutError(f"not READY: {mix_chaos.not_ready(target)}")
            mix, tally = mix_chaos.start_mix(target, arguments.seed)
            time.sleep(5.0)  # warm-up
            before = mix_measure.footprint(server.process.pid)
            chaos = mix_chaos.Chaos(server.process.pid, target, tally,
                                    tuple(region.name for region in mix.regions))
            stop = threading.Event()
            address = ("127.0.0.1", server.ports["http"])
            threads = [threading.Thread(target=malformed_worker, daemon=True, args=(
                           target.base, address, target.grpc, arguments.seed, stop, tally,
                           deadline)),
                       threading.Thread(target=chaos.run, daemon=True, args=(
                           random.Random(arguments.seed), stop, arguments.chaos_interval))]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            stop.wait(arguments.duration)
            stop.set()
            for thread in threads:
                thread.join(deadline * 5)
                if thread.is_alive():
                    tally.add("control", "hung", f"thread {thread.name} never returned")
            for name in mix.finish():
                tally.add("control", "hung", f"client thread {name} never returned")
            seconds = time.monotonic() - started
            if server.process.poll() is not None:
                print(f"the server died:\n{server.log_tail()}")
                return 1
            mix_chaos.load_all(target)
            if not mix_chaos.wait_all_ready(target, deadline):
                tally.add("control", "hung", f"not READY after the run: "
                          f"{mix_chaos.not_ready(target)}")
            time.sleep(2.0)  # connections the clients closed go
            after = mix_measure.footprint(server.process.pid)
        finally:
            serving.stop_process(server.process, grace=30)
            exit_code = server.process.returncode
            log = server.log.read_text(errors="replace")
            if arguments.keep_log is not None:
                arguments.keep_log.write_text(log)
        unexpected = unexpected_exits(log, chaos.killed)
        fine = print_report(tally, chaos, before, after, seconds, exit_code, unexpected)
        return 0 if fine else 1


if __name__ == "__main__":
    sys.exit(main())
