"""Warm ensembles: an ensemble's ``model_warmup`` run through its whole pipeline (an inferd
extension: Triton refuses ``model_warmup`` on an ensemble, so the first requests after a
load, a reload or an eviction pay every composing model's cold start).

Owns when the samples run and what waits for them. A sample is made as a model's is
(``inferd.kernel.actors.executor.warmup``: its inputs from zeros, random bytes or a file of the
ensemble's ``warmup/`` folder): ``batch_size`` requests sent together, ``count`` times, each
through every step as a client's request goes (the composing models' queues, batching and
instances, the in-flight limits), so the composing models count them as executions. They run

- before a new ensemble version, or a new config of one, is served: a failing sample fails its
  load with Triton's "failed to run warmup sample" message. When a composing model has no
  version served yet (NONE and POLL modes start an ensemble before its composing models) it
  is served cold, and warmed when the last of them arrives;
- again whenever a model one of its steps uses (directly or through a nested ensemble) is
  served anew: reloaded, a new version, brought back after an unload or an eviction (models on
  demand). The ensemble keeps serving, but new requests to it wait at its gate until the
  samples have run, and the composing model's load is answered only then. A failure is logged
  and the ensemble serves as before (the requests then get the same error).

Requests already inside the ensemble are not held back. The scheduler calls ``before_serving``
and ``hold_users``/``rewarm`` from its ``ServeVersion`` handler; the runner does the running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor.warmup import WarmupSample, warmup_samples
from inferd.kernel.actors.scheduler.ensembles.running import EnsembleRunner
from inferd.kernel.actors.scheduler.ensembles.served import EnsembleState, ensemble_state
from inferd.kernel.actors.scheduler.progress import Progress
from inferd.kernel.actors.scheduler.version import Version
from inferd.kernel.observability.statistics import VersionStatistics
from inferd.protocols.errors import InferdError, InvalidArgument

log = logging.getLogger(__name__)


class EnsembleWarmUps:
    """``runner`` runs the requests; ``served()`` lists the ensemble versions taking
    requests; ``progress`` is the scheduler's (a version made to warm up needs one)."""

    def __init__(self, runner: EnsembleRunner[Version], served: Callable[[], Iterable[Version]],
                 progress: Progress) -> None:
        self._runner = runner
        self._served = served
        self._progress = progress
        # One re-warm-up of an ensemble version at a time: two reloads never interleave theirs.
        self._rewarming: dict[tuple[str, int], asyncio.Lock] = {}

    async def before_serving(self, model: str, number: int, config: ModelConfig, path: str,
                             state: EnsembleState, current: Version | None) -> VersionStatistics:
        """Warm ``state`` (the ensemble ``model`` version ``number`` under ``config``)
        before it serves; ``current``: the copy serving now, if any. Returns the statistics
        holding the warm-up, for the version to keep (``current``'s own, else new ones)."""
        state.warmup = tuple(warmup_samples(config, number, Path(path)))
        statistics = current.statistics if current is not None else VersionStatistics()
        if current is not None and current.config == config and current.ensemble is not None \
                and current.ensemble.warm:
            state.warm = True  # served again as it is (its composing models came back): warm
            return statistics
        candidate = Version.of(model, number, config, [], self._progress)
        candidate.statistics, candidate.ensemble = statistics, state
        await self._warm(candidate)
        return statistics

    def hold_users(self, model: str) -> list[tuple[Version, EnsembleState]]:
        """The served ensembles with a warm-up that use ``model`` (nested ones before those
        that use them), their gates closed now: call as soon as ``model`` is served anew,
        before anything else runs, then ``rewarm`` them."""
        users = _users_of(model, [v for v in self._served() if v.ensemble is not None])
        held = [(version, ensemble_state(version)) for version in users
                if ensemble_state(version).warmup]
        for _, state in held:
            state.rewarms += 1
            if state.gate is None:
                state.gate = asyncio.Event()
        return held

    async def rewarm(self, held: list[tuple[Version, EnsembleState]]) -> None:
        """Run the warm-up of each ensemble ``hold_users`` returned, then open its gate (the
        gate of the state it held: a reload of the ensemble meanwhile swaps its state)."""
        try:
            for version, _ in held:
                lock = self._rewarming.setdefault((version.model, version.version),
                                                  asyncio.Lock())
                async with lock:
                    try:
                        await self._warm(version)
                    except InferdError as error:
                        ensemble_state(version).warm = False
                        log.warning("ensemble '%s' version %d could not be warmed up again: %s",
                                    version.model, version.version, error.message)
        finally:
            for _, state in held:
                state.rewarms -= 1
                if state.rewarms == 0 and state.gate is not None:
                    state.gate.set()
                    state.gate = None

    async def _warm(self, version: Version) -> None:
        """Run every sample through ``version``'s pipeline; raise Triton's warm-up failure
        (every failed request's error) for the first sample that fails."""
        state = ensemble_state(version)
        if not state.warmup:
            state.warm = True
            return
        if not self._runner.can_run(version):
            state.warm = False  # warmed when its last composing model is served
            return
        state.warm = False
        for sample in state.warmup:
            for _ in range(sample.count):
                errors = await self._run_together(version, sample)
                if errors:
                    raise InvalidArgument(
                        "Invalid argument: failed to run warmup sample "
                        f"'{sample.name}': " + "".join(f"{error}; " for error in errors))
        state.warm = True
        log.info("warmed up ensemble %s version %d with %d sample(s)", version.model,
                 version.version, len(state.warmup))

    async def _run_together(self, version: Version, sample: WarmupSample) -> list[str]:
        """The ``batch_size`` requests of ``sample`` at once (the composing models may batch
        them); the error of each that failed."""
        results = await asyncio.gather(
            *(self._runner.run_warmup(version, request) for request in sample.requests),
            return_exceptions=True)
        errors: list[str] = []
        for result in results:
            if isinstance(result, InferdError):
                errors.append(result.message)
            elif isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancelled: the load is abandoned
                errors.append(f"{type(result).__name__}: {result}")
        return errors


def _users_of(model: str, ensembles: list[Version]) -> list[Version]:
    """The ensembles among ``ensembles`` that use ``model`` directly or through others,
    each after the ensembles it uses."""
    users: list[Version] = []
    reached = {model}
    grew = True
    while grew:
        grew = False
        for version in ensembles:
            if version in users:
                continue
            if reached & set(ensemble_state(version).plan.composing_models()):
                users.append(version)
                reached.add(version.model)
                grew = True
    return users
