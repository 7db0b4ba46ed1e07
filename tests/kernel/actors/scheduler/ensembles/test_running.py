"""Ensemble execution against a fake scheduler: parallel branches, tensors handed on without
copies, versions fixed at the start, step failures, pruning, nesting, statistics, the warm-up
gate and warm-up requests, max_inflight_requests. No actors, no executors: composing models
are Python functions run on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.ensembles.running import EnsembleRunner
from inferd.kernel.actors.scheduler.ensembles.served import (
    STEPS_KEY,
    EnsembleState,
    statistics_dict,
)
from inferd.kernel.actors.scheduler.request_validation import ModelSignature
from inferd.kernel.actors.scheduler.response_cache import CacheScope
from inferd.kernel.observability.statistics import VersionStatistics
from inferd.protocols.errors import InferdError, InvalidArgument, NotFound
from inferd.protocols.messages import InferRequest, InferResponse, Tensor

pytestmark = pytest.mark.anyio

DIAMOND = """
name: "diamond"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "SIDE" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1
    input_map { key: "X" value: "IN" } output_map { key: "Y" value: "a" } },
  { model_name: "left" model_version: -1
    input_map { key: "X" value: "a" } output_map { key: "Y" value: "b" } },
  { model_name: "right" model_version: -1
    input_map { key: "X" value: "a" } output_map { key: "Y" value: "SIDE" } },
  { model_name: "post" model_version: -1
    input_map [ { key: "X" value: "b" }, { key: "Z" value: "SIDE" } ]
    output_map { key: "Y" value: "OUT" } }
] }
"""


@dataclass(eq=False)
class FakeVersion:
    model: str
    version: int
    signature: ModelSignature
    ensemble: EnsembleState | None = None
    pinned: int = 0
    statistics: VersionStatistics = field(default_factory=VersionStatistics)
    decoupled: bool = False
    cache: CacheScope | None = None
    sequences: object = None


@dataclass(eq=False)
class FakeQueued:
    result: InferResponse | InferdError | None
    enqueued_ns: int
    started_ns: int
    compute_ns: tuple[int, int, int] = (10, 100, 1)


Behaviour = Callable[[InferRequest], Awaitable[dict[str, np.ndarray]]]


class FakeScheduler:
    """Serves named versions; a composing model is an async function of its request."""

    def __init__(self) -> None:
        self.versions: dict[str, FakeVersion] = {}
        self.behaviour: dict[str, Behaviour] = {}
        self.calls: list[tuple[str, int, InferRequest]] = []
        self.runner = EnsembleRunner(self.resolve, self.infer)

    def add_ensemble(self, text: str, version: int = 1) -> FakeVersion:
        config = text_format.Parse(text, ModelConfig())
        served = FakeVersion(config.name, version, ModelSignature.from_config(config),
                             EnsembleState.for_config(config, None))
        self.versions[config.name] = served
        return served

    def add_model(self, name: str, behaviour: Behaviour, version: int = 1) -> FakeVersion:
        served = FakeVersion(name, version, ModelSignature(name, 0, {}, {}))
        self.versions[name] = served
        self.behaviour[name] = behaviour
        return served

    def resolve(self, model: str, version: str) -> FakeVersion:
        if model not in self.versions:
            raise NotFound(f"Request for unknown model: '{model}' has no available versions")
        return self.versions[model]

    async def infer(
        self, version: FakeVersion, request: InferRequest, arrived_ns: int
    ) -> FakeQueued:
        self.calls.append((version.model, version.version, request))
        outputs = await self.behaviour[version.model](request)
        response = InferResponse(version.model, str(version.version), tuple(
            Tensor(name, "FP32", array.shape, array) for name, array in outputs.items()
        ))
        return FakeQueued(response, arrived_ns, arrived_ns + 5)

    async def run(
        self, model: str, outputs: tuple[str, ...] = (), value: float = 1.0
    ) -> InferResponse:
        data = np.full(4, value, dtype=np.float32)
        request = InferRequest(model, (Tensor("IN", "FP32", (4,), data),), outputs=outputs)
        return await self.runner.infer(self.versions[model], request, 0)


def add(amount: float) -> Behaviour:
    async def behaviour(request: InferRequest) -> dict[str, np.ndarray]:
        return {"Y": np.sum([t.data for t in request.inputs], axis=0) + amount}

    return behaviour


def passthrough() -> Behaviour:
    async def behaviour(request: InferRequest) -> dict[str, np.ndarray]:
        return {"Y": request.inputs[0].data}

    return behaviour


@pytest.fixture
def scheduler() -> FakeScheduler:
    fake = FakeScheduler()
    fake.add_ensemble(DIAMOND)
    fake.add_model("pre", add(1))
    fake.add_model("left", add(10))
    fake.add_model("right", add(100))
    fake.add_model("post", add(0))
    return fake


async def test_the_diamond_computes_its_outputs(scheduler: FakeScheduler) -> None:
    response = await scheduler.run("diamond")
    outputs = {t.name: t.data.tolist() for t in response.outputs}
    # a = 2; b = 12; SIDE = 102; OUT = b + SIDE = 114
    assert outputs == {"OUT": [114.0] * 4, "SIDE": [102.0] * 4}
    assert (response.model, response.version) == ("diamond", "1")
    step_requests = {model: request for model, _, request in scheduler.calls}
    assert [t.name for t in step_requests["post"].inputs] == ["X", "Z"]
    assert step_requests["left"].outputs == ("Y",)
    assert step_requests["left"].version == "1"


async def test_parallel_branches_run_at_the_same_time(scheduler: FakeScheduler) -> None:
    right_started = anyio.Event()

    async def left(request: InferRequest) -> dict[str, np.ndarray]:
        with anyio.fail_after(5):  # only finishes if right runs meanwhile
            await right_started.wait()
        return {"Y": request.inputs[0].data}

    async def right(request: InferRequest) -> dict[str, np.ndarray]:
        right_started.set()
        return {"Y": request.inputs[0].data}

    scheduler.behaviour["left"], scheduler.behaviour["right"] = left, right
    await scheduler.run("diamond")


async def test_intermediate_tensors_are_the_same_arrays(scheduler: FakeScheduler) -> None:
    produced: list[np.ndarray] = []

    async def pre(request: InferRequest) -> dict[str, np.ndarray]:
        produced.append(request.inputs[0].data + 1)
        return {"Y": produced[-1]}

    scheduler.behaviour["pre"] = pre
    scheduler.behaviour["right"] = passthrough()
    response = await scheduler.run("diamond")
    seen = {model: request.inputs[0].data for model, _, request in scheduler.calls}
    assert seen["left"] is produced[0] and seen["right"] is produced[0]
    side = next(t for t in response.outputs if t.name == "SIDE")
    assert side.data is produced[0]


async def test_only_the_steps_for_the_requested_outputs_run(scheduler: FakeScheduler) -> None:
    response = await scheduler.run("diamond", outputs=("SIDE",))
    assert [t.name for t in response.outputs] == ["SIDE"]
    assert sorted(model for model, _, _ in scheduler.calls) == ["pre", "right"]


async def test_a_failing_step_fails_the_request_naming_it(scheduler: FakeScheduler) -> None:
    async def broken(request: InferRequest) -> dict[str, np.ndarray]:
        raise InvalidArgument("bad things")

    scheduler.behaviour["left"] = broken
    with pytest.raises(InvalidArgument) as error:
        await scheduler.run("diamond")
    assert error.value.message == "in ensemble 'diamond', step 'left' failed: bad things"
    assert "post" not in [model for model, _, _ in scheduler.calls]
    assert all(v.pinned == 0 for v in scheduler.versions.values())
    printed = statistics_dict(scheduler.versions["diamond"])
    assert printed["inference_stats"]["fail"]["count"] == 1
    left = next(s for s in printed[STEPS_KEY] if s["model"] == "left")
    assert (left["success"]["count"], left["fail"]["count"]) == (0, 1)


async def test_a_missing_composing_model_fails_before_any_step(scheduler: FakeScheduler) -> None:
    del scheduler.versions["right"]
    # Named after the ensemble, as Triton answers.
    with pytest.raises(NotFound, match="^Request for unknown model: 'diamond' has no available"):
        await scheduler.run("diamond")
    assert scheduler.calls == []
    assert all(v.pinned == 0 for v in scheduler.versions.values())
    with pytest.raises(NotFound):
        scheduler.runner.check_ready(scheduler.versions["diamond"])


async def test_versions_are_fixed_and_pinned_when_the_request_starts(
    scheduler: FakeScheduler,
) -> None:
    pre_running, release = anyio.Event(), anyio.Event()
    old_post = scheduler.versions["post"]
    pins: list[int] = []

    async def pre(request: InferRequest) -> dict[str, np.ndarray]:
        pins.append(old_post.pinned)
        pre_running.set()
        await release.wait()
        return {"Y": request.inputs[0].data}

    scheduler.behaviour["pre"] = pre
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(scheduler.run, "diamond")
        with anyio.fail_after(5):
            await pre_running.wait()
        scheduler.add_model("post", add(0), version=2)  # a new version arrives meanwhile
        release.set()
    assert pins == [1]
    assert old_post.pinned == 0
    assert ("post", 1) in [(model, version) for model, version, _ in scheduler.calls]
    assert ("post", 2) not in [(model, version) for model, version, _ in scheduler.calls]


async def test_statistics_count_the_ensemble_and_each_step(scheduler: FakeScheduler) -> None:
    for _ in range(3):
        await scheduler.run("diamond")
    printed = statistics_dict(scheduler.versions["diamond"])
    assert (printed["inference_count"], printed["execution_count"]) == (3, 3)
    assert printed["inference_stats"]["success"]["count"] == 3
    assert printed["inference_stats"]["queue"]["ns"] == 3 * 4 * 5  # four steps, 5 ns each
    assert printed["inference_stats"]["compute_infer"]["ns"] == 3 * 4 * 100
    steps = printed[STEPS_KEY]
    assert [(s["step"], s["model"], s["version"]) for s in steps] == [
        (0, "pre", "1"), (1, "left", "1"), (2, "right", "1"), (3, "post", "1")
    ]
    assert all(s["success"]["count"] == 3 and s["compute_infer"]["ns"] == 300 for s in steps)
    assert STEPS_KEY not in statistics_dict(scheduler.versions["pre"])


async def test_a_nested_ensemble_runs_inside_the_outer_one(scheduler: FakeScheduler) -> None:
    scheduler.add_ensemble("""
        name: "outer"
        platform: "ensemble"
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "FINAL" data_type: TYPE_FP32 dims: [ 4 ] } ]
        ensemble_scheduling { step [
          { model_name: "diamond" input_map { key: "IN" value: "IN" }
            output_map { key: "OUT" value: "mid" } },
          { model_name: "pre" input_map { key: "X" value: "mid" }
            output_map { key: "Y" value: "FINAL" } } ] }
    """)
    response = await scheduler.run("outer")
    assert response.outputs[0].data.tolist() == [115.0] * 4
    assert statistics_dict(scheduler.versions["diamond"])["inference_count"] == 1
    assert all(v.pinned == 0 for v in scheduler.versions.values())


async def test_a_request_waits_at_a_closed_warm_up_gate_until_it_opens(
        scheduler: FakeScheduler) -> None:
    state = scheduler.versions["diamond"].ensemble
    assert state is not None
    state.gate = asyncio.Event()
    answered: list[InferResponse] = []

    async def client() -> None:
        answered.append(await scheduler.run("diamond"))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client)
        await anyio.wait_all_tasks_blocked()
        assert (scheduler.calls, answered) == ([], [])
        state.gate.set()
    assert len(answered) == 1 and len(scheduler.calls) == 4


async def test_max_inflight_requests_lets_n_requests_at_a_step_and_no_more(
        scheduler: FakeScheduler) -> None:
    limited = scheduler.add_ensemble(DIAMOND.replace(
        "ensemble_scheduling {", "ensemble_scheduling { max_inflight_requests: 2"))
    assert limited.ensemble is not None and len(limited.ensemble.limiters) == 4
    release, inside, most = anyio.Event(), [0], [0]

    async def held(request: InferRequest) -> dict[str, np.ndarray]:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        await release.wait()
        inside[0] -= 1
        return {"Y": request.inputs[0].data}

    scheduler.behaviour["pre"] = held
    async with anyio.create_task_group() as tasks:
        for _ in range(5):
            tasks.start_soon(scheduler.run, "diamond")
        await anyio.wait_all_tasks_blocked()
        pre = limited.ensemble.limiters[0]
        assert (inside[0], pre.in_flight, pre.waiting) == (2, 2, 3)
        release.set()
    assert most[0] == 2 and len(scheduler.calls) == 20
    assert [(s.in_flight, s.waiting) for s in limited.ensemble.limiters] == [(0, 0)] * 4


async def test_a_failing_step_gives_its_slot_back(scheduler: FakeScheduler) -> None:
    limited = scheduler.add_ensemble(DIAMOND.replace(
        "ensemble_scheduling {", "ensemble_scheduling { max_inflight_requests: 1"))

    async def refuse(request: InferRequest) -> dict[str, np.ndarray]:
        raise InvalidArgument("Exceeds maximum queue size")

    scheduler.behaviour["pre"] = refuse
    for _ in range(2):  # a slot kept by the first would hold the second forever
        with pytest.raises(InferdError, match="step 'pre' failed: Exceeds maximum queue size"):
            await scheduler.run("diamond")
    assert limited.ensemble is not None and limited.ensemble.limiters[0].in_flight == 0


async def test_a_warm_up_request_runs_every_step_past_the_gate(scheduler: FakeScheduler
                                                               ) -> None:
    version = scheduler.versions["diamond"]
    assert version.ensemble is not None and scheduler.runner.can_run(version)
    version.ensemble.gate = asyncio.Event()  # closed: the warm-up itself goes through
    data = np.zeros(4, dtype=np.float32)

    await scheduler.runner.run_warmup(version, InferRequest(
        "diamond", (Tensor("IN", "FP32", (4,), data),)))

    assert sorted(model for model, _, _ in scheduler.calls) == ["left", "post", "pre", "right"]
    del scheduler.versions["right"]
    assert not scheduler.runner.can_run(version)
