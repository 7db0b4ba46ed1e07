"""Where a model's CPU instances run, end to end: by default those of native backends
(onnxruntime, pytorch) run in the server's own process, as Triton runs its native backends,
and no CPU executor process is started for them; ``--cpu-executor process`` puts them back in
an executor process, whose crash fails only the requests it held and is restarted while the
server stays up; a model's ``INFERD_EXECUTOR`` overrides the default either way, and
``"server"`` is refused for a backend that is not native."""

from __future__ import annotations

import os
import signal
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.protocols.errors import InvalidArgument
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, wait_for

WAIT_SECS = 60.0
ONES = np.ones((1, 16), np.int32)


def executor(value: str) -> str:
    return f'parameters {{ key: "INFERD_EXECUTOR" value {{ string_value: "{value}" }} }}\n'


def started_executors(server: ServerHandle) -> list[str]:
    """The executors the server's log says it started, in order ('started <name> (pid N)')."""
    return [line.split("started ", 1)[1].split(" ")[0] for line in server.log().splitlines()
            if "started executor/" in line]


def executor_pid(server: ServerHandle, name: str) -> int:
    """The pid of the last process the log says was started as ``name``."""
    pids = [int(line.rsplit("(pid ", 1)[1].rstrip(")")) for line in server.log().splitlines()
            if f"started {name} (pid " in line]
    assert pids, f"{name} was never started; log:\n{server.log()}"
    return pids[-1]


def executor_samples(server: ServerHandle) -> set[str]:
    """The executors ``inferd_executor_cpu_seconds_total`` has a sample for."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics",
                                timeout=10) as reply:
        text = reply.read().decode()
    return {line.split('executor="', 1)[1].split('"', 1)[0] for line in text.splitlines()
            if line.startswith("inferd_executor_cpu_seconds_total{")}


def simple_over_both(server: ServerHandle) -> None:
    """``simple`` answers correctly over HTTP and gRPC."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(ONES)
        assert client.infer("simple", inputs).as_numpy("OUTPUT0").tolist() == [[2] * 16]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(ONES)
        assert client.infer("simple", inputs).as_numpy("OUTPUT1").tolist() == [[0] * 16]


def test_native_cpu_models_run_in_the_server_by_default(inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("simple"))
    simple_over_both(server)
    assert started_executors(server) == []  # no process for an onnxruntime model
    assert executor_samples(server) == {"executor/inline"}


def test_cpu_executor_process_contains_a_crash(inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("simple"), "--cpu-executor", "process")
    simple_over_both(server)
    assert started_executors(server) == ["executor/cpu0"]
    assert executor_samples(server) == {"executor/cpu0"}

    os.kill(executor_pid(server, "executor/cpu0"), signal.SIGKILL)

    wait_for(lambda: started_executors(server) == ["executor/cpu0"] * 2,
             "executor/cpu0 restarted", server, WAIT_SECS)
    with server.client(timeout=WAIT_SECS) as client:
        wait_for(lambda: client.is_model_ready("simple"), "simple READY again", server, WAIT_SECS)
    assert server.process.poll() is None  # the server itself never went
    simple_over_both(server)


def test_a_models_executor_parameter_overrides_the_default(inferd: InferdHarness) -> None:
    shared = (inferd.repository("simple") / "simple" / "config.pbtxt")
    shared.write_text(shared.read_text() + executor("shared"))
    echo = inferd.testing_config("echo", "echo")
    server = inferd.start(shared.parent.parent, "--model-control-mode=explicit",
                          "--load-model=simple")
    simple_over_both(server)
    assert started_executors(server) == ["executor/cpu0"]  # started when simple needed it

    native_in_server = inferd.repository("simple", configs={"echo": echo + executor("server")})
    config = native_in_server / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + executor("server"))
    other = inferd.start(native_in_server, "--cpu-executor", "process",
                         "--model-control-mode=explicit", "--load-model=simple")
    simple_over_both(other)
    assert started_executors(other) == ["executor/cpu0"]  # the pool, but simple is not in it
    assert executor_samples(other) == {"executor/cpu0", "executor/inline"}
    with other.client() as client:
        with pytest.raises(InvalidArgument, match='parameter INFERD_EXECUTOR "server" is for '
                           "native backends .*; backend 'inferd_testing' runs in executor "
                           "processes"):
            client.load("echo")
        assert client.is_model_ready("simple")
