"""The control actor driven through its messages, without sockets or processes.

A real in-process ``Router`` connects the real ``ControlActor`` to three stand-in actors at
the addresses it talks to (repository, scheduler, executor pool) that answer with canned
replies and record what they were asked; each test then sends control the messages the
frontends and the pool would (load, unload, index, poll, executor lost/hello) and checks its
replies, its index and what it asked of the others. The end-to-end tests cover the same
paths with real servers; these pin the actor's own decisions down, fast and one at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.control import poll as control_poll
from inferd.kernel.actors.control.actor import ControlActor
from inferd.kernel.sdk.control import OpenedPolicy
from inferd.kernel.sdk.control_state import ControlStateStore, Entry
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import CONTROL, EXECUTORS, REPOSITORY, SCHEDULER, cpu_executor
from inferd.kernel.runtime.router import Router
from inferd.kernel.settings import Settings
from inferd.plugins.control_state.path import LocalStore
from inferd.plugins.control_state.record import ControlStateRecord
from inferd.protocols.errors import InferdError, InvalidArgument, NotFound, Unavailable
from inferd.protocols.messages import (
    Ack,
    Catalog,
    Catalogs,
    DescribeModels,
    Envelope,
    ExecutorHello,
    ExecutorLost,
    FingerprintModels,
    Fingerprints,
    HealthRequest,
    HealthStatus,
    Index,
    IndexEntry,
    IndexRequest,
    ListModels,
    LoadRequest,
    LoadStartupModels,
    LoadVersion,
    ModelKnown,
    ModelList,
    PollRequest,
    ReadCatalogs,
    ResolvedModel,
    ResolveModel,
    Retired,
    RetireVersion,
    ServeVersion,
    StartupReport,
    UnloadRequest,
    UnloadVersion,
    VersionLoaded,
)

pytestmark = pytest.mark.anyio

WAIT_SECS = 10.0  # a bound on every wait for work control does in the background


def model_config(name: str) -> bytes:
    config = text_format.Parse(
        f"""
        name: "{name}" backend: "identity" max_batch_size: 0
        input {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }}
        output {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }}
        """,
        ModelConfig(),
    )
    return bytes(config.SerializeToString())


def ensemble_config(name: str, composing: str) -> bytes:
    config = text_format.Parse(
        f"""
        name: "{name}" platform: "ensemble" max_batch_size: 0
        input {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }}
        output {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }}
        ensemble_scheduling {{ step {{
            model_name: "{composing}" model_version: -1
            input_map {{ key: "IN" value: "X" }}
            output_map {{ key: "OUT" value: "Y" }}
        }} }}
        """,
        ModelConfig(),
    )
    return bytes(config.SerializeToString())


class FakeRepository(Actor):
    """The repository actor: the models it holds (or the error resolving one raises) and
    each folder's fingerprint, set by the test."""

    address = REPOSITORY

    def __init__(self, router: Router, folder: Path) -> None:
        super().__init__(router)
        self.folder = folder
        self.models: dict[str, ResolvedModel | InferdError] = {}
        self.fingerprints: dict[str, str] = {}
        self.resolved: list[ResolveModel] = []

    def add(self, name: str, config: bytes | None = None, backend: str = "identity",
            versions: tuple[int, ...] = (1,)) -> None:
        path = self.folder / name
        path.mkdir(exist_ok=True)
        self.models[name] = ResolvedModel(name, backend, config or model_config(name),
                                          str(path), versions)
        self.fingerprints[name] = "first"

    def remove(self, name: str) -> None:
        del self.models[name]
        del self.fingerprints[name]

    async def on_list_models(self, message: ListModels, envelope: Envelope) -> ModelList:
        return ModelList(tuple(sorted(self.models)))

    async def on_resolve_model(self, message: ResolveModel, envelope: Envelope
                               ) -> ResolvedModel:
        self.resolved.append(message)
        found = self.models.get(message.model)
        if found is None:
            raise NotFound(f"failed to load '{message.model}', no version is available")
        if isinstance(found, InferdError):
            raise found
        return found

    async def on_fingerprint_models(self, message: FingerprintModels, envelope: Envelope
                                    ) -> Fingerprints:
        return Fingerprints(dict(self.fingerprints))

    async def on_read_catalogs(self, message: ReadCatalogs, envelope: Envelope) -> Catalogs:
        return Catalogs({})

    async def on_describe_models(self, message: DescribeModels, envelope: Envelope) -> Catalog:
        return Catalog(())


class FakeScheduler(Actor):
    """The scheduler actor: records what it is told to serve, retire and know."""

    address = SCHEDULER

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self.served: dict[tuple[str, int], ServeVersion] = {}
        self.retired: list[RetireVersion] = []
        self.known: list[tuple[str, tuple[int, ...]]] = []

    async def on_serve_version(self, message: ServeVersion, envelope: Envelope) -> Ack:
        self.served[message.model, message.version] = message
        return Ack()

    async def on_retire_version(self, message: RetireVersion, envelope: Envelope
                                ) -> Ack | Retired:
        if not message.wait:  # nothing is ever in flight here
            return Retired(False)
        self.retired.append(message)
        self.served.pop((message.model, message.version), None)
        return Ack()

    async def on_model_known(self, message: ModelKnown, envelope: Envelope) -> None:
        self.known.append((message.model, message.loading))


class FakeExecutors(Actor):
    """The executor pool: loads succeed on ``executor/cpu0`` (the config comes back as
    auto-completed) unless the test made the model's loads fail."""

    address = EXECUTORS

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self.loads: list[LoadVersion] = []
        self.unloads: list[int] = []
        self.failing: dict[str, InferdError] = {}

    async def on_load_version(self, message: LoadVersion, envelope: Envelope) -> VersionLoaded:
        self.loads.append(message)
        failure = self.failing.get(message.model)
        if failure is not None:
            raise failure
        return VersionLoaded(message.config, (0,), cpu_executor(0))

    async def on_unload_version(self, message: UnloadVersion, envelope: Envelope) -> Ack:
        self.unloads.append(message.load_id)
        return Ack()

    def loads_of(self, model: str) -> list[LoadVersion]:
        return [load for load in self.loads if load.model == model]


@dataclass
class Harness:
    router: Router
    control: ControlActor
    repository: FakeRepository
    scheduler: FakeScheduler
    executors: FakeExecutors

    async def index(self) -> tuple[IndexEntry, ...]:
        reply = await self.router.ask(CONTROL, IndexRequest())
        assert isinstance(reply, Index)
        return reply.entries

    async def entry(self, name: str) -> tuple[str, str, str]:
        found = [e for e in await self.index() if e.name == name]
        assert len(found) == 1, found
        return found[0].version, found[0].state, found[0].reason

    async def until(self, condition: Callable[[], bool]) -> None:
        with anyio.fail_after(WAIT_SECS):
            while not condition():
                await anyio.sleep(0.01)

    async def until_entry(self, name: str, state: str) -> tuple[str, str, str]:
        with anyio.fail_after(WAIT_SECS):
            while True:
                found = await self.entry(name)
                if found[1] == state:
                    return found
                await anyio.sleep(0.01)


@asynccontextmanager
async def running(tmp_path: Path, models: tuple[str, ...] = (), *,
                  record: ControlStateStore | None = None, record_poll_secs: float = 5.0,
                  **settings: Any) -> AsyncIterator[Harness]:
    """Control and its stand-ins on one router; ``models`` are in the repository; ``record``
    the ``--model-control-state`` store, if any."""
    router = Router("main")
    options: dict[str, Any] = {"model_control_mode": "explicit", **settings}
    policies = [] if record is None else [OpenedPolicy(
        lambda handle: ControlStateRecord(handle, record, record.read(),
                                          poll_secs=record_poll_secs))]
    control = ControlActor(router, Settings(**options), tmp_path / "overrides", policies)
    (tmp_path / "models").mkdir(exist_ok=True)
    harness = Harness(router, control, FakeRepository(router, tmp_path / "models"),
                      FakeScheduler(router), FakeExecutors(router))
    for name in models:
        harness.repository.add(name)
    async with anyio.create_task_group() as tasks:
        for actor in (harness.repository, harness.scheduler, harness.executors, control):
            await tasks.start(actor.run)
        try:
            yield harness
        finally:
            tasks.cancel_scope.cancel()


async def load(harness: Harness, name: str) -> None:
    assert await harness.router.ask(CONTROL, LoadRequest(name)) == Ack()


# ---------------------------------------------------------------------------- explicit loads


async def test_a_load_resolves_loads_on_an_executor_and_serves_the_version(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, ("a",)) as harness:
        await load(harness, "a")
        assert await harness.entry("a") == ("1", "READY", "")
        assert [r.model for r in harness.repository.resolved] == ["a"]
        (loaded,) = harness.executors.loads
        assert (loaded.model, loaded.version, loaded.backend) == ("a", 1, "identity")
        served = harness.scheduler.served["a", 1]
        assert served.instances == ((cpu_executor(0), 0),)
        assert served.config == model_config("a")


async def test_a_failed_load_leaves_the_version_unavailable_with_its_reason(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, ("bad",)) as harness:
        harness.executors.failing["bad"] = InvalidArgument("the backend says no")
        with pytest.raises(InvalidArgument) as failed:
            await harness.router.ask(CONTROL, LoadRequest("bad"))
        assert failed.value.message == (
            "load failed for model 'bad': version 1 is at UNAVAILABLE state: the backend says no"
        )
        assert await harness.entry("bad") == ("1", "UNAVAILABLE", "the backend says no")
        assert ("bad", 1) not in harness.scheduler.served
        # Its requests hear it is not available: while it loads, and after.
        assert harness.scheduler.known == [("bad", (1,)), ("bad", ())]


async def test_a_load_of_an_unknown_model_leaves_no_trace(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        with pytest.raises(NotFound):
            await harness.router.ask(CONTROL, LoadRequest("nothing"))
        assert await harness.index() == ()
        assert harness.executors.loads == []


async def test_a_failed_reload_keeps_the_serving_copy_ready(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",)) as harness:
        await load(harness, "a")
        first = harness.executors.loads[0].load_id
        harness.executors.failing["a"] = InvalidArgument("the new copy breaks")
        with pytest.raises(InvalidArgument):
            await harness.router.ask(CONTROL, LoadRequest("a"))
        version, state, reason = await harness.entry("a")
        assert (version, state) == ("1", "READY")
        assert "the new copy breaks" in reason
        assert harness.scheduler.served["a", 1].instances == ((cpu_executor(0), 0),)
        assert first not in harness.executors.unloads


async def test_unload_retires_the_version_and_unloads_its_instances(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",)) as harness:
        await load(harness, "a")
        load_id = harness.executors.loads[0].load_id
        assert await harness.router.ask(CONTROL, UnloadRequest("a")) == Ack()
        assert await harness.entry("a") == ("1", "UNAVAILABLE", "unloaded")
        assert [(r.model, r.version) for r in harness.scheduler.retired] == [("a", 1)]
        assert harness.executors.unloads == [load_id]


async def test_explicit_calls_are_refused_outside_explicit_mode(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",), model_control_mode="none") as harness:
        for request in (LoadRequest("a"), UnloadRequest("a")):
            with pytest.raises(Unavailable):
                await harness.router.ask(CONTROL, request)
        assert harness.executors.loads == []


async def test_strict_readiness_waits_for_the_models_loaded(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",), model_control_mode="none") as harness:
        ready = HealthRequest("ready")
        assert await harness.router.ask(CONTROL, ready) == HealthStatus(False)  # not started
        harness.executors.failing["a"] = InvalidArgument("no")
        report = await harness.router.ask(CONTROL, LoadStartupModels())
        assert isinstance(report, StartupReport) and set(report.failures) == {"a"}
        assert await harness.router.ask(CONTROL, ready) == HealthStatus(False)
        assert await harness.router.ask(CONTROL, HealthRequest("live")) == HealthStatus(True)


# ---------------------------------------------------------------------------- ensembles


async def test_an_ensemble_load_loads_its_composing_model_first(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",)) as harness:
        harness.repository.add("ens", ensemble_config("ens", "a"), backend="")
        await load(harness, "ens")
        assert await harness.entry("a") == ("1", "READY", "")
        assert await harness.entry("ens") == ("1", "READY", "")
        assert harness.scheduler.served["ens", 1].instances == ()  # served without executors
        assert [load.model for load in harness.executors.loads] == ["a"]
        # The composing model only it brought in goes with it.
        await harness.router.ask(CONTROL, UnloadRequest("ens", unload_dependents=True))
        assert await harness.entry("ens") == ("1", "UNAVAILABLE", "unloaded")
        assert await harness.entry("a") == ("1", "UNAVAILABLE", "unloaded")


async def test_an_ensemble_follows_the_state_of_its_composing_model(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",)) as harness:
        harness.repository.add("ens", ensemble_config("ens", "a"), backend="")
        await load(harness, "ens")
        await harness.router.ask(CONTROL, UnloadRequest("a"))
        assert await harness.entry("ens") == (
            "1", "UNAVAILABLE", "composing model 'a' is not ready: unloaded")
        await load(harness, "a")
        assert await harness.entry("ens") == ("1", "READY", "")


# ---------------------------------------------------------------------------- POLL mode


async def test_a_poll_reloads_a_changed_folder_and_unloads_a_removed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(control_poll, "POLL_SETTLE_SECS", 0.01)
    async with running(tmp_path, ("a", "b"), model_control_mode="poll",
                       repository_poll_secs=3600.0) as harness:
        report = await harness.router.ask(CONTROL, LoadStartupModels())
        assert report == StartupReport({})
        assert await harness.entry("a") == ("1", "READY", "")
        assert await harness.entry("b") == ("1", "READY", "")
        first_a = harness.executors.loads_of("a")[0].load_id
        harness.repository.fingerprints["a"] = "changed"
        harness.repository.remove("b")
        assert await harness.router.ask(CONTROL, PollRequest()) == Ack()
        assert len(harness.executors.loads_of("a")) == 2  # a new copy replaced the old one
        assert first_a in harness.executors.unloads
        assert await harness.entry("a") == ("1", "READY", "")
        assert [e.name for e in await harness.index()] == ["a"]  # gone from the index too
        assert ("b", 1) not in harness.scheduler.served
        # Nothing changed since: a poll does nothing.
        assert await harness.router.ask(CONTROL, PollRequest()) == Ack()
        assert len(harness.executors.loads_of("a")) == 2


async def test_a_poll_is_refused_outside_poll_mode(tmp_path: Path) -> None:
    async with running(tmp_path) as harness:
        with pytest.raises(Unavailable):
            await harness.router.ask(CONTROL, PollRequest())


# ---------------------------------------------------------------------------- executors


async def test_a_lost_executor_makes_its_versions_unavailable_until_they_reload(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, ("a",)) as harness:
        await load(harness, "a")
        harness.router.tell(CONTROL, ExecutorLost(cpu_executor(0), "executor cpu0 died"))
        assert await harness.until_entry("a", "UNAVAILABLE") == (
            "1", "UNAVAILABLE", "executor cpu0 died; reloading")
        await harness.until(lambda: bool(harness.scheduler.retired))
        assert harness.scheduler.retired == [RetireVersion("a", 1, reloading="executor cpu0 died")]
        assert len(harness.executors.loads) == 1  # nothing reloads before the executor is back
        harness.router.tell(CONTROL, ExecutorHello(cpu_executor(0), 1234, ("identity",)))
        assert await harness.until_entry("a", "READY") == ("1", "READY", "")
        assert len(harness.executors.loads) == 2
        assert harness.repository.resolved[-1].cached_ok  # a cached copy may stand in
        assert ("a", 1) in harness.scheduler.served


async def test_an_executor_nobody_lived_in_changes_nothing(tmp_path: Path) -> None:
    async with running(tmp_path, ("a",)) as harness:
        await load(harness, "a")
        harness.router.tell(CONTROL, ExecutorLost(cpu_executor(1), "executor cpu1 died"))
        harness.router.tell(CONTROL, ExecutorHello(cpu_executor(1), 1234, ("identity",)))
        await harness.index()
        await anyio.sleep(0.05)  # what a loss would have started (a retire, a reload) has run
        assert await harness.entry("a") == ("1", "READY", "")
        assert harness.scheduler.retired == [] and len(harness.executors.loads) == 1


# ---------------------------------------------------------------------------- the record


async def test_a_load_is_written_to_the_record_and_a_removal_there_is_followed(
    tmp_path: Path,
) -> None:
    record = LocalStore(str(tmp_path / "control_state.json"))
    async with running(tmp_path, ("a", "b"), record=record,
                       record_poll_secs=0.02) as harness:
        assert await harness.router.ask(CONTROL, LoadStartupModels()) == StartupReport({})
        await load(harness, "a")
        written, _ = record.read()
        assert set(written.models) == {"a"}
        # Another replica loads b and unloads a: this one follows.
        other = LocalStore(str(tmp_path / "control_state.json"))
        other.update(lambda current: {"b": Entry()}, {})
        assert await harness.until_entry("b", "READY") == ("1", "READY", "")
        assert await harness.until_entry("a", "UNAVAILABLE") == ("1", "UNAVAILABLE", "unloaded")
        assert [load.model for load in harness.executors.loads] == ["a", "b"]
