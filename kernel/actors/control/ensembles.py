"""Control's part in ensembles (SPEC 4.2): an object the control actor owns and calls.

Owns what loading, serving and unloading mean for an ensemble: its graph is checked against
the models known (in the repository or loaded) and cycles through nested ensembles are
refused; in EXPLICIT mode its composing models are loaded first (recursively), and
``unload_dependents`` takes down again those no user asked for and no other ensemble uses
(Triton's cascading removal); an ensemble version is served by the scheduler without any
executor; its state follows its composing models (READY only while each has a READY
version, else UNAVAILABLE with a reason naming the one missing), refreshed whenever a
model's versions change. The bookkeeping itself is
``inferd.kernel.actors.control.ensemble_dependencies`` (pure). What it needs of the control actor is
passed in: the models' status (read, and the ensembles' own versions written), the state log, and
how to load and unload one model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.control.ensemble_dependencies import EnsembleDependencies, Requirement
from inferd.kernel.actors.control.lifecycle_log import ModelStateLog
from inferd.kernel.actors.control.model_status import ModelStatus, State, VersionStatus
from inferd.kernel.actors.scheduler.ensembles.planning import EnsemblePlan
from inferd.kernel.modelconfig.ensemble_graph import validate_ensemble
from inferd.kernel.runtime.addresses import REPOSITORY, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError, InvalidArgument
from inferd.protocols.messages import ListModels, ModelList, ResolvedModel, ServeVersion

LoadModel = Callable[[str, str], Awaitable[None]]
"""``load(name, cause)``: load one model as a load request would (raising its error)."""
UnloadModel = Callable[[str, str], Awaitable[None]]
"""``unload(name, cause)``: unload one model; it is no longer one the server must serve."""


class EnsembleLifecycle:
    """The ensemble side of loading and unloading, for one control actor. ``models`` is the
    actor's own map of model status (this object writes the versions of ensembles only);
    ``explicit``: whether the control mode is EXPLICIT (only then are composing models
    loaded on an ensemble's behalf)."""

    def __init__(
        self, router: Router, models: Mapping[str, ModelStatus], states: ModelStateLog,
        *, explicit: bool, load: LoadModel, unload: UnloadModel,
    ) -> None:
        self._router = router
        self._models = models
        self._states = states
        self._explicit = explicit
        self._load = load
        self._unload = unload
        self._dependencies = EnsembleDependencies()

    def mark_requested(self, *names: str) -> None:
        """``names`` were loaded on request (not only as some ensemble's composing model)."""
        self._dependencies.mark_requested(*names)

    def users(self, name: str) -> list[str]:
        """The ensembles loaded or loading that use ``name``, directly or through others."""
        return self._dependencies.dependents(name)

    def is_served(self, name: str, number: int) -> bool:
        """Whether the scheduler serves ``name`` version ``number`` as an ensemble."""
        served: bool = self._dependencies.is_served(name, number)
        return served

    # ------------------------------------------------------------------ loading

    async def prepare(
        self, name: str, model: ModelStatus, resolved: ResolvedModel
    ) -> None:
        """Before an ensemble's versions load: check its graph, refuse a cycle, and make its
        composing models READY (EXPLICIT mode loads them; the other modes load every model
        themselves, so this only waits for loads under way). A failure is the load's error."""
        if resolved.backend:
            return
        config = ModelConfig.FromString(resolved.config)
        try:
            plan = EnsemblePlan.from_config(config)
            known = await self._known_models()
            validate_ensemble(config, known.__contains__)
            needed = [Requirement(step.model, step.version) for step in plan.steps]
            previous = self._dependencies.begin_load(name, needed)
            try:
                await self._make_composing_ready(name, plan.composing_models())
                if self._explicit:
                    self._check_composing_ready(name)
            except BaseException:
                self._dependencies.abandon_load(name, previous)
                raise
        except InferdError as error:
            model.error, model.error_version = error.message, None
            raise

    async def _known_models(self) -> set[str]:
        listing = await self._router.ask(REPOSITORY, ListModels())
        assert isinstance(listing, ModelList)
        return set(listing.names) | {name for name, m in self._models.items() if m.versions}

    async def _make_composing_ready(self, ensemble: str, composing: tuple[str, ...]) -> None:
        failures: dict[str, str] = {}

        async def make_ready(name: str) -> None:
            try:
                await self._make_ready(ensemble, name)
            except InferdError as error:
                failures[name] = error.message

        async with anyio.create_task_group() as tasks:
            for name in composing:
                tasks.start_soon(make_ready, name)
        if failures:
            name, cause = min(failures.items())
            raise InvalidArgument(
                f"ensemble '{ensemble}': composing model '{name}' failed to load: {cause}"
            )

    async def _make_ready(self, ensemble: str, name: str) -> None:
        model = self._models.get(name)
        if model is not None and model.lock.locked():
            async with model.lock:  # a load or unload of it is under way: see how it ends
                pass
        model = self._models.get(name)
        if model is not None and model.ready():
            return
        if not self._explicit:
            return  # it loads (or failed) on its own; the ensemble follows its state
        await self._load(name, f"a composing model of ensemble '{ensemble}'")

    def _check_composing_ready(self, ensemble: str) -> None:
        """After EXPLICIT mode loaded the composing models: a step naming a version that is
        not READY (not under its model's version policy, say) fails the load."""
        _, reason = self._ensemble_state(ensemble)
        if reason:
            raise InvalidArgument(f"ensemble '{ensemble}': {reason}")

    async def serve_version(
        self, name: str, model: ModelStatus, number: int, resolved: ResolvedModel
    ) -> None:
        """An ensemble version has nothing to load: the scheduler serves it as soon as it
        knows its config (a reload swaps the config while the old one keeps serving)."""
        previous = model.versions.get(number)
        if previous is None or previous.state != State.READY:
            model.versions[number] = VersionStatus(State.LOADING)
            self._states.changed(name, number, State.LOADING, model.cause)
        try:
            await self._router.ask(SCHEDULER, ServeVersion(name, number, resolved.config, (),
                                                          resolved.path))
        except InferdError as error:
            model.versions[number] = previous or VersionStatus(State.UNAVAILABLE, error.message)
            self._states.changed(name, number, model.versions[number].state, error.message,
                                 failed=True)
            self._dependencies.abandon_load(name, None)
            raise
        self._dependencies.serve(name, number)
        state, reason = self._ensemble_state(name)
        model.versions[number] = VersionStatus(state, reason)
        self._states.changed(name, number, state, reason)
        self.refresh_dependents(name)

    # ------------------------------------------------------------------ states

    def _ensemble_state(self, ensemble: str) -> tuple[str, str]:
        """(state, reason) of a served ensemble version: READY while every composing model
        has a READY version (the step's version, when it names one)."""
        missing = self._dependencies.blocker(ensemble, self._is_ready)
        if missing is None:
            return State.READY, ""
        which = f"composing model '{missing.model}'"
        if missing.version >= 0:
            which += f" version {missing.version}"
        return State.UNAVAILABLE, f"{which} is not ready: {self._why_not_ready(missing)}"

    def _is_ready(self, name: str, version: int) -> bool:
        model = self._models.get(name)
        if model is None:
            return False
        if version < 0:
            return model.ready()
        found = model.versions.get(version)
        return found is not None and found.state == State.READY

    def _why_not_ready(self, missing: Requirement) -> str:
        model = self._models.get(missing.model)
        if model is None:
            return "not loaded"
        versions = model.versions
        if missing.version >= 0:
            chosen = [versions[missing.version]] if missing.version in versions else []
        else:
            chosen = [versions[number] for number in sorted(versions, reverse=True)]
        if chosen:
            return chosen[0].reason or chosen[0].state.lower()
        return model.error or "not loaded"

    def refresh_dependents(self, *names: str) -> None:
        """``names`` changed state: bring the state of every ensemble using them (nested
        ones first) in line. Versions being loaded or unloaded are left alone."""
        for ensemble in self._dependencies.dependents(*names):
            model = self._models.get(ensemble)
            if model is None:
                continue
            state, reason = self._ensemble_state(ensemble)
            for number in self._dependencies.served_versions(ensemble):
                version = model.versions.get(number)
                if version is not None and version.state in (State.READY, State.UNAVAILABLE):
                    if version.state != state:
                        self._states.changed(ensemble, number, state, reason)
                    version.state, version.reason = state, reason

    def version_unloaded(self, name: str, number: int) -> None:
        """Hook: a version of ``name`` was unloaded (the scheduler no longer serves it)."""
        self._dependencies.retire(name, number)
        self.refresh_dependents(name)

    # ------------------------------------------------------------------ unload API

    async def unload_with_dependents(self, name: str, unload_dependents: bool) -> list[str]:
        """Unload ``name``; with ``unload_dependents``, then also the composing models its
        load brought in that no other loaded ensemble uses (nested ensembles first). The
        names unloaded, ``name`` first."""
        candidates = self._dependencies.unload_candidates(name) if unload_dependents else []
        self._dependencies.forget_model(name)
        await self._unload(name, "unload requested")
        for composing in candidates:
            self._dependencies.forget_model(composing)
            await self._unload(composing, f"unload_dependents of ensemble '{name}'")
        return [name, *candidates]
