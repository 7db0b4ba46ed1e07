"""What a backend that crashes its process does to the server, under each placement (issue 39):
a ``segfault`` model of the native testing backend (``inferd_testing_native``: placed as
onnxruntime is) reads address 0 on its first batch.

By default its instances run in the server's own process, so the server dies of SIGSEGV: what
a user sees is a non-zero exit and, on stderr, faulthandler's traceback naming the model whose
batch was running. Under ``--cpu-executor process`` the CPU executor process dies instead:
the request fails with 503 naming the process, a model in another process is answered right
all along, the executor is restarted with its models and the server stays up.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from inferd.protocols.errors import InferdError, Unavailable
from tests.e2e.inferd_harness import PROJECT_ROOT, ServerHandle, wait_for

CRASHER = "crasher"
SIGSEGV_EXIT = -11  # Popen's return code for a process killed by SIGSEGV
RECOVERY_SECS = 60.0
# What faulthandler writes for the thread that was running the crasher's batch
# (kernel/actors/executor/instance_slot.py names that frame after the model).
FATAL = "Fatal Python error: Segmentation fault"
MODEL_FRAME = f"in model '{CRASHER}' version 1"
ONES = np.ones((1, 16), np.int32)


def repository(inferd: Any) -> Path:
    """``simple`` (onnxruntime), the crasher, and ``add_sub`` (python: a process of its own
    under every placement)."""
    crasher = inferd.testing_config(CRASHER, "segfault").replace(
        'backend: "inferd_testing"', 'backend: "inferd_testing_native"')
    root: Path = inferd.repository("simple", configs={CRASHER: crasher})
    inferd.copy_models(root, PROJECT_ROOT / "tests" / "plugins" / "python_models", "add_sub")
    return root


def infer_crasher_over_http(server: ServerHandle) -> requests.Response:
    body = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                        "data": [1, 2, 3, 4]}]}
    return requests.post(f"http://{server.http_url}/v2/models/{CRASHER}/infer", json=body,
                         timeout=RECOVERY_SECS)


def assert_simple_serves(client: Any) -> None:
    result = client.infer("simple", {"INPUT0": ONES * 4, "INPUT1": ONES})
    assert result.as_numpy("OUTPUT0").tolist() == [[5] * 16]


def test_by_default_a_segfault_ends_the_server_naming_the_model(inferd: Any) -> None:
    server = inferd.start(repository(inferd))
    with server.client() as client:
        assert_simple_serves(client)
    assert "started executor/cpu" not in server.log()  # simple and the crasher run in-process

    with pytest.raises(requests.ConnectionError):
        infer_crasher_over_http(server)

    assert server.wait_exit(RECOVERY_SECS) == SIGSEGV_EXIT, server.log()
    log = server.log()
    assert FATAL in log, log
    assert MODEL_FRAME in log.split(FATAL, 1)[1], log
    server.clean_exit = False


def test_under_cpu_executor_process_only_the_executor_dies(inferd: Any) -> None:
    server = inferd.start(repository(inferd), "--cpu-executor", "process")
    python_model_answers: list[str] = []
    stop = threading.Event()

    def ask_add_sub() -> None:
        with server.client(timeout=RECOVERY_SECS) as own:
            while not stop.is_set():
                inputs = {"INPUT0": np.full(4, 2, np.float32), "INPUT1": np.ones(4, np.float32)}
                try:
                    result = own.infer("add_sub", inputs)
                    right = result.as_numpy("OUTPUT0").tolist() == [3.0] * 4
                    python_model_answers.append("ok" if right else "wrong")
                except InferdError as error:
                    python_model_answers.append(f"{error.code.value}: {error.message}")

    with server.client(timeout=RECOVERY_SECS) as client:
        assert_simple_serves(client)
        asker = threading.Thread(target=ask_add_sub, daemon=True)
        asker.start()
        wait_for(lambda: "ok" in python_model_answers, "add_sub's first answer", server)
        pid = executor_pid(server, "executor/cpu0")

        with pytest.raises(Unavailable) as crashed:
            client.infer(CRASHER, {"INPUT0": np.ones(4, np.float32)})
        died = f"executor process executor/cpu0 (pid {pid}) exited with code {SIGSEGV_EXIT}"
        assert crashed.value.message.startswith(died), crashed.value.message

        restarted = wait_for(lambda: executor_pid(server, "executor/cpu0") != pid
                             and all(client.is_model_ready(m) for m in ("simple", CRASHER)),
                             "executor/cpu0 restarted with its models READY", server,
                             RECOVERY_SECS)
        assert restarted
        assert_simple_serves(client)
        answered_during = len(python_model_answers)
        wait_for(lambda: len(python_model_answers) > answered_during,
                 "add_sub answered after the restart", server)
        stop.set()
        asker.join(RECOVERY_SECS)
        assert server.process.poll() is None
    assert set(python_model_answers) == {"ok"}, sorted(set(python_model_answers))
    log = server.log()
    assert f"{died}; restarting it" in log, log
    assert FATAL in log, log
    assert MODEL_FRAME in log.split(FATAL, 1)[1], log  # the executor's own traceback


def executor_pid(server: ServerHandle, name: str) -> int:
    """The pid of the last process the log says was started as ``name``."""
    pids = [int(line.rsplit("(pid ", 1)[1].rstrip(")")) for line in server.log().splitlines()
            if f"started {name} (pid " in line]
    assert pids, f"{name} was never started; log:\n{server.log()}"
    return pids[-1]
