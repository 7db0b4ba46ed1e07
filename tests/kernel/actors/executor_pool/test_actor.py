"""The executor pool actor driven through its messages: a router, the real
``ExecutorPoolActor`` and a stand-in control that records what the pool tells it.

Most tests run the pool as ``--executor-inline`` does (its executor in this process, no
sockets): loads and unloads, a failed load, an unload that overtakes its load, shutdown,
metrics, log settings and a kind it does not handle. The rest need what only processes
have (placement over executors, a crash and its restart, a model's own process stopped at its
unload): they start real executor processes with the testing backend, linked to this process
through a hub socket as the server links them, and stay bounded (a process starts in about
half a second). The end-to-end tests cover the same paths through a whole server.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
import zmq
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor.instance_ids import number_of
from inferd.kernel.actors.executor_pool.actor import ExecutorPoolActor
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import (
    CONTROL,
    EXECUTORS,
    INLINE_EXECUTOR,
    cpu_executor,
    isolated_executor,
)
from inferd.kernel.runtime.process_link import LinkMemory, ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.backends import BackendRegistry
from inferd.kernel.settings import Settings
from inferd.plugins.backends.python import PYTHON_BACKEND
from inferd.plugins.backends.testing import TESTING_BACKEND
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    ExecutorCrashed,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unsupported,
)
from inferd.protocols.logging_api import LOG_FILE_REFUSED
from inferd.protocols.messages import (
    Ack,
    BatchResult,
    Envelope,
    ExecutorHello,
    ExecutorLost,
    InferBatch,
    InferRequest,
    InferResponse,
    ListModels,
    LoadVersion,
    LogSettingsReply,
    LogSettingsRequest,
    Metrics,
    MetricsRequest,
    Shutdown,
    Tensor,
    UnloadVersion,
    VersionLoaded,
    VersionUnloaded,
)

pytestmark = pytest.mark.anyio

WAIT_SECS = 20.0  # bound of each test's exchanges; a pass takes at most a few seconds

ECHO = """
name: "{name}"
backend: "inferd_testing"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: {count} } ]
"""


def mode(name: str, **parameters: str) -> str:
    """``parameters`` as the config's string parameters (the testing backend's mode...)."""
    return "".join(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
                   for key, value in {"mode": name, **parameters}.items())


class Control(Actor):
    """A stand-in control: records the executors the pool says it lost and got back."""

    address = CONTROL

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self.lost: list[ExecutorLost] = []
        self.back: list[ExecutorHello] = []

    async def on_executor_lost(self, message: ExecutorLost, envelope: Envelope) -> None:
        self.lost.append(message)

    async def on_executor_hello(self, message: ExecutorHello, envelope: Envelope) -> None:
        self.back.append(message)


@dataclass
class Harness:
    router: Router
    control: Control
    folder: Path
    load_ids: int = 0

    async def load(self, name: str, extra: str = "", *, count: int = 1, isolated: bool = False,
                   backend: str = "inferd_testing") -> tuple[int, VersionLoaded]:
        """Load version 1 of an echo model (``extra`` appended to its config): the load id and
        the pool's answer."""
        config = text_format.Parse(
            ECHO.replace("{name}", name).replace("{count}", str(count)) + extra, ModelConfig())
        (self.folder / name / "1").mkdir(parents=True, exist_ok=True)
        self.load_ids += 1
        reply = await self.router.ask(EXECUTORS, LoadVersion(
            self.load_ids, name, 1, backend, config.SerializeToString(),
            str(self.folder / name), count, isolated=isolated))
        assert isinstance(reply, VersionLoaded)
        return self.load_ids, reply

    async def unload(self, load_id: int) -> None:
        assert isinstance(await self.router.ask(EXECUTORS, UnloadVersion(load_id)),
                          VersionUnloaded)

    async def infer(self, executor: str, instance: int, value: int) -> list[int]:
        """``value`` through an echo instance: what came back."""
        data = np.full((1, 2), value, dtype=np.int32)
        request = InferRequest("m", (Tensor("IN", "INT32", data.shape, data),))
        reply = await self.router.ask(executor, InferBatch("m", 1, instance, (request,)))
        assert isinstance(reply, BatchResult)
        (result,) = reply.results
        assert isinstance(result, InferResponse), result
        return [int(v) for v in result.outputs[0].data.reshape(-1)]

    async def metrics(self) -> dict[tuple[str, str], float]:
        """(metric, executor) -> value."""
        reply = await self.router.ask(EXECUTORS, MetricsRequest())
        assert isinstance(reply, Metrics)
        return {(name, labels["executor"]): value for name, labels, value in reply.samples}

    async def running_executors(self) -> set[str]:
        """The executors whose process runs now (those with a CPU time)."""
        return {executor for name, executor in await self.metrics()
                if name == "inferd_executor_cpu_seconds_total"}

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await anyio.sleep(0.01)


def registry(*specs: Any) -> BackendRegistry:
    backends = BackendRegistry()
    for spec in specs or (TESTING_BACKEND, PYTHON_BACKEND):
        backends.add(spec)
    return backends


@asynccontextmanager
async def running(tmp_path: Path, backends: BackendRegistry | None = None,
                  **settings: Any) -> AsyncIterator[Harness]:
    """The pool (inline unless ``executor_inline=False`` is given) and the stand-in control on
    one router; with processes, the hub link they reach this process through. Everything
    inside is bounded; at the end the pool stops its executors (as the server's shutdown)."""
    options: dict[str, Any] = {"executor_inline": True, **settings}
    router = Router("main")
    context = zmq.Context()
    link = None
    hub = f"ipc://{tmp_path / 'hub'}"
    if not options["executor_inline"]:
        link = ProcessLink.hub(router, context, hub, LinkMemory(os.getpid()))
    pool = ExecutorPoolActor(router, Settings(**options), backends or registry(), hub, link)
    harness = Harness(router, Control(router), tmp_path / "models")
    try:
        async with anyio.create_task_group() as tasks:
            if link is not None:
                tasks.start_soon(link.run)
            await tasks.start(harness.control.run)
            with anyio.fail_after(WAIT_SECS):
                await tasks.start(pool.run)
                yield harness
                assert await router.ask(EXECUTORS, Shutdown()) == Ack()
            tasks.cancel_scope.cancel()
    finally:
        if link is not None:
            link.close()
        context.term()


def numbered(instances: tuple[tuple[str, int], ...]) -> list[tuple[str, int]]:
    """Each instance's executor and which of its process's instances it is (from 1)."""
    return [(executor, number_of(instance)) for executor, instance in instances]


# ---------------------------------------------------------------------------- inline


async def test_an_inline_load_runs_in_this_process_and_its_unload_closes_it(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as harness:
        load_id, loaded = await harness.load("m", count=2)
        assert loaded.executor == INLINE_EXECUTOR
        assert numbered(loaded.instances) == [(INLINE_EXECUTOR, 1), (INLINE_EXECUTOR, 2)]
        config = ModelConfig.FromString(loaded.config)
        assert (config.name, config.instance_group[0].count) == ("m", 2)
        second = loaded.instances[1][1]
        assert await harness.infer(INLINE_EXECUTOR, second, 5) == [5, 5]
        await harness.unload(load_id)
        with pytest.raises(NotFound):
            await harness.infer(INLINE_EXECUTOR, second, 5)


async def test_a_failed_load_is_answered_with_its_reason(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        with pytest.raises(InvalidArgument, match="the weights are gone"):
            await harness.load("broken", mode("fail_load", message="the weights are gone"))
        _, loaded = await harness.load("m")
        assert numbered(loaded.instances) == [(INLINE_EXECUTOR, 1)]  # the failure made none


async def test_an_unload_that_overtakes_its_load_unloads_it_once_loaded(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        answers: list[VersionLoaded] = []

        async def load() -> None:
            answers.append((await harness.load("m", mode("slow_load", load_delay_ms="300")))[1])

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(load)
            await anyio.sleep(0.05)  # the load is under way
            await harness.unload(1)  # the asker gave up: answered at once
            assert answers == []
        with pytest.raises(NotFound):  # the instance it created is gone again
            await harness.infer(INLINE_EXECUTOR, answers[0].instance_ids[0], 1)


async def test_after_shutdown_loads_are_refused(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        assert await harness.router.ask(EXECUTORS, Shutdown()) == Ack()
        with pytest.raises(Unavailable, match=SHUTTING_DOWN):
            await harness.load("m")


async def test_an_execution_environment_needs_executor_processes(tmp_path: Path) -> None:
    wanted = 'parameters { key: "EXECUTION_ENV_PATH" value { string_value: "env.tar.gz" } }'
    async with running(tmp_path) as harness:
        with pytest.raises(InvalidArgument, match="EXECUTION_ENV_PATH needs executor processes"):
            await harness.load("m", wanted, backend="python")


async def test_the_inline_executor_s_metrics_are_this_process_s(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        metrics = await harness.metrics()
        assert set(metrics) == {(name, INLINE_EXECUTOR) for name in (
            "inferd_executor_cpu_seconds_total", "inferd_executor_resident_memory_bytes",
            "inferd_executor_restarts_total")}
        assert metrics["inferd_executor_cpu_seconds_total", INLINE_EXECUTOR] > 0
        assert metrics["inferd_executor_restarts_total", INLINE_EXECUTOR] == 0


async def test_log_settings_are_read_and_a_refused_update_changes_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    unwritable = str(tmp_path / "a-file" / "server.log")  # a folder that is a file
    current = LogSettingsReply("", True, True, True, 0, "default")
    async with running(tmp_path) as harness:
        assert await harness.router.ask(EXECUTORS, LogSettingsRequest()) == current
        with pytest.raises(Unsupported, match=LOG_FILE_REFUSED):
            await harness.router.ask(EXECUTORS, LogSettingsRequest({"log_file": unwritable}))
    async with running(tmp_path, log_file_updates=True) as harness:
        with pytest.raises(InvalidArgument, match=f"cannot write the log file '{unwritable}'"):
            await harness.router.ask(EXECUTORS, LogSettingsRequest(
                {"log_file": unwritable, "log_verbose_level": 1}))
        assert await harness.router.ask(EXECUTORS, LogSettingsRequest()) == current


async def test_a_kind_it_does_not_handle_is_answered_with_an_error(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        with pytest.raises(Unsupported, match="does not handle ListModels"):
            await harness.router.ask(EXECUTORS, ListModels())
        _, loaded = await harness.load("m")  # it serves on
        assert loaded.executor == INLINE_EXECUTOR


# ---------------------------------------------------------------------------- processes


async def test_loads_go_to_the_cpu_executor_with_the_fewest(tmp_path: Path) -> None:
    cpu0, cpu1 = cpu_executor(0), cpu_executor(1)
    async with running(tmp_path, executor_inline=False, cpu_executor="process",
                       cpu_executors=2) as harness:
        assert await harness.running_executors() == {cpu0, cpu1}
        _, a = await harness.load("a")
        second, b = await harness.load("b")
        assert (a.executor, b.executor) == (cpu0, cpu1)
        assert await harness.infer(cpu0, a.instance_ids[0], 1) == [1, 1]
        assert await harness.infer(cpu1, b.instance_ids[0], 2) == [2, 2]
        await harness.unload(second)
        _, c = await harness.load("c")
        assert c.executor == cpu1  # emptied by the unload
        assert harness.control.lost == [] and harness.control.back == []


async def test_native_backends_run_in_the_server_unless_a_model_asks_for_a_process(
    tmp_path: Path,
) -> None:
    # The testing backend stands for a native one (runs_in_server); the processes load the
    # installed one, which is the same backend.
    native = replace(TESTING_BACKEND, runs_in_server=True)
    async with running(tmp_path, registry(native, PYTHON_BACKEND),
                       executor_inline=False) as harness:
        assert await harness.running_executors() == set()  # nothing started before a need
        _, inline = await harness.load("n")
        assert inline.executor == INLINE_EXECUTOR
        assert await harness.running_executors() == {INLINE_EXECUTOR}
        assert await harness.infer(INLINE_EXECUTOR, inline.instance_ids[0], 7) == [7, 7]
        shared = '\nparameters { key: "INFERD_EXECUTOR" value { string_value: "shared" } }'
        _, in_process = await harness.load("s", shared)
        assert in_process.executor == cpu_executor(0)  # started for it
        assert await harness.running_executors() == {INLINE_EXECUTOR, cpu_executor(0)}
        server = shared.replace('"shared"', '"server"')
        with pytest.raises(InvalidArgument, match="backend 'python' runs in executor processes"):
            await harness.load("bad", server, backend="python")


async def test_a_crashed_executor_fails_its_asks_is_reported_and_restarted(
    tmp_path: Path,
) -> None:
    cpu0 = cpu_executor(0)
    async with running(tmp_path, executor_inline=False, cpu_executor="process") as harness:
        crashing_load, crashing = await harness.load("crashing", mode("crash"))
        with pytest.raises(ExecutorCrashed):
            await harness.infer(cpu0, crashing.instance_ids[0], 1)
        await harness.until(lambda: bool(harness.control.lost))
        (lost,) = harness.control.lost
        assert lost.name == cpu0 and "exited with code 17" in lost.reason
        await harness.until(lambda: bool(harness.control.back))  # restarted after a back-off
        assert [hello.name for hello in harness.control.back] == [cpu0]
        assert (await harness.metrics())["inferd_executor_restarts_total", cpu0] == 1
        await harness.unload(crashing_load)  # its instances went with the process
        _, loaded = await harness.load("m")
        assert loaded.executor == cpu0
        assert await harness.infer(cpu0, loaded.instance_ids[0], 3) == [3, 3]


async def test_an_isolated_model_s_own_process_stops_at_its_unload(tmp_path: Path) -> None:
    own = isolated_executor("iso", "")
    async with running(tmp_path, executor_inline=False, cpu_executor="process") as harness:
        load_id, loaded = await harness.load("iso", isolated=True)
        assert loaded.executor == own
        assert await harness.running_executors() == {cpu_executor(0), own}
        assert await harness.infer(own, loaded.instance_ids[0], 4) == [4, 4]
        await harness.unload(load_id)
        assert await harness.running_executors() == {cpu_executor(0)}
        await anyio.sleep(0.1)  # what its exit would set off, had it been a crash
        assert harness.control.lost == []
        _, again = await harness.load("iso", isolated=True)  # a fresh process
        assert await harness.infer(own, again.instance_ids[0], 5) == [5, 5]
        assert harness.control.back == []  # not a restart: nothing for control to reload
        metrics = await harness.metrics()
        assert metrics["inferd_executor_restarts_total", own] == 0


async def test_a_process_per_instance_backend_gets_a_process_per_instance(
    tmp_path: Path,
) -> None:
    # The pool places by its own registry; the processes load the installed testing backend.
    per_instance = replace(TESTING_BACKEND, process_per_instance=True)
    async with running(tmp_path, registry(per_instance), executor_inline=False,
                       cpu_executor="process") as harness:
        load_id, loaded = await harness.load("m", count=2)
        first, second = isolated_executor("m", "/0"), isolated_executor("m", "/1")
        assert [executor for executor, _ in loaded.instances] == [first, second]
        assert ModelConfig.FromString(loaded.config).instance_group[0].count == 2
        for executor, instance in loaded.instances:
            assert await harness.infer(executor, instance, 6) == [6, 6]
        assert await harness.running_executors() == {cpu_executor(0), first, second}
        await harness.unload(load_id)
        assert await harness.running_executors() == {cpu_executor(0)}
