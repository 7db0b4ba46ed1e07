"""Instructions per call of steps on the request path, counted by valgrind: a figure that does
not move with a busy machine, for changes too small for server CPU per inference to show.

On a shared 2-core machine the server CPU per inference of ``bench_peers`` moves by a third
from one minute to the next (other tenants' load shows as steal time and as CPU time that
grows with cache misses), so a change worth a few per cent of a request cannot be told from
noise there, and this machine exposes no hardware counters to ``perf``. valgrind's callgrind
counts every instruction the process runs: each step runs ``--small`` and then ``--large``
times in a child process under it, and the difference of the two totals over the difference
of the counts is the step's instructions per call, start-up and imports cancelled out. Slow
(valgrind runs the interpreter some 50 times slower: about a minute a child), so each step is
measured once per interpreter; ``--python`` adds another checkout's venv (the code before a
change) beside this one. The counts are not exact either (hash seeds, onnxruntime's arena and
the collector move them): an ``execute`` spreads by a few thousand of its 175k from run to
run, so judge a change smaller than that over several runs.

The steps, each on ``simple``'s tensors:

* ``execute``: an onnxruntime instance's ``execute`` of one request (the batch skeleton and
  one session run); ``execute-wrapper`` the same through onnxruntime's Python ``run``
  wrapper instead of the session's binding;
* ``record_batch``: the statistics of one executed batch;
* ``queued``: the scheduler's record of one queued request;
* ``server-http``, ``server-grpc``: one whole ``simple`` inference, as the server's main
  process runs it (``inferd serve`` under callgrind, the CPU executor in that process as by
  default), sent one at a time by tritonclient from outside valgrind. Start-up and shutdown
  cancel out as above; the server's timers do not quite (they run for as long as the slowed
  requests take), so compare two servers at the same counts only.

    .venv/bin/python -m bench.performance.instructions [--steps execute,server-http] \
        [--python ../before/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("execute", "execute-wrapper", "record_batch", "queued", "server-http", "server-grpc")
SERVER_READY_SECS = 600.0  # inferd's start under valgrind: imports and onnxruntime, slowed
REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _simple_instance(through_wrapper: bool) -> Callable[[], object]:
    import numpy as np
    import onnxruntime

    from inferd.plugins.backends.onnxruntime.instance import ExecutionPlan, OnnxRuntimeInstance
    from inferd.protocols.messages import InferRequest
    from inferd.protocols.tensors import from_numpy
    from tests.plugins.test_onnxruntime_backend import repository_context

    context = repository_context("simple")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(context.model_dir / "1" / "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])
    instance = OnnxRuntimeInstance(session, ExecutionPlan.from_config(context.config, "simple", 1))
    if through_wrapper:
        instance._binding = None  # as before the instance ran the binding itself
    rows = np.arange(16, dtype=np.int32).reshape(1, 16)
    requests = [InferRequest(model="simple", id="a", inputs=(
        from_numpy("INPUT0", rows), from_numpy("INPUT1", rows)))]
    return lambda: instance.execute(requests)


def _record_batch() -> Callable[[], object]:
    try:
        from inferd.kernel.observability.statistics import VersionStatistics
    except ImportError:  # a checkout from before kernel/ was in packages
        from inferd.kernel.statistics import VersionStatistics  # type: ignore[no-redef]
    statistics = VersionStatistics()
    return lambda: statistics.record_batch(1, 1, (1000, 2000, 3000))


def _queued() -> Callable[[], object]:
    try:
        from inferd.kernel.actors.scheduler.requests import Queued
    except ImportError:
        from inferd.kernel.scheduling.requests import Queued  # type: ignore[no-redef]
    from inferd.protocols.messages import InferRequest

    request = InferRequest(model="simple", id="a", inputs=())
    return lambda: Queued(request, 1, (), 0)


def _step(name: str) -> Callable[[], object]:
    if name.startswith("execute"):
        return _simple_instance(through_wrapper=name == "execute-wrapper")
    return {"record_batch": _record_batch, "queued": _queued}[name]()


def _child(name: str, count: int) -> None:
    step = _step(name)

    async def run() -> None:  # on a running loop, as the server calls them
        for _ in range(count):
            step()

    asyncio.run(run())


def _server_instructions(python: str, protocol: str, count: int) -> int:
    """Instructions of an ``inferd serve`` main process that answered ``count`` inferences."""
    import numpy as np

    from bench.common import serving

    ports = {name: serving.free_port() for name in ("http", "grpc", "zmq", "metrics")}
    inferd = str(Path(python).with_name("inferd"))
    log = Path(f"/tmp/bench-instructions-{os.getpid()}-{protocol}-{count}.log")
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               f"--log-file={log}", python, inferd, "serve",
               "--model-repository", str(ROOT / "model_repository"),
               "--model-control-mode", "explicit", "--load-model", "simple",
               *(option for name, port in ports.items()
                 for option in (f"--{name}-address", "127.0.0.1", f"--{name}-port", str(port)))]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              cwd=ROOT)
    try:
        if protocol == "http":
            import tritonclient.http as client_module
            client: Any = client_module.InferenceServerClient(
                f"127.0.0.1:{ports['http']}", network_timeout=SERVER_READY_SECS)
        else:
            import tritonclient.grpc as client_module  # type: ignore[no-redef]
            client = client_module.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
        deadline = time.monotonic() + SERVER_READY_SECS
        while True:
            try:
                if client.is_model_ready("simple"):
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"inferd under valgrind did not start; see {log}")
            time.sleep(1.0)
        rows = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [client_module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(rows)
        for _ in range(20 + count):  # 20 to warm up, in every run alike
            client.infer("simple", inputs)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=SERVER_READY_SECS)
    found = REFS.search(log.read_text())
    log.unlink()
    if found is None:
        raise RuntimeError("valgrind printed no instruction count for the server")
    return int(found.group(1).replace(",", ""))


def _instructions(python: str, name: str, count: int) -> int:
    if name.startswith("server-"):
        return _server_instructions(python, name.removeprefix("server-"), count)
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, "-m",
         "bench.performance.instructions", "--child", name, str(count)],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=900)
    found = REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{name} under valgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--python", action="append", default=[],
                        help="another interpreter to measure beside this one (repeatable)")
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=2200)
    parser.add_argument("--child", nargs=2, metavar=("STEP", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    pythons = [sys.executable, *args.python]
    print(f"instructions per call ({args.large} calls less {args.small}, under callgrind)")
    for index, python in enumerate(args.python, 1):
        print(f"  python {index}: {python}")
    labels = ["this", *(f"python {index}" for index in range(1, len(pythons)))]
    print(f"{'step':16s}" + "".join(f"{label:>14s}" for label in labels))
    for name in args.steps.split(","):
        cells = []
        for python in pythons:
            small = _instructions(python, name, args.small)
            large = _instructions(python, name, args.large)
            cells.append(f"{(large - small) / (args.large - args.small):14,.0f}")
        print(f"{name:16s}" + "".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
