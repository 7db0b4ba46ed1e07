"""The control actor: the model lifecycle, the control modes, and the repository API.

It owns the state of every (model, version) (``inferd.kernel.actors.control.model_status``) and
decides what is loaded: the start-up set of the mode (``startup``: NONE, everything; EXPLICIT,
``--load-model``), and the load/unload/index calls of the repository API. As in Triton a load
is whole or nothing: it resolves the config through the repository actor, brings every selected
version up (``versions``: kept when the load changes nothing it depends on, else a new copy
beside the one serving), and serves them only once all are up; if one fails the copies go
again, so what served stays READY. Loads of one model are serialized; loads of different models
run side by side, none on the inference path. The parts it owns and calls, each given what it
needs: ``ModelLoader`` (``loading``: one load, whole or nothing), ``EnsembleLifecycle``
(``inferd.kernel.actors.control.ensembles``), ``RepositoryPoller`` (POLL mode),
``ExecutorRecovery`` (a lost executor), ``VersionUnloader`` (``unload``: an unload request is
answered once the model takes no new request) and ``VersionLabelBook`` (``labels``: inferd's
version labels and their managed switch); ``views`` words its state for the index, the catalog
and metrics. A load or unload naming ``versions`` (inferd's) touches only those
(``single_versions``). The optional policies plugins add (models on demand and the memory
budget, the control-state record; ``inferd_register_control_policies``) are called through one
``Policies`` (``policies``).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import anyio

from inferd.kernel.actors.control.ensembles import EnsembleLifecycle
from inferd.kernel.actors.control.file_overrides import remove_override_folder
from inferd.kernel.actors.control.labels import VersionLabelBook
from inferd.kernel.actors.control.lifecycle_log import ModelStateLog
from inferd.kernel.actors.control.loading import ModelLoader
from inferd.kernel.actors.control.model_status import ModelStatus
from inferd.kernel.actors.control.policies import ActorHandle, Policies
from inferd.kernel.actors.control.poll import RepositoryPoller
from inferd.kernel.actors.control.recovery import ExecutorRecovery
from inferd.kernel.actors.control.single_versions import check_unload_versions
from inferd.kernel.actors.control.startup import server_ready, startup_names
from inferd.kernel.actors.control.unload import VersionUnloader, answer_when_retired
from inferd.kernel.actors.control.versions import VersionLoader
from inferd.kernel.actors.control.views import (
    index_entries,
    load_durations,
    load_failure,
    with_state,
)
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import CONTROL, REPOSITORY
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.control import OpenedPolicy
from inferd.kernel.settings import Settings
from inferd.protocols.errors import InferdError, Unavailable
from inferd.protocols.messages import (
    Ack,
    Catalog,
    CatalogRequest,
    Catalogs,
    DescribeModels,
    Envelope,
    ExecutorHello,
    ExecutorLost,
    HealthRequest,
    HealthStatus,
    Index,
    IndexRequest,
    LabelsRequest,
    ListModels,
    LoadOnDemand,
    LoadRequest,
    LoadStartupModels,
    Metrics,
    MetricsRequest,
    ModelList,
    PollRequest,
    ReadCatalogs,
    Shutdown,
    StartupReport,
    UnloadRequest,
    VersionLabelsReply,
)
from inferd.protocols.names import check_model_name

log = logging.getLogger(__name__)

NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"


class ControlActor(Actor):
    address = CONTROL

    def __init__(
        self, router: Router, settings: Settings, override_root: str | Path,
        policies: list[OpenedPolicy] | None = None,
    ) -> None:
        super().__init__(router)
        self._settings = settings
        self._models: dict[str, ModelStatus] = {}
        self._required: set[str] = set()  # what strict readiness waits for
        self._started = False
        self._states = ModelStateLog()  # one log line per state change
        self._pins = set(settings.load_models)  # --load-model ('*': every start-up model)
        # The optional policies plugins add (models on demand, the memory budget, ...).
        handle = ActorHandle(
            router, self._models, pins=self._pins,
            ensembles_using=lambda name: self._ensembles.users(name),
            load=self._load_for_policy, evict=self._evict, note_failure=self._note_failure,
            apply_load=self._apply_load, apply_unload=self._apply_unload, spawn=self.spawn)
        self._policy = Policies([opened.control(handle) for opened in policies or ()])
        self._ensembles = EnsembleLifecycle(
            router, self._models, self._states,
            # On demand, an ensemble brings its composing models in POLL mode too.
            explicit=settings.model_control_mode == "explicit" or self._policy.loads_on_request,
            load=lambda name, cause: self._budgeted_load(name, cause=cause),
            unload=self._unload_no_longer_required,
        )
        self._unloader = VersionUnloader(router, self._states,
                                         is_served=self._ensembles.is_served,
                                         version_unloaded=self._ensembles.version_unloaded)
        self._versions = VersionLoader(router, settings, self._states,
                                       refresh_dependents=self._ensembles.refresh_dependents)
        # Version labels (inferd's): which version a request naming none goes to.
        self._labels = VersionLabelBook(router, self._models, load_versions=self._load_versions,
                                        unload_version=self._unload_one_version)
        self._loader = ModelLoader(
            router, self._models, self._states, versions=self._versions,
            ensembles=self._ensembles, labels=self._labels, unloader=self._unloader,
            override_root=override_root)
        self._poller = RepositoryPoller(router, settings.repository_poll_secs,
                                        load=self._poll_load, unload=self._poll_unload)
        self._recovery = ExecutorRecovery(
            router, self._models, self._states, reload=self._reload_orphan,
            refresh_dependents=self._ensembles.refresh_dependents, spawn=self.spawn,
        )

    # ------------------------------------------------------------------ start-up

    async def on_load_startup_models(
        self, message: LoadStartupModels, envelope: Envelope
    ) -> StartupReport:
        mode = self._settings.model_control_mode
        names = await startup_names(self.router, self._settings, self._policy.loads_on_request)
        if mode == "poll":
            await self._poller.begin()
        failures: dict[str, str] = {}

        async def load(name: str) -> None:
            try:
                await self._budgeted_load(name, cause="start-up")
            except InferdError as error:
                failures[name] = error.message

        self._required.update(names)
        self._ensembles.mark_requested(*names)
        if "*" in self._pins:
            self._pins.update(names)
        async with anyio.create_task_group() as tasks:
            for name in names:
                tasks.start_soon(load, name)
        await self._policy.started({name for name in names if name not in failures})
        self._started = True
        if mode == "poll":
            self.spawn(self._poller.poll_forever)
        return StartupReport(failures)

    # ------------------------------------------------------------------ repository API

    async def on_load_request(self, request: LoadRequest, envelope: Envelope) -> Ack:
        if self._settings.model_control_mode != "explicit":
            raise Unavailable(NOT_EXPLICIT)
        async def load() -> None:
            try:
                await self._budgeted_load(request.model, request.config, request.files,
                                          only=request.versions)
            except InferdError as error:
                raise load_failure(request.model, error) from None
            self._policy.load_requested(request.model)
            self._ensembles.mark_requested(request.model)
            self._required.add(request.model)

        await self._policy.around_client_load(request.model, request.config, request.files,
                                              request.versions, load)
        return Ack()

    async def on_unload_request(self, request: UnloadRequest, envelope: Envelope) -> Ack:
        """As Triton's, the answer comes once the model takes no new request: at once when
        none is in flight (the unload is then done), else while its versions are UNLOADING,
        waiting for those requests in the background."""
        if self._settings.model_control_mode != "explicit":
            raise Unavailable(NOT_EXPLICIT)
        if request.versions:
            await self._unload_versions(request.model, request.versions)
            return Ack()
        self._required.discard(request.model)

        async def unload() -> list[str]:
            return await self._ensembles.unload_with_dependents(request.model,
                                                                request.unload_dependents)

        await answer_when_retired(
            lambda: self._policy.around_client_unload(request.model, unload),
            self._models.get(request.model), self.spawn)
        return Ack()

    async def on_labels_request(self, request: LabelsRequest, envelope: Envelope
                                ) -> VersionLabelsReply:
        """Read or move a model's version labels (inferd's; ``labels``), in every mode."""
        return await self._labels.change(request)

    async def on_index_request(self, request: IndexRequest, envelope: Envelope) -> Index:
        listing = await self.router.ask(REPOSITORY, ListModels())
        assert isinstance(listing, ModelList)
        catalogs = await self.router.ask(REPOSITORY, ReadCatalogs())
        assert isinstance(catalogs, Catalogs)
        entries = index_entries(listing, self._models, catalogs.metadata,
                                ready_only=request.ready_only)
        return Index(await self._policy.annotate(entries))

    async def on_catalog_request(self, request: CatalogRequest, envelope: Envelope) -> Catalog:
        """The repository's descriptions, with each model's state; a READY model's inputs and
        outputs are those of the config its newest READY version is served with."""
        described = await self.router.ask(REPOSITORY, DescribeModels(request.labels,
                                                                      request.task))
        assert isinstance(described, Catalog)
        return Catalog(tuple(with_state(entry, self._models.get(entry.name))
                             for entry in described.entries))

    async def on_health_request(self, request: HealthRequest, envelope: Envelope) -> HealthStatus:
        if request.what == "live":
            return HealthStatus(True)
        if not self._started:
            return HealthStatus(False)
        return HealthStatus(await server_ready(self.router, self._models, self._required,
                                               strict=self._settings.strict_readiness))

    # ------------------------------------------------------------------ POLL mode

    async def on_poll_request(self, request: PollRequest, envelope: Envelope) -> Ack:
        """Poll now. The folders must still hold still, for a short settle interval instead
        of a whole poll period: the caller says it has finished copying."""
        if self._settings.model_control_mode != "poll":
            raise Unavailable("repository poll is only available with --model-control-mode=poll")
        await self._poller.poll_now()
        return Ack()

    async def _poll_load(self, name: str) -> None:
        model = self._models.get(name)
        if self._policy.loads_on_request and (model is None or not model.versions):
            return  # on demand: it loads on its first request, from the folder as it is then
        try:
            await self._budgeted_load(name, cause="poll: a new or changed model folder")
        except InferdError as error:
            log.error("poll: %s", error.message)
        else:
            self._required.add(name)

    async def _poll_unload(self, name: str, cause: str) -> None:
        self._required.discard(name)
        await self._unload(name, cause=cause)
        model = self._models.get(name)
        if model is not None and not model.ready() and model.lock.statistics().tasks_waiting == 0:
            del self._models[name]  # gone from the repository: gone from the index

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        samples = [*load_durations(self._models)]
        samples += self._policy.metrics()
        samples += self._unloader.reports.metrics()
        return Metrics(tuple(samples))

    # ------------------------------------------------------------------ policies

    async def on_load_on_demand(self, message: LoadOnDemand, envelope: Envelope) -> Ack:
        """A request named ``message.model``, which is not served: a policy (models on
        demand) loads it, or the request hears that none does."""
        if not await self._policy.requested(message.model):
            raise Unavailable("on-demand loading is off (--model-load-on-demand)")
        return Ack()

    async def _load_for_policy(self, name: str, cause: str) -> None:
        await self._budgeted_load(name, cause=cause)
        self._ensembles.mark_requested(name)

    async def _budgeted_load(
        self, name: str, config_override: str = "", files: dict[str, bytes] | None = None,
        *, cause: str = "load requested", only: tuple[int, ...] = (),
    ) -> None:
        """``_load``, within what the policies do around a load (the memory budget)."""
        await self._policy.around_load(name, config_override, functools.partial(
            self._loader.load, name, config_override, files, cause=cause, only=only))

    async def _evict(self, name: str, reason: str) -> None:
        self._required.discard(name)
        await self._unload(name, cause=reason, reason=reason)

    # ------------------------------------------------------------------ executors

    async def on_executor_lost(self, message: ExecutorLost, envelope: Envelope) -> None:
        self._recovery.executor_lost(message.name, message.reason)

    async def on_executor_hello(self, message: ExecutorHello, envelope: Envelope) -> None:
        self._recovery.executor_started(message.name)

    async def _reload_orphan(self, name: str) -> None:
        # What served keeps serving: a cached copy stands in for unreadable storage.
        await self._loader.load(name, cause="its executor restarted", cached_ok=True)

    # ------------------------------------------------------------------ for the ensembles

    async def _unload_no_longer_required(self, name: str, cause: str) -> None:
        self._required.discard(name)
        await self._unload(name, cause=cause)

    # ------------------------------------------------------------------ for the record

    async def _apply_load(self, name: str, config: str, files: dict[str, bytes],
                           cause: str) -> None:
        await self._loader.load(name, config, files, cause=cause)
        self._ensembles.mark_requested(name)
        self._required.add(name)

    async def _apply_unload(self, name: str) -> None:
        self._required.discard(name)
        await self._ensembles.unload_with_dependents(name, True)
        model = self._models.get(name)
        if (model is not None and not model.versions and not model.lock.locked()
                and model.lock.statistics().tasks_waiting == 0):
            del self._models[name]  # it never loaded here: its error goes too

    def _note_failure(self, name: str, why: str) -> None:
        model = self._models.setdefault(name, ModelStatus())
        model.error, model.error_version = why, None

    # ------------------------------------------------------------------ unload

    async def _unload(self, name: str, *, cause: str = "unload requested",
                      reason: str = "unloaded") -> None:
        model = self._models.get(name)
        if model is None:
            return
        async with model.lock:
            await self._unloader.unload_all(name, model, cause, reason)
            remove_override_folder(model.override_dir)
            model.override_dir = ""
            if not model.ready():
                self._policy.unloaded(name)

    async def _load_versions(self, name: str, versions: tuple[int, ...], cause: str) -> None:
        await self._budgeted_load(name, cause=cause, only=versions)

    async def _unload_versions(self, name: str, versions: tuple[int, ...]) -> None:
        """An unload request for single versions: each checked before any unloads."""
        check_model_name(name)
        model = self._models.get(name)
        check_unload_versions(name, model, versions, self._labels.holder)
        assert model is not None
        async with model.lock:
            check_unload_versions(name, model, versions, self._labels.holder)
            for number in versions:
                await self._unloader.unload_version(name, model, number, reason="unloaded",
                                                    cause=f"unload of version {number} "
                                                          "requested")
            if not model.ready():
                self._required.discard(name)
                self._policy.unloaded(name)

    async def _unload_one_version(self, name: str, number: int, cause: str) -> None:
        model = self._models.get(name)
        if model is not None:
            async with model.lock:
                await self._unloader.unload_version(name, model, number, "unloaded", cause)

    async def on_shutdown(self, message: Shutdown, envelope: Envelope) -> Ack:
        """Unload everything (the last step of a graceful shutdown)."""
        self._policy.stopping()  # --model-control-state loads nothing more
        async with anyio.create_task_group() as tasks:
            for name in list(self._models):
                tasks.start_soon(functools.partial(self._unload, name, cause="shutting down"))
        return Ack()

