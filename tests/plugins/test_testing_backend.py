"""The testing backend's modes, driven directly (no executor, no server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.backends import BackendRegistry, ModelContext
from inferd.plugins.backends.testing import (
    TESTING_BACKEND,
    TESTING_NATIVE_BACKEND,
    inferd_register_backends,
)
from inferd.plugins.backends.testing.backends import CRASH_EXIT_STATUS, TestingBackend
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse
from inferd.protocols.tensors import from_numpy

ECHO_IO = """
name: "echo"
backend: "inferd_testing"
max_batch_size: 8
input [{ name: "IN0" data_type: TYPE_FP32 dims: [2] },
       { name: "IN1" data_type: TYPE_STRING dims: [1] }]
output [{ name: "OUT0" data_type: TYPE_FP32 dims: [2] },
        { name: "OUT1" data_type: TYPE_STRING dims: [1] }]
"""


def context(parameters: dict[str, str], io: str = ECHO_IO) -> ModelContext:
    config = text_format.Parse(io, model_config_pb2.ModelConfig())
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return ModelContext(name="echo", version=3, model_dir=Path("/nonexistent"), config=config)


def request(request_id: str, outputs: tuple[str, ...] = ()) -> InferRequest:
    return InferRequest(
        model="echo",
        id=request_id,
        inputs=(
            from_numpy("IN0", np.array([[1.0, 2.0]], np.float32)),
            from_numpy("IN1", [[b"hello"]], "BYTES"),
        ),
        outputs=outputs,
    )


def test_the_hook_registers_it_only_by_name_and_platform() -> None:
    registry = BackendRegistry()
    inferd_register_backends(registry)
    assert registry.get("inferd_testing") == TESTING_BACKEND
    assert registry.for_platform("inferd_testing") == TESTING_BACKEND
    assert TESTING_BACKEND.default_filename == ""
    assert TESTING_BACKEND.load_class() is TestingBackend
    assert not TESTING_BACKEND.runs_in_server
    native = registry.get("inferd_testing_native")
    assert registry.for_platform("inferd_testing_native") == native == TESTING_NATIVE_BACKEND
    assert native.runs_in_server and native.load_class() is TestingBackend


def test_echo_returns_input_i_as_output_i() -> None:
    instance = TestingBackend().load_model(context({"mode": "echo"})).create_instance(0)

    full, filtered = instance.execute([request("a"), request("b", outputs=("OUT1",))])

    assert isinstance(full, InferResponse) and isinstance(filtered, InferResponse)
    assert (full.model, full.version, full.id) == ("echo", "3", "a")
    out0, out1 = full.outputs
    assert (out0.name, out0.datatype, out0.shape) == ("OUT0", "FP32", (1, 2))
    assert np.array_equal(out0.data, [[1.0, 2.0]])
    assert (out1.name, out1.datatype, out1.data.tolist()) == ("OUT1", "BYTES", [[b"hello"]])
    assert [tensor.name for tensor in filtered.outputs] == ["OUT1"]


def test_echo_is_the_default_mode() -> None:
    instance = TestingBackend().load_model(context({})).create_instance(0)

    (result,) = instance.execute([request("a")])

    assert isinstance(result, InferResponse)
    assert [tensor.name for tensor in result.outputs] == ["OUT0", "OUT1"]


def test_fail_fails_every_request() -> None:
    instance = TestingBackend().load_model(context({"mode": "fail"})).create_instance(0)

    results = instance.execute([request("a"), request("b")])

    assert len(results) == 2
    for result in results:
        assert isinstance(result, InvalidArgument)
        assert result.message == "testing backend: failure requested"


def test_fail_load_raises_the_configured_message() -> None:
    with pytest.raises(InvalidArgument, match=r"^testing backend: load failure requested$"):
        TestingBackend().load_model(context({"mode": "fail_load"}))
    with pytest.raises(InvalidArgument, match=r"^disk on fire$"):
        TestingBackend().load_model(context({"mode": "fail_load", "message": "disk on fire"}))


def test_slow_sleeps_before_echoing() -> None:
    instance = (
        TestingBackend().load_model(context({"mode": "slow", "delay_ms": "50"})).create_instance(0)
    )

    started = time.perf_counter()
    (result,) = instance.execute([request("a")])

    assert time.perf_counter() - started >= 0.05
    assert isinstance(result, InferResponse)


def test_slow_load_sleeps_while_loading() -> None:
    started = time.perf_counter()
    TestingBackend().load_model(context({"mode": "slow_load", "load_delay_ms": "50"}))
    assert time.perf_counter() - started >= 0.05


def test_started_file_gets_a_line_per_batch_as_it_starts(tmp_path: Path) -> None:
    started = tmp_path / "started"
    instance = TestingBackend().load_model(
        context({"started_file": str(started)})).create_instance(0)
    instance.execute([request("a"), request("b")])
    instance.execute([request("")])
    assert started.read_text() == "a b\n-\n"  # a request without an id is "-"


def test_release_file_holds_a_slow_batch_until_it_exists(tmp_path: Path) -> None:
    release, started = tmp_path / "release", tmp_path / "started"
    instance = TestingBackend().load_model(context({
        "mode": "slow", "delay_ms": "30000", "release_file": str(release),
        "started_file": str(started)})).create_instance(0)
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.extend(instance.execute([request("a")])))
    worker.start()
    deadline = time.monotonic() + 10
    while not started.exists():
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.01)
    assert worker.is_alive() and not results  # started, and held
    release.touch()
    worker.join(10)
    assert not worker.is_alive() and isinstance(results[0], InferResponse)


def test_release_file_holds_a_slow_load_until_it_exists(tmp_path: Path) -> None:
    release = tmp_path / "release"
    loaded: list[object] = []
    worker = threading.Thread(target=lambda: loaded.append(TestingBackend().load_model(context({
        "mode": "slow_load", "load_delay_ms": "30000", "release_file": str(release)}))))
    worker.start()
    worker.join(0.2)  # not an event: the load must still be held whatever the wait
    assert worker.is_alive() and not loaded
    release.touch()
    worker.join(10)
    assert not worker.is_alive() and len(loaded) == 1


@pytest.mark.parametrize(("mode", "returncode"),
                         [("crash", CRASH_EXIT_STATUS), ("segfault", -signal.SIGSEGV)])
def test_crash_modes_end_the_process_on_the_first_batch(mode: str, returncode: int) -> None:
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from tritonclient.grpc import model_config_pb2
        from inferd.kernel.sdk.backends import ModelContext
        from inferd.plugins.backends.testing.backends import TestingBackend

        config = model_config_pb2.ModelConfig(name="c")
        config.parameters["mode"].string_value = "{mode}"
        context = ModelContext(name="c", version=1, model_dir=Path("."), config=config)
        TestingBackend().load_model(context).create_instance(0).execute([])
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], env=dict(os.environ))
    assert completed.returncode == returncode


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"mode": "explode"}, "mode 'explode' is not one of"),
        ({"mode": "slow", "delay_ms": "soon"}, "delay_ms must be a non-negative number"),
        ({"mode": "slow_load", "load_delay_ms": "-1"}, "load_delay_ms must be a non-negative"),
    ],
)
def test_bad_parameters_fail_the_load(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        TestingBackend().load_model(context(parameters))


def test_echo_needs_one_output_per_input() -> None:
    io = 'name: "echo" input [{ name: "IN0" data_type: TYPE_FP32 dims: [2] }]'

    with pytest.raises(InvalidArgument, match="as many outputs as inputs"):
        TestingBackend().load_model(context({"mode": "echo"}, io))


TIMED_IO = ECHO_IO.replace(
    '{ name: "OUT1" data_type: TYPE_STRING dims: [1] }]',
    '{ name: "OUT1" data_type: TYPE_STRING dims: [1] },\n'
    '        { name: "TIMES" data_type: TYPE_INT64 dims: [2] }]',
)


def test_times_output_holds_when_the_batch_started_and_ended() -> None:
    parameters = {"mode": "slow", "delay_ms": "20", "times_output": "TIMES"}
    instance = TestingBackend().load_model(context(parameters, TIMED_IO)).create_instance(0)

    before = time.time_ns()
    full, only_times = instance.execute([request("a"), request("b", outputs=("TIMES",))])
    after = time.time_ns()

    assert isinstance(full, InferResponse) and isinstance(only_times, InferResponse)
    assert [tensor.name for tensor in full.outputs] == ["OUT0", "OUT1", "TIMES"]
    (times,) = only_times.outputs
    assert (times.datatype, times.shape) == ("INT64", (1, 2))  # one row per batch element
    started, ended = times.data[0].tolist()
    assert before <= started and started + 20_000_000 <= ended <= after


def test_times_output_must_be_declared() -> None:
    with pytest.raises(InvalidArgument, match="times_output names output 'WHEN'"):
        TestingBackend().load_model(context({"times_output": "WHEN"}))
