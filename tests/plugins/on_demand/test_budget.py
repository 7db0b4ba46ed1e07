"""The memory budget (``inferd.plugins.on_demand.budget``) without a server: a load's
footprint is its declared size or what the meter saw it add (never less than its files), a
load that would not fit unloads the least recently used idle model first, a busy, pinned or
loading one is never chosen, a load found larger once measured unloads more, and the index
rows get each READY version's share and last use."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.control.model_status import ModelStatus, State, VersionStatus
from inferd.kernel.sdk import MemoryMeter
from inferd.kernel.sdk.control import Usage
from inferd.plugins.on_demand.budget import MemoryBudget
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import IndexEntry

pytestmark = pytest.mark.anyio


class Meter(MemoryMeter):
    """Reads what the test says the process holds."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 1000

    def reading(self, device: str) -> int | None:
        return self.held


def config(declared: int | None = None) -> ModelConfig:
    result = ModelConfig()
    if declared is not None:
        result.parameters["INFERD_MEMORY_BYTES"].string_value = str(declared)
    return result


class Server:
    """The actor's side: its models, the scheduler's figures, pins and evictions."""

    def __init__(self, tmp_path: Path, budget: int) -> None:
        self.models: dict[str, ModelStatus] = {}
        self.usage: dict[tuple[str, int], tuple[int, bool]] = {}
        self.pins: set[str] = set()
        self.evicted: list[tuple[str, str]] = []
        self.meter = Meter()
        self.folder = tmp_path / "files"
        self.folder.mkdir()
        (self.folder / "model.onnx").write_bytes(b"x" * 10)
        self.budget = MemoryBudget((("cpu", budget),), changing=self._changing,
                                   usage=self._usage,
                                   pinned=self.pins.__contains__,
                                   ensembles_using=lambda name: [], evict=self._evict,
                                   meter=self.meter)

    def _changing(self, name: str) -> bool:
        """As control says: its lock is held, or a version is loading or unloading."""
        model = self.models.get(name)
        return model is not None and (model.lock.locked() or any(
            v.state in (State.LOADING, State.UNLOADING) for v in model.versions.values()))

    async def _usage(self) -> Usage:
        return dict(self.usage)

    async def _evict(self, name: str, reason: str) -> None:
        self.evicted.append((name, reason))
        self.models[name].versions[1] = VersionStatus(State.UNAVAILABLE, reason)
        self.budget.unloaded(name)

    async def load(self, name: str, declared: int | None = None, grows: int = 0,
                   last_used_ms: int = 0, busy: bool = False) -> None:
        async def load() -> None:
            self.meter.held += grows
            self.models[name] = ModelStatus({1: VersionStatus(State.READY)})
            self.usage[name, 1] = (last_used_ms, busy)

        await self.budget.load_within(name, config(declared), str(self.folder), load)


async def test_the_least_recently_used_idle_model_goes_first(tmp_path: Path) -> None:
    server = Server(tmp_path, budget=250)
    await server.load("old", 100)
    await server.load("new", 100)
    server.usage["old", 1], server.usage["new", 1] = (1, False), (2, False)
    server.budget._touched.clear()  # only the scheduler's figures count here

    await server.load("third", 100)

    assert server.evicted == [("old", "unloaded: evicted to make room for 'third' (cpu budget "
                                      "250 B)")]
    assert server.budget.used("cpu") == 200


async def test_busy_pinned_and_loading_models_stay_and_the_refusal_names_them(
        tmp_path: Path) -> None:
    server = Server(tmp_path, budget=250)
    await server.load("busy", 80, busy=True)
    await server.load("pinned", 80)
    server.pins.add("pinned")
    await server.load("loading", 80)
    await server.models["loading"].lock.acquire()

    with pytest.raises(Unavailable) as error:
        await server.load("more", 50)

    assert server.evicted == []
    assert error.value.message == (
        "cannot load 'more' within the cpu memory budget of 250 B (--model-memory-budget): it "
        "needs about 50 B, 10 B is free, and what holds the rest cannot be unloaded now: "
        "'busy' (80 B, in use), 'loading' (80 B, loading or unloading), 'pinned' (80 B, "
        "pinned)")


async def test_a_measured_footprint_is_the_growth_at_least_its_files(tmp_path: Path) -> None:
    server = Server(tmp_path, budget=10_000)
    await server.load("grows", grows=700)
    await server.load("small", grows=-5)  # the allocator reused freed memory

    footprints = {name: (f.held, f.measured) for name, f in server.budget.footprints.items()}
    assert footprints == {"grows": (700, True), "small": (10, True)}


async def test_a_load_larger_than_thought_unloads_more(tmp_path: Path) -> None:
    server = Server(tmp_path, budget=1000)
    await server.load("a", grows=400, last_used_ms=1)
    await server.load("b", grows=400, last_used_ms=2)
    server.budget._touched.clear()

    await server.load("c", grows=400)  # thought to need its 10 bytes of files

    assert [name for name, _ in server.evicted] == ["a"]
    assert server.budget.used("cpu") == 800


async def test_index_rows_get_their_share_and_last_use(tmp_path: Path) -> None:
    server = Server(tmp_path, budget=1000)
    await server.load("m", 300)
    server.budget._touched.clear()
    usage = {("m", 1): (5, False), ("m", 2): (7, False)}
    entries = (IndexEntry("m", "1", State.READY), IndexEntry("m", "2", State.READY),
               IndexEntry("m", "3", State.UNAVAILABLE, "unloaded"), IndexEntry("other"))

    annotated = server.budget.annotate(entries, usage)

    assert [(e.memory_bytes, e.last_used_ms) for e in annotated] == [(150, 5), (150, 7),
                                                                     (0, 0), (0, 0)]


async def test_declared_loads_run_side_by_side_and_a_loading_one_is_never_chosen(
        tmp_path: Path) -> None:
    server = Server(tmp_path, budget=250)
    release = anyio.Event()

    async def slow() -> None:
        await release.wait()
        server.models["slow"] = ModelStatus({1: VersionStatus(State.READY)})

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.budget.load_within, "slow", config(100), str(server.folder),
                         slow)
        await anyio.wait_all_tasks_blocked()
        await server.load("quick", 100, last_used_ms=5)  # while slow's load goes on

        await server.load("third", 100)  # slow, never used, is not the one to go

        assert [name for name, _ in server.evicted] == ["quick"]
        with pytest.raises(Unavailable, match="'slow' \\(100 B, loading or unloading\\)"):
            await server.load("fourth", 200)
        release.set()
    assert server.budget.used("cpu") == 200


async def test_a_failed_declared_load_gives_its_reservation_back(tmp_path: Path) -> None:
    server = Server(tmp_path, budget=250)

    async def failing() -> None:
        raise Unavailable("the executor went away")

    with pytest.raises(Unavailable):
        await server.budget.load_within("m", config(100), str(server.folder), failing)
    assert server.budget.used("cpu") == 0
