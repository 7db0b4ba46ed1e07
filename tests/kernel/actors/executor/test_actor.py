"""The executor actor driven through its messages, in one process: a router, the real
``ExecutorActor`` with the testing and python backends, and a stand-in scheduler that
records the responses streamed to it and answers the models' own requests (BLS), no sockets.

Loads (their instance ids and the config they answer, their failures with reasons), batches
(echoed, failed, for an instance not there), one instance never running two batches at once
while two instances do, an unload that waits for the batch in flight, shutdown, log settings
it cannot apply, decoupled batches streamed to the scheduler, and a model's requests to the
server through the scheduler. The end-to-end tests run the same actor in executor processes.
"""

from __future__ import annotations

import os
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor import instance_slot
from inferd.kernel.actors.executor.actor import ExecutorActor
from inferd.kernel.actors.executor.instance_slot import INLINE_BELOW_NS, TRY_LOOP_AFTER_RUNS
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import SCHEDULER, cpu_executor
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.backends import BackendRegistry, BackendSpec
from inferd.plugins.backends.python import PYTHON_BACKEND
from inferd.plugins.backends.testing import TESTING_BACKEND
from inferd.plugins.backends.testing.backends import FAILURE_MESSAGE, LOAD_FAILURE_MESSAGE
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable, http_status
from inferd.protocols.messages import (
    Ack,
    ApplyLogSettings,
    BatchResult,
    Envelope,
    Failure,
    InferBatch,
    InferRequest,
    InferResponse,
    LoadVersion,
    RemoteStreamRequest,
    Shutdown,
    StreamBatch,
    StreamParts,
    Tensor,
    UnloadVersion,
    VersionLoaded,
    VersionUnloaded,
)

pytestmark = pytest.mark.anyio

WAIT_SECS = 10.0  # bound of every test's exchanges; a pass takes well under a second
EXECUTOR = cpu_executor(0)
SLOW_MS = 200  # long enough that two batches started together surely overlap
MISSING_FRAMEWORK = BackendSpec(name="missing", entry="inferd_no_such_framework:Backend")

ECHO = """
name: "echo"
backend: "inferd_testing"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""
TIMED = ECHO + """
output [ { name: "TIMES" data_type: TYPE_INT64 dims: [ 2 ] } ]
parameters { key: "mode" value { string_value: "slow" } }
parameters { key: "delay_ms" value { string_value: "SLOW_MS" } }
parameters { key: "times_output" value { string_value: "TIMES" } }
""".replace("SLOW_MS", str(SLOW_MS))
# Runs each batch until its release file exists (within the bound of every test's exchanges),
# having written a line to its started file.
HELD = ECHO + """
parameters { key: "mode" value { string_value: "slow" } }
parameters { key: "delay_ms" value { string_value: "WAIT_MS" } }
parameters { key: "started_file" value { string_value: "STARTED" } }
parameters { key: "release_file" value { string_value: "RELEASE" } }
""".replace("WAIT_MS", str(int(WAIT_SECS * 1000)))

COUNTER_CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""
COUNTER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for value in pb_utils.get_input_tensor_by_name(request, "IN").as_numpy():
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([value], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
CALLER_CONFIG = """
name: "caller"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
CALLER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            given = pb_utils.get_input_tensor_by_name(request, "IN")
            call = pb_utils.InferenceRequest(model_name="target", inputs=[given],
                                             requested_output_names=["OUT"])
            answer = pb_utils.get_output_tensor_by_name(call.exec(), "OUT")
            total = sum(int(pb_utils.get_output_tensor_by_name(part, "OUT").as_numpy()[0])
                        for part in call.exec(decoupled=True))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", answer.as_numpy()),
                pb_utils.Tensor("SUM", np.array([total], np.int32))]))
        return responses
"""


def tensor(name: str, values: list[int], shape: tuple[int, ...] | None = None) -> Tensor:
    data = np.array(values, dtype=np.int32)
    if shape is not None:
        data = data.reshape(shape)
    return Tensor(name, "INT32", data.shape, data)


def request(value: int, request_id: str = "") -> InferRequest:
    return InferRequest("echo", (tensor("IN", [value, value], (1, 2)),), id=request_id)


class Scheduler(Actor):
    """A stand-in scheduler: records the ``StreamParts`` it is sent; answers a model's request
    with ``OUT`` = 10 x ``IN``, and streams back 1, 2, 3 and a final flag to a model's
    streamed request."""

    address = SCHEDULER

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self.parts: list[tuple[int, InferResponse | Failure | None, bool]] = []
        self.requests: list[InferRequest] = []

    async def on_stream_parts(self, message: StreamParts, envelope: Envelope) -> None:
        self.parts += zip(message.tokens, message.results, message.finals, strict=True)

    async def on_infer_request(self, message: InferRequest, envelope: Envelope) -> InferResponse:
        self.requests.append(message)
        given = message.inputs[0].data
        return InferResponse(message.model, "1", (tensor("OUT", list(given * 10)),))

    async def on_remote_stream_request(self, message: RemoteStreamRequest,
                                       envelope: Envelope) -> None:
        self.requests.append(message.request)
        for value in (1, 2, 3):
            part = InferResponse(message.request.model, "1", (tensor("OUT", [value]),))
            self.router.tell(message.reply_to, StreamParts((message.token,), (part,), (False,)))
        self.router.tell(message.reply_to, StreamParts((message.token,), (None,), (True,)))

    def finals(self) -> set[int]:
        return {token for token, _, final in self.parts if final}


@dataclass
class Harness:
    router: Router
    executor: ExecutorActor
    scheduler: Scheduler
    folder: Path
    load_ids: int = 0

    async def load(self, config: str, instance_count: int = 1, *, model_py: str = ""
                   ) -> tuple[int, VersionLoaded]:
        """Load ``config`` (with ``model_py`` as its version 1's model.py): the load id and
        the executor's answer."""
        parsed = text_format.Parse(config, ModelConfig())
        folder = self.folder / parsed.name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        if model_py:
            (folder / "1" / "model.py").write_text(textwrap.dedent(model_py))
        self.load_ids += 1
        reply = await self.router.ask(EXECUTOR, LoadVersion(
            self.load_ids, parsed.name, 1, parsed.backend, parsed.SerializeToString(),
            str(folder), instance_count))
        assert isinstance(reply, VersionLoaded)
        return self.load_ids, reply

    async def batch(self, instance: int, *requests: InferRequest) -> BatchResult:
        reply = await self.router.ask(EXECUTOR, InferBatch("echo", 1, instance, requests))
        assert isinstance(reply, BatchResult)
        return reply


@asynccontextmanager
async def running(tmp_path: Path, *, numbered: bool = True) -> AsyncIterator[Harness]:
    """The executor and the stand-in scheduler on one router; every exchange bounded.
    ``numbered``: its instance ids are 1, 2, ... (an incarnation of 0), else a process's."""
    registry = BackendRegistry()
    for spec in (TESTING_BACKEND, PYTHON_BACKEND, MISSING_FRAMEWORK):
        registry.add(spec)
    router = Router("main")
    executor = (ExecutorActor(router, EXECUTOR, registry, {}, incarnation=0) if numbered
                else ExecutorActor(router, EXECUTOR, registry, {}))
    harness = Harness(router, executor, Scheduler(router), tmp_path)
    async with anyio.create_task_group() as tasks:
        await tasks.start(harness.scheduler.run)
        await tasks.start(harness.executor.run)
        with anyio.fail_after(WAIT_SECS):
            yield harness
        tasks.cancel_scope.cancel()


async def until(condition: Callable[[], object]) -> None:
    """Once ``condition()`` holds (``running`` bounds the wait)."""
    while not condition():
        await anyio.sleep(0.005)


def echoed(result: InferResponse | Failure) -> list[int]:
    assert isinstance(result, InferResponse), result
    return [int(value) for value in result.outputs[0].data.reshape(-1)]


def span(result: BatchResult) -> tuple[int, int]:
    """When the batch ran (the testing backend's TIMES output: start and end, ns)."""
    first = result.results[0]
    assert isinstance(first, InferResponse), first
    times = {t.name: t for t in first.outputs}["TIMES"].data.reshape(-1)
    return int(times[0]), int(times[1])


# ---------------------------------------------------------------------------- loading


async def test_a_load_creates_its_instances_and_each_runs_batches(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        _, loaded = await harness.load(ECHO, instance_count=2)
        assert (loaded.instance_ids, loaded.executor) == ((1, 2), EXECUTOR)
        config = ModelConfig.FromString(loaded.config)
        assert (config.name, [i.name for i in config.input]) == ("echo", ["IN"])
        _, again = await harness.load(ECHO)
        assert again.instance_ids == (3,)  # ids are the executor's, never reused
        for instance in (1, 2, 3):
            result = await harness.batch(instance, request(instance, "a"), request(7, "b"))
            assert [echoed(r) for r in result.results] == [[instance] * 2, [7, 7]]
            assert [r.id for r in result.results if isinstance(r, InferResponse)] == ["a", "b"]
            assert sum(result.compute_ns) > 0


async def test_a_failed_load_says_why(tmp_path: Path) -> None:
    failing = ECHO + 'parameters { key: "mode" value { string_value: "fail_load" } }'
    async with running(tmp_path) as harness:
        with pytest.raises(InvalidArgument, match=LOAD_FAILURE_MESSAGE):
            await harness.load(failing)
        with pytest.raises(Unavailable, match=r"backend 'nope' is not installed in this server "
                           r"\(installed: inferd_testing, missing, python\)"):
            await harness.load(ECHO.replace("inferd_testing", "nope"))
        with pytest.raises(Unavailable, match="backend 'missing' cannot be used on this machine"):
            await harness.load(ECHO.replace("inferd_testing", "missing"))
        _, loaded = await harness.load(ECHO)
        assert loaded.instance_ids == (1,)  # the failures created no instance


# ---------------------------------------------------------------------------- batches


async def test_a_backend_failure_fails_the_batch_s_requests_only(tmp_path: Path) -> None:
    failing = ECHO + 'parameters { key: "mode" value { string_value: "fail" } }'
    async with running(tmp_path) as harness:
        await harness.load(failing)
        await harness.load(ECHO)
        result = await harness.batch(1, request(1), request(2))
        assert [(type(r), getattr(r, "message", "")) for r in result.results] == [
            (Failure, FAILURE_MESSAGE)] * 2
        assert [echoed(r) for r in (await harness.batch(2, request(3))).results] == [[3, 3]]


async def test_a_batch_for_an_instance_not_loaded_here_is_not_found(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        with pytest.raises(NotFound, match="instance 5 of 'echo' is not loaded here"):
            await harness.batch(5, request(1))


async def test_a_batch_for_an_instance_of_the_executor_s_previous_process_is_refused(
        tmp_path: Path) -> None:
    """A restarted executor answers to its old name and numbers its instances afresh: a batch
    still addressed to an instance of its previous process must never run on one of the new
    process's (another model's), but fail as an executor that died, retryable."""
    async with running(tmp_path, numbered=False) as before:
        _, echo = await before.load(ECHO)
        assert [echoed(r) for r in (await before.batch(echo.instance_ids[0], request(1))
                                    ).results] == [[1, 1]]
    async with running(tmp_path, numbered=False) as restarted:
        _, other = await restarted.load(ECHO.replace('"echo"', '"other"'))
        assert [echoed(r) for r in (await restarted.batch(other.instance_ids[0], request(2))
                                    ).results] == [[2, 2]]
        stale = echo.instance_ids[0]
        with pytest.raises(Unavailable) as refused:
            await restarted.batch(stale, request(3))
        assert (http_status(refused.value.code), refused.value.message) == (503, (
            f"instance {stale} of 'echo' was loaded by executor process {EXECUTOR} "
            f"(pid {os.getpid()}), which exited; it is being restarted"))


async def test_one_instance_runs_one_batch_at_a_time_and_two_run_at_once(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as harness:
        await harness.load(TIMED, instance_count=2)

        async def together(*instances: int) -> list[tuple[int, int]]:
            spans: list[tuple[int, int]] = []

            async def run(instance: int) -> None:
                spans.append(span(await harness.batch(instance, request(instance))))

            async with anyio.create_task_group() as tasks:
                for instance in instances:
                    tasks.start_soon(run, instance)
            return sorted(spans)

        first, second = await together(1, 1)
        assert first[1] <= second[0]  # the second waited for the first
        first, second = await together(1, 2)
        assert second[0] < first[1]  # they overlapped


# ---------------------------------------------------------------------------- unloading


async def test_an_unload_lets_the_batch_in_flight_finish_then_closes_the_instances(
    tmp_path: Path,
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    async with running(tmp_path) as harness:
        load_id, _ = await harness.load(
            HELD.replace("STARTED", str(started)).replace("RELEASE", str(release)))
        answered: list[BatchResult | VersionUnloaded] = []
        async with anyio.create_task_group() as tasks:

            async def infer() -> None:
                answered.append(await harness.batch(1, request(4)))

            async def unload() -> None:
                reply = await harness.router.ask(EXECUTOR, UnloadVersion(load_id))
                assert isinstance(reply, VersionUnloaded)
                answered.append(reply)

            tasks.start_soon(infer)
            await until(started.exists)  # the batch is at its instance
            tasks.start_soon(unload)
            await until(lambda: 1 not in harness.executor._instances)  # the unload began
            assert answered == []
            release.touch()
        result, unloaded = answered  # the batch answered before the unload was
        assert isinstance(result, BatchResult) and isinstance(unloaded, VersionUnloaded)
        assert echoed(result.results[0]) == [4, 4]
        with pytest.raises(NotFound):
            await harness.batch(1, request(5))
        # An unload of what is not loaded (any more) is no error.
        assert await harness.router.ask(EXECUTOR, UnloadVersion(load_id)) == VersionUnloaded()
        assert await harness.router.ask(EXECUTOR, UnloadVersion(99)) == VersionUnloaded()


async def test_shutdown_unloads_every_model_and_says_the_executor_stopped(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as harness:
        await harness.load(ECHO)
        await harness.load(ECHO)
        assert not harness.executor.stopped.is_set()
        assert await harness.router.ask(EXECUTOR, Shutdown()) == Ack()
        assert harness.executor.stopped.is_set()
        for instance in (1, 2):
            with pytest.raises(NotFound):
                await harness.batch(instance, request(1))


async def test_log_settings_it_cannot_apply_are_logged_and_the_old_ones_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "a-file").write_text("")
    unwritable = str(tmp_path / "a-file" / "server.log")  # a folder that is a file
    async with running(tmp_path) as harness:
        settings = ApplyLogSettings(0, True, True, True, "default", unwritable)
        assert await harness.router.ask(EXECUTOR, settings) == Ack()
        assert f"cannot write the log file '{unwritable}'" in caplog.text
        await harness.load(ECHO)  # it serves on


# ---------------------------------------------------------------------------- streams


async def test_a_decoupled_batch_streams_each_response_to_the_scheduler(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        _, loaded = await harness.load(COUNTER_CONFIG, model_py=COUNTER_MODEL)
        requests = tuple(InferRequest("counter", (tensor("IN", values),))
                         for values in ([5, 6, 7], []))
        reply = await harness.router.ask(EXECUTOR, StreamBatch(
            "counter", 1, loaded.instance_ids[0], requests, (10, 11)))
        assert isinstance(reply, BatchResult) and reply.results == ()
        while harness.scheduler.finals() != {10, 11}:
            await anyio.sleep(0.01)
        assert [echoed(result) for token, result, _ in harness.scheduler.parts
                if token == 10 and result is not None] == [[5], [6], [7]]
        assert [(result, final) for token, result, final in harness.scheduler.parts
                if token == 11] == [(None, True)]


async def test_a_decoupled_batch_for_a_model_that_cannot_stream_fails_each_request(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as harness:
        await harness.load(ECHO)
        reply = await harness.router.ask(EXECUTOR, StreamBatch(
            "echo", 1, 1, (request(1), request(2)), (20, 21)))
        assert isinstance(reply, BatchResult)
        while harness.scheduler.finals() != {20, 21}:
            await anyio.sleep(0.01)
        for _, result, final in harness.scheduler.parts:
            assert final and isinstance(result, Failure)
            assert "has no decoupled models" in result.message


async def test_a_model_s_own_requests_go_through_the_scheduler(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        _, loaded = await harness.load(CALLER_CONFIG, model_py=CALLER_MODEL)
        reply = await harness.router.ask(EXECUTOR, InferBatch("caller", 1, loaded.instance_ids[0], (
            InferRequest("caller", (tensor("IN", [4]),)),)))
        assert isinstance(reply, BatchResult)
        (result,) = reply.results
        assert isinstance(result, InferResponse), result
        outputs = {t.name: int(t.data.reshape(-1)[0]) for t in result.outputs}
        assert outputs == {"OUT": 40, "SUM": 1 + 2 + 3}  # the call, and the stream's parts
        assert [r.model for r in harness.scheduler.requests] == ["target", "target"]


class RunClock:
    """``instance_slot``'s clocks, moved on by the runs themselves: each run takes the
    wall-clock and thread CPU time it says (``run``), and no other time passes."""

    def __init__(self) -> None:
        self.wall_ns = 0
        self.cpu_ns = 0

    def run(self, wall_ns: int, cpu_ns: int) -> None:
        self.wall_ns += wall_ns
        self.cpu_ns += cpu_ns

    def perf_counter_ns(self) -> int:
        return self.wall_ns

    def thread_time_ns(self) -> int:
        return self.cpu_ns


async def test_a_fast_model_measured_on_a_busy_thread_comes_back_to_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run on the instance's thread also counts its waits (for the GIL, to be scheduled),
    and they counted as the model's cost: a model whose first runs were on its thread under
    load (its executor just restarted under the same clients) never measured fast again and
    stayed off the loop for good (issue 28). Its thread's CPU time per run says it is fast,
    so after TRY_LOOP_AFTER_RUNS on the thread it is tried on the loop, and stays there.
    The runs' durations are the ones the slot is given (``RunClock``), not the machine's."""
    clock = RunClock()
    monkeypatch.setattr(instance_slot, "time", clock)
    fast_ns = INLINE_BELOW_NS // 10
    async with running(tmp_path) as harness:
        await harness.load(ECHO)
        slot = harness.executor._instances[1]
        loop_thread = threading.current_thread()
        on_loop: list[bool] = []
        execute = slot.instance.execute

        def recorded(requests: Any) -> Any:
            on_loop.append(threading.current_thread() is loop_thread)
            # A fast model; on its thread each run also waits a millisecond (for the GIL,
            # to be scheduled), which counts in its wall-clock time, not in its CPU time.
            clock.run(fast_ns if on_loop[-1] else fast_ns + 1_000_000, fast_ns)
            return execute(requests)

        slot.instance.execute = recorded
        for value in range(TRY_LOOP_AFTER_RUNS + 100):
            result = await harness.batch(1, request(value))
            assert echoed(result.results[0]) == [value, value]
        assert on_loop == [False] * TRY_LOOP_AFTER_RUNS + [True] * 100
