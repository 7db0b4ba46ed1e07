"""What the scheduler keeps of a served ensemble version, and what the runner needs of it.

Owns ``EnsembleState`` (a served ensemble version's plan, and the statistics of its steps per
step, composing model and version), the protocols through which
``inferd.kernel.actors.scheduler.ensembles.running`` sees the scheduler's served versions and
answered requests, and how a version's statistics print with the per-step breakdown. No I/O and no
request handling.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor.warmup import WarmupSample
from inferd.kernel.actors.scheduler.ensembles.inflight import StepLimiter, limiters_for
from inferd.kernel.actors.scheduler.ensembles.planning import EnsemblePlan, EnsembleStep
from inferd.kernel.actors.scheduler.request_validation import ModelSignature
from inferd.kernel.actors.scheduler.response_cache import CacheScope
from inferd.kernel.modelconfig.validation import ENSEMBLE_PLATFORM
from inferd.kernel.observability.statistics import RequestDurations, VersionStatistics
from inferd.protocols.errors import InferdError, Internal
from inferd.protocols.messages import InferResponse

STEPS_KEY = "ensemble_steps"
"""The key of the per-step breakdown in an ensemble's statistics (an inferd extension:
tritonclient's gRPC conversion drops it, JSON readers ignore it)."""


@dataclass(eq=False, slots=True)
class EnsembleState:
    """What the scheduler keeps for a served ensemble version: its plan, and statistics per
    (step index, composing model, version); a reload gets a new state sharing the counters,
    while requests in flight finish with the plan they started with. A step's ``success``
    and ``fail`` hold its whole time as the ensemble saw it (queue, compute and transfers);
    its ``queue`` and ``compute_*`` what the composing model reported for it. ``limiters``:
    one per step under ``max_inflight_requests`` (``inflight``), shared by the requests to
    this state. The rest is its warm-up (``model_warmup``, ``warming``): its samples, whether
    they last ran through the composing models now served, and while they run again the gate
    new requests wait at."""

    plan: EnsemblePlan
    steps: dict[tuple[int, str, int], RequestDurations] = field(default_factory=dict)
    limiters: tuple[StepLimiter, ...] = ()
    warmup: tuple[WarmupSample, ...] = ()
    warm: bool = False
    gate: asyncio.Event | None = None
    rewarms: int = 0  # warm-ups under way or waiting to run, behind the gate

    @classmethod
    def for_config(
        cls, config: ModelConfig, previous: EnsembleState | None
    ) -> EnsembleState | None:
        """The state of a served version with ``config`` (None unless it is an ensemble),
        counting on from ``previous``. ``InvalidArgument`` for a graph that cannot run."""
        if config.platform != ENSEMBLE_PLATFORM:
            return None
        plan = EnsemblePlan.from_config(config)
        limiters = limiters_for(config.ensemble_scheduling.max_inflight_requests, config.name,
                                len(plan.steps))
        return cls(plan, previous.steps if previous else {}, limiters)

    def step_statistics(self, step: EnsembleStep, version: int) -> RequestDurations:
        key = (step.index, step.model, version)
        found = self.steps.get(key)
        if found is None:
            found = self.steps[key] = RequestDurations()
        return found

    def as_dicts(self) -> list[dict[str, Any]]:
        return [
            {"step": index, "model": model, "version": str(version),
             **stats.durations_as_dict()}
            for (index, model, version), stats in sorted(self.steps.items())
        ]


class ServedVersion(Protocol):
    """What the runner needs of the scheduler's record of a served version."""

    model: str
    version: int
    pinned: int  # requests that fixed this version and still need it
    signature: ModelSignature
    statistics: VersionStatistics
    ensemble: EnsembleState | None
    decoupled: bool
    cache: CacheScope | None  # its response cache, when its responses are cached

    @property
    def sequences(self) -> object:  # a sequence model's batcher, else None
        ...


class QueuedRequest(Protocol):
    """What the scheduler's request path returns for a request it answered."""

    result: InferResponse | InferdError | None
    enqueued_ns: int
    started_ns: int
    compute_ns: tuple[int, int, int]


def statistics_dict(version: ServedVersion) -> dict[str, Any]:
    """A version's statistics as Triton prints them, plus the per-step breakdown of an
    ensemble under ``STEPS_KEY``."""
    printed = version.statistics.as_dict(version.model, str(version.version))
    if version.ensemble is not None:
        printed[STEPS_KEY] = version.ensemble.as_dicts()
    return printed


def ensemble_state(version: ServedVersion) -> EnsembleState:
    """The ensemble state of ``version`` (``Internal`` if it is not an ensemble)."""
    if version.ensemble is None:
        raise Internal(f"model '{version.model}' is not an ensemble")
    return version.ensemble
