"""Large tensors between the main process and its executor in shared memory, end to end: 1 MiB
through ``identity_fp32`` over HTTP and gRPC comes back exact while the server's segments sit
in ``/dev/shm``, and nothing of them is left after the executor is killed, after the server
stops, or after the server itself is killed (its executor unlinks them on its way out)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

SHM_ROOT = Path("/dev/shm")
ELEMENTS = 262_144  # FP32: 1 MiB
WAIT_SECS = 20.0
# The link joins the main process to executor processes: the onnxruntime models run in one.
IN_A_PROCESS = ("--cpu-executor", "process")

pytestmark = pytest.mark.skipif(not SHM_ROOT.is_dir(), reason="no /dev/shm")


def segments(server_pid: int) -> dict[str, int]:
    """The server's link segments: name -> owning pid."""
    prefix = f"inferd-{server_pid}-"
    return {name: int(name.split("-")[2]) for name in os.listdir(SHM_ROOT)
            if name.startswith(prefix)}


def wait_until(predicate: Callable[[], bool], what: str, server: ServerHandle) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_SECS} s: {what}; log:\n{server.log()}")
        time.sleep(0.05)


def identity_over_both_protocols(server: ServerHandle, values: np.ndarray) -> None:
    with httpclient.InferenceServerClient(server.http_url) as http:
        request = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        request.set_data_from_numpy(values, binary_data=True)
        result = http.infer("identity_fp32", [request])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        request = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        request.set_data_from_numpy(values)
        result = grpc.infer("identity_fp32", [request])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_large_tensors_cross_in_shared_memory_and_a_stop_leaves_none(
        inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("identity_fp32", "simple"), *IN_A_PROCESS)
    pid = server.process.pid
    for round_ in range(3):
        identity_over_both_protocols(server, np.random.default_rng(round_).random(
            ELEMENTS, dtype=np.float32))
    owners = set(segments(pid).values())
    # The main process wrote the inputs into its segments, the executor the outputs into its.
    assert pid in owners and len(owners) == 2, segments(pid)
    # Segments come back and are reused: three rounds of both protocols need only a few.
    assert len(segments(pid)) <= 6, segments(pid)
    assert server.terminate() == 0
    assert segments(pid) == {}


def test_a_killed_executor_leaves_no_segments_and_the_next_one_serves(
        inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("identity_fp32"), *IN_A_PROCESS)
    pid = server.process.pid
    values = np.arange(ELEMENTS, dtype=np.float32)
    identity_over_both_protocols(server, values)
    executor = next(owner for owner in segments(pid).values() if owner != pid)
    os.kill(executor, signal.SIGKILL)
    wait_until(lambda: executor not in segments(pid).values(),
               "the dead executor's segments unlinked", server)
    with server.client() as client:
        wait_until(lambda: client.is_model_ready("identity_fp32"), "identity_fp32 READY again",
                   server)
    identity_over_both_protocols(server, values * 2)
    assert server.terminate() == 0
    assert segments(pid) == {}


def test_a_killed_server_has_its_segments_removed_by_its_executor(
        inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("identity_fp32"), *IN_A_PROCESS)
    pid = server.process.pid
    identity_over_both_protocols(server, np.ones(ELEMENTS, np.float32))
    assert segments(pid)
    server.process.send_signal(signal.SIGKILL)
    server.wait_exit(WAIT_SECS)
    server.clean_exit = False
    wait_until(lambda: segments(pid) == {}, "segments unlinked by the orphaned executor", server)


def test_the_link_memory_flags_are_checked(inferd: InferdHarness) -> None:
    for flag, value in (("--executor-shm-threshold", "-1"), ("--executor-shm-threshold", "big"),
                        ("--executor-shm-capacity", "0")):
        server = inferd.launch(None, f"{flag}={value}")
        assert server.wait_exit(60) == 2, server.log()
        assert flag in server.log() and "expected a number of bytes" in server.log()


def test_a_threshold_of_zero_sends_every_tensor_as_a_frame(inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("identity_fp32"), *IN_A_PROCESS,
                          "--executor-shm-threshold=0")
    identity_over_both_protocols(server, np.ones(ELEMENTS, np.float32))
    assert segments(server.process.pid) == {}
