"""The control actor: the model lifecycle, the control modes, and the repository API.

It owns the state of every (model, version) — LOADING, READY, UNLOADING, UNAVAILABLE with a
reason — and decides what is loaded: the start-up set of the mode (NONE: everything;
EXPLICIT: ``--load-model``), and the load/unload/index calls of the repository API. A load
resolves the config through the repository actor, loads each selected version on an executor
through the pool, checks the auto-completed config, and only then tells the scheduler to
serve it. As in Triton a load is whole or nothing: every selected version is brought up
before any serves (a READY version the load does not change is kept, instances and all:
``inferd.kernel.version_reuse``; another brings a new copy up beside the one serving), and
if one fails the copies go again, so a failing reload or a failing new version leaves what
served READY. Loads of one model are serialized; loads of different models run side by
side, and none of this is on the inference path.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actor import Actor
from inferd.kernel.actors.control_desired import DesiredStateControl
from inferd.kernel.ensembles.control import EnsembleControl
from inferd.kernel.addresses import CONTROL, EXECUTORS, REPOSITORY, SCHEDULER
from inferd.kernel.catalog_listing import tensor_specs
from inferd.kernel.classification import read_labels
from inferd.kernel.config_support import check_supported
from inferd.kernel.control_state import Record, Store
from inferd.kernel.ensembles.dependencies import EnsembleDependencies
from inferd.kernel.modelconfig_validation import executor_isolated, validate
from inferd.kernel.overrides import remove_override_folder, write_override_files
from inferd.kernel.repository import TWO_ROOTS_PROBLEM
from inferd.kernel.router import Router
from inferd.kernel.sequence_plan import SequencePlan
from inferd.kernel.settings import Settings
from inferd.kernel.state_log import UNLOADED, ModelStateLog
from inferd.kernel.version_reuse import load_signature, with_version_policy
from inferd.protocols.errors import (
    DeadlineExceeded,
    InferdError,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from inferd.protocols.messages import (
    Ack,
    Catalog,
    CatalogEntry,
    CatalogRequest,
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
    Metrics,
    MetricsRequest,
    ModelKnown,
    ModelList,
    PollRequest,
    ReadCatalogs,
    ResolvedModel,
    ResolveModel,
    RetireVersion,
    ServeVersion,
    Shutdown,
    StartupReport,
    UnloadRequest,
    UnloadVersion,
    VersionLoaded,
)
from inferd.protocols.names import check_model_name

log = logging.getLogger(__name__)

NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"
POLL_SETTLE_SECS = 1.0


class State:
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"
    NOT_LOADED = "NOT_LOADED"  # the catalog's word for a model never loaded (inferd's)


@dataclass(slots=True)
class _Version:
    state: str
    reason: str = ""
    load_id: int = 0
    executors: tuple[str, ...] = ()  # the processes its instances live in
    load_secs: float = 0.0
    # What a later load compares to keep it (inferd.kernel.version_reuse), and what it serves.
    signature: bytes = b""
    fingerprint: str = ""
    path: str = ""
    config: bytes = b""  # the auto-completed config the scheduler serves it with
    instances: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()  # its config's fields inferd ignores (for the index)


@dataclass(slots=True)
class _Model:
    versions: dict[int, _Version] = field(default_factory=dict)
    error: str = ""  # a failure before any version was known (bad config, ...)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    override_dir: str = ""
    cause: str = ""  # why the load under way (or the last one) happens, for the log

    def ready(self) -> bool:
        return any(v.state == State.READY for v in self.versions.values())


class ControlActor(DesiredStateControl, EnsembleControl, Actor):
    address = CONTROL

    def __init__(
        self, router: Router, settings: Settings, override_root: str | Path,
        state: tuple[Store, tuple[Record, str | None]] | None = None,
    ) -> None:
        super().__init__(router)
        # --model-control-state: its store and the record read at start-up (control_desired).
        self._init_desired(*(state or (None, (Record(), None))))
        self._settings = settings
        self._override_root = override_root  # where loads with files write their folders
        self._models: dict[str, _Model] = {}
        self._load_ids = itertools.count(1)
        self._required: set[str] = set()  # what strict readiness waits for
        self._started = False
        self._orphans: dict[str, set[str]] = {}  # executor -> models lost with it
        # POLL: each model folder's fingerprint at the last poll, and the one last acted on.
        self._seen: dict[str, str] = {}
        self._acted_on: dict[str, str] = {}
        self._poll_lock = anyio.Lock()
        self._dependencies = EnsembleDependencies()  # ensembles and their composing models
        self._states = ModelStateLog()  # one log line per state change

    def _model(self, name: str) -> _Model:
        return self._models.setdefault(name, _Model())

    # ------------------------------------------------------------------ start-up

    async def on_load_startup_models(
        self, message: LoadStartupModels, envelope: Envelope
    ) -> StartupReport:
        mode = self._settings.model_control_mode
        if mode == "explicit" and "*" not in self._settings.load_models:
            names = list(self._settings.load_models)
        elif mode == "explicit" or mode in ("none", "poll"):
            listing = await self.router.ask(REPOSITORY, ListModels())
            assert isinstance(listing, ModelList)
            names = list(listing.names)
        else:
            names = []
        if mode == "poll":
            self._seen, _ = await self._fingerprints()
            self._acted_on = dict(self._seen)
        failures: dict[str, str] = {}

        async def load(name: str) -> None:
            try:
                await self._load(name, cause="start-up")
            except InferdError as error:
                failures[name] = error.message

        self._required.update(names)
        self._dependencies.mark_requested(*names)
        async with anyio.create_task_group() as tasks:
            for name in names:
                tasks.start_soon(load, name)
        await self._apply_start_record({name for name in names if name not in failures})
        self._started = True
        if mode == "poll":
            self.spawn(self._poll_forever)
        return StartupReport(failures)

    # ------------------------------------------------------------------ repository API

    async def on_load_request(self, request: LoadRequest, envelope: Envelope) -> Ack:
        if self._settings.model_control_mode != "explicit":
            raise Unavailable(NOT_EXPLICIT)
        async with self._recording(request.model):  # --model-control-state's write follows
            try:
                await self._load(request.model, request.config, request.files)
            except InferdError as error:
                raise _failed_to_load(request.model, error) from None
            self._dependencies.mark_requested(request.model)
            self._required.add(request.model)
            await self._record_load(request.model, request.config, request.files)
        return Ack()

    async def on_unload_request(self, request: UnloadRequest, envelope: Envelope) -> Ack:
        if self._settings.model_control_mode != "explicit":
            raise Unavailable(NOT_EXPLICIT)
        self._required.discard(request.model)
        async with self._recording(request.model):
            unloaded = await self._unload_with_dependents(request.model,
                                                          request.unload_dependents)
            await self._record_unload(request.model, unloaded)
        return Ack()

    async def on_index_request(self, request: IndexRequest, envelope: Envelope) -> Index:
        listing = await self.router.ask(REPOSITORY, ListModels())
        assert isinstance(listing, ModelList)
        entries: list[IndexEntry] = []
        for name in sorted(set(listing.names) | set(self._models)):
            model = self._models.get(name)
            problem = listing.problems.get(name, "")
            # A load refused for a second root says nothing once that folder is gone.
            error = model.error if model is not None else ""
            if error == TWO_ROOTS_PROBLEM and not problem:
                error = ""
            if model is not None and model.versions:
                # A failed reload leaves the old version READY: its reason says what failed,
                # or why the model cannot load now (its folder in a second root).
                entries.extend(
                    IndexEntry(name, str(number), version.state, version.reason)
                    if version.state != State.READY
                    else IndexEntry(name, str(number), version.state,
                                    version.reason or problem or error, version.warnings)
                    for number, version in sorted(model.versions.items())
                )
            elif error:
                entries.append(IndexEntry(name, "", State.UNAVAILABLE, error))
            elif problem:
                entries.append(IndexEntry(name, "", State.UNAVAILABLE, problem))
            else:
                entries.append(IndexEntry(name))
        if request.ready_only:
            entries = [e for e in entries if e.state == State.READY]
        catalogs = await self.router.ask(REPOSITORY, ReadCatalogs())
        assert isinstance(catalogs, Catalogs)
        metadata = catalogs.metadata
        entries = [replace(e, catalog=metadata[e.name]) if e.name in metadata else e
                   for e in entries]
        return Index(tuple(entries))

    async def on_catalog_request(self, request: CatalogRequest, envelope: Envelope) -> Catalog:
        """The repository's descriptions, with each model's state; a READY model's inputs and
        outputs are those of the config its newest READY version is served with."""
        described = await self.router.ask(REPOSITORY, DescribeModels(request.labels,
                                                                      request.task))
        assert isinstance(described, Catalog)
        return Catalog(tuple(self._with_state(entry) for entry in described.entries))

    def _with_state(self, entry: CatalogEntry) -> CatalogEntry:
        model = self._models.get(entry.name)
        if model is None or (not model.versions and not model.error):
            return replace(entry, state=State.NOT_LOADED)
        if not model.versions:
            return replace(entry, state=State.UNAVAILABLE, reason=model.error)
        ready = [v for _, v in sorted(model.versions.items()) if v.state == State.READY]
        if ready and ready[-1].config:
            inputs, outputs = tensor_specs(ModelConfig.FromString(ready[-1].config))
            return replace(entry, state=State.READY, reason=ready[-1].reason, inputs=inputs,
                           outputs=outputs)
        _, newest = max(model.versions.items())
        return replace(entry, state=newest.state, reason=newest.reason)

    async def on_health_request(self, request: HealthRequest, envelope: Envelope) -> HealthStatus:
        if request.what == "live":
            return HealthStatus(True)
        if not self._started:
            return HealthStatus(False)
        if not self._settings.strict_readiness:
            return HealthStatus(True)
        return HealthStatus(all(self._model(name).ready() for name in self._required))

    # ------------------------------------------------------------------ POLL mode

    async def on_poll_request(self, request: PollRequest, envelope: Envelope) -> Ack:
        """Poll now. The folders must still hold still, for a short settle interval instead
        of a whole poll period: the caller says it has finished copying."""
        if self._settings.model_control_mode != "poll":
            raise Unavailable("repository poll is only available with --model-control-mode=poll")
        async with self._poll_lock:
            current, problems = await self._fingerprints()
            self._seen = _keep_unreadable(self._seen, current, problems)
            await anyio.sleep(min(POLL_SETTLE_SECS, self._settings.repository_poll_secs))
            await self._poll_once()
        return Ack()

    async def _poll_forever(self) -> None:
        while True:
            await anyio.sleep(self._settings.repository_poll_secs)
            async with self._poll_lock:
                try:
                    await self._poll_once()
                except InferdError as error:
                    log.error("repository poll failed: %s", error.message)

    async def _fingerprints(self) -> tuple[dict[str, str], dict[str, str]]:
        """Each model folder's fingerprint, and the models that cannot load as they are."""
        reply = await self.router.ask(REPOSITORY, FingerprintModels())
        assert isinstance(reply, Fingerprints)
        return dict(reply.fingerprints), dict(reply.problems)

    async def _poll_once(self) -> None:
        """Act on every folder that changed before the last poll and not since (SPEC 2.2):
        load what is new, reload what changed, unload what is gone. A model with a problem
        (its folder in a second root) is left as it is: what serves keeps serving, and the
        index says why it cannot load."""
        previous = self._seen
        current, problems = await self._fingerprints()
        self._seen = _keep_unreadable(previous, current, problems)
        changed = [
            name
            for name, fingerprint in current.items()
            if previous.get(name) == fingerprint and self._acted_on.get(name) != fingerprint
        ]
        removed = [
            name
            for name in self._acted_on
            if name not in current and name not in previous and name not in problems
        ]
        for name in changed:
            self._acted_on[name] = current[name]
        for name in removed:
            del self._acted_on[name]
        if changed or removed:
            log.info(
                "poll: loading %s; unloading %s",
                ", ".join(changed) or "nothing",
                ", ".join(removed) or "nothing",
            )
        async with anyio.create_task_group() as tasks:
            for name in changed:
                tasks.start_soon(self._poll_load, name)
            for name in removed:
                tasks.start_soon(self._poll_unload, name)

    async def _poll_load(self, name: str) -> None:
        try:
            await self._load(name, cause="poll: a new or changed model folder")
        except InferdError as error:
            log.error("poll: %s", error.message)
        else:
            self._required.add(name)

    async def _poll_unload(self, name: str) -> None:
        self._required.discard(name)
        await self._unload(name, cause="poll: the model folder is gone")
        model = self._models.get(name)
        if model is not None and not model.ready() and model.lock.statistics().tasks_waiting == 0:
            del self._models[name]  # gone from the repository: gone from the index

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        return Metrics(
            tuple(
                (
                    "nv_model_load_duration_secs",
                    {"model": name, "version": str(number)},
                    round(version.load_secs, 6),
                )
                for name, model in sorted(self._models.items())
                for number, version in sorted(model.versions.items())
                if version.state == State.READY
            )
        )

    # ------------------------------------------------------------------ executors

    async def on_executor_lost(self, message: ExecutorLost, envelope: Envelope) -> None:
        lost = set()
        for name, model in self._models.items():
            for number, version in model.versions.items():
                if message.name in version.executors and version.state == State.READY:
                    version.state = State.UNAVAILABLE
                    version.reason = f"{message.reason}; reloading"
                    self._states.changed(name, number, State.UNAVAILABLE, version.reason,
                                         failed=True)
                    lost.add(name)
                    self.spawn(self._retire, name, number, version, message.reason)
        self._orphans.setdefault(message.name, set()).update(lost)
        self._refresh_dependents(*lost)

    async def on_executor_hello(self, message: ExecutorHello, envelope: Envelope) -> None:
        for name in sorted(self._orphans.pop(message.name, set())):
            self.spawn(self._reload_orphan, name)

    async def _reload_orphan(self, name: str) -> None:
        try:
            # What served keeps serving: a cached copy stands in for unreadable storage.
            await self._load(name, cause="its executor restarted", cached_ok=True)
        except InferdError as error:
            log.error("reloading %s after its executor restarted failed: %s", name, error.message)

    async def _retire(self, name: str, number: int, version: _Version, why: str) -> None:
        """A version that lost an executor stops serving (its requests hear ``why`` until it
        serves again); the instances it still has in its other executors go (the reload
        brings up every part again)."""
        await self.router.ask(SCHEDULER, RetireVersion(name, number, reloading=why))
        if len(version.executors) > 1:
            await self.router.ask(EXECUTORS, UnloadVersion(version.load_id))
            version.load_id = 0

    # ------------------------------------------------------------------ load and unload

    async def _load(
        self, name: str, config_override: str = "", files: dict[str, bytes] | None = None,
        *, cause: str = "load requested", cached_ok: bool = False,
    ) -> None:
        # The name is checked before anything else, and the override files are written
        # (every path checked first) before the model has an entry in the index: a refused
        # request leaves no trace.
        check_model_name(name)
        if files and not config_override:
            raise InvalidArgument(
                f"failed to load '{name}': file overrides need a 'config' parameter too"
            )
        override_dir = write_override_files(name, files, self._override_root) if files else ""
        try:
            model = self._model(name)
            async with model.lock:
                model.cause = cause
                await self._load_locked(name, model, config_override, override_dir, cached_ok)
                if model.override_dir != override_dir:
                    remove_override_folder(model.override_dir)
                model.override_dir = override_dir
        except InferdError as error:
            remove_override_folder(override_dir)
            if not isinstance(error, NotFound):  # in the repository, just not available
                self.router.tell(SCHEDULER, ModelKnown(name))
            raise
        except BaseException:
            remove_override_folder(override_dir)
            raise

    async def _load_locked(
        self, name: str, model: _Model, config_override: str, override_dir: str,
        cached_ok: bool = False,
    ) -> None:
        """Resolve and load every version of ``name``; the caller owns ``override_dir``.

        As Triton, a load is whole or nothing: every version the policy selects is brought
        up (loaded beside the one serving, or kept when unchanged) before any serves; if one
        fails, the copies brought up go again and what served before keeps serving. Only once
        all serve do the versions the policy no longer selects unload."""
        try:
            resolved = await self.router.ask(
                REPOSITORY, ResolveModel(name, config_override, override_dir, cached_ok)
            )
        except NotFound:
            self._forget_if_unknown(name, model)
            raise
        except InferdError as error:
            model.error = error.message
            self._states.changed(name, None, State.UNAVAILABLE, error.message, failed=True)
            raise
        assert isinstance(resolved, ResolvedModel)
        try:
            await self._prepare_if_ensemble(name, model, resolved)
        except InferdError as error:
            self._states.changed(name, None, State.UNAVAILABLE, error.message, failed=True)
            raise
        failures: dict[int, str] = {}
        brought_up: dict[int, _Version] = {}

        async def bring_up(number: int) -> None:
            try:
                brought_up[number] = await self._bring_up_version(name, model, resolved, number)
            except InferdError as error:
                failures[number] = error.message

        if resolved.backend:
            async with anyio.create_task_group() as tasks:
                for number in resolved.versions:
                    tasks.start_soon(bring_up, number)
            if not failures:
                for number in resolved.versions:
                    await self._serve_version(name, model, number, brought_up[number], resolved)
        else:  # an ensemble: nothing to bring up, the scheduler serves it from its config
            for number in resolved.versions:
                try:
                    await self._serve_ensemble_version(name, model, number, resolved)
                except InferdError as error:
                    failures[number] = error.message
        if failures:
            number, cause = min(failures.items())
            model.error = (
                f"load failed for model '{name}': version {number} is at"
                f" UNAVAILABLE state: {cause}"
            )
            await self._abandon(name, model, brought_up, model.error)
            raise InvalidArgument(model.error)
        for number in [n for n in model.versions if n not in resolved.versions]:
            await self._unload_version(name, model, number, reason="unloaded",
                                       cause="no longer selected by the version policy")
        model.error = ""

    async def _bring_up_version(
        self, name: str, model: _Model, resolved: ResolvedModel, number: int
    ) -> _Version:
        """The READY version ``number`` will be once served: the one serving, kept when
        the load changes nothing it depends on (``inferd.kernel.version_reuse``), else a new
        copy loaded on the executors beside it. Not served yet: ``_serve_version`` does."""
        previous = model.versions.get(number)
        serving = previous if previous is not None and previous.state == State.READY else None
        signature = load_signature(resolved.config)
        fingerprint = dict(resolved.version_fingerprints).get(number, "")
        if (
            serving is not None
            and serving.load_id
            and fingerprint
            and (serving.signature, serving.fingerprint, serving.path)
            == (signature, fingerprint, resolved.path)
        ):
            return replace(serving, config=with_version_policy(serving.config, resolved.config))
        if serving is None:
            model.versions[number] = _Version(State.LOADING)
            self._states.changed(name, number, State.LOADING, model.cause)
        else:
            self._states.changed(name, number, State.LOADING,
                                 f"{model.cause}; a new copy loads while this one serves")
        load_id = next(self._load_ids)
        config = ModelConfig()
        config.ParseFromString(resolved.config)
        load = LoadVersion(
            load_id=load_id,
            model=name,
            version=number,
            backend=resolved.backend,
            config=resolved.config,
            path=resolved.path,
            instance_count=sum(max(1, g.count) for g in config.instance_group) or 1,
            auto_complete=not self._settings.disable_auto_complete_config,
            isolated=executor_isolated(config),
        )
        timeout = self._settings.model_load_timeout_secs
        started = time.monotonic()
        try:
            loaded = await self.router.ask(EXECUTORS, load, timeout=timeout)
            assert isinstance(loaded, VersionLoaded)
        except DeadlineExceeded:
            self.router.tell(EXECUTORS, UnloadVersion(load_id))  # if it ever finishes
            reason = f"load did not finish within {timeout:g} s (--model-load-timeout-secs)"
            self._fail_version(name, model, number, serving, reason)
            raise InvalidArgument(reason) from None
        except InferdError as error:
            # Clients read this (the error, the index): the folder is named as the model, not
            # by where it lives on the server.
            reason = error.message.replace(resolved.path, name) if resolved.path else error.message
            self._fail_version(name, model, number, serving, reason)
            raise type(error)(reason) from None
        completed = ModelConfig()
        completed.ParseFromString(loaded.config)
        try:
            validate(completed, folder_name=name, complete=True)
            # What auto-complete added is held to the same rules.
            warnings = dict.fromkeys((*resolved.warnings, *check_supported(completed)))
            read_labels(completed, Path(resolved.path))  # a missing label file fails the load
            if completed.HasField("sequence_batching"):
                if completed.model_transaction_policy.decoupled:
                    raise InvalidArgument(f"model '{name}': a decoupled model with "
                                          "sequence_batching is not supported by inferd")
                SequencePlan.of(completed, Path(resolved.path))
        except InvalidArgument as error:
            await self.router.ask(EXECUTORS, UnloadVersion(load_id))
            self._fail_version(name, model, number, serving, error.message)
            raise
        instances = loaded.instances or tuple((loaded.executor, i) for i in loaded.instance_ids)
        return _Version(
            State.READY, "", load_id, tuple(dict.fromkeys(e for e, _ in instances)),
            time.monotonic() - started, signature=signature, fingerprint=fingerprint,
            path=resolved.path, config=loaded.config, instances=instances,
            warnings=tuple(warnings),
        )

    async def _serve_version(
        self, name: str, model: _Model, number: int, ready: _Version, resolved: ResolvedModel
    ) -> None:
        """Make the scheduler serve ``ready`` (from ``_bring_up_version``) as version
        ``number``; a new copy replaces the one serving, which then unloads."""
        current = model.versions.get(number)
        if current is not None and current.load_id and current.load_id == ready.load_id:
            # Kept: its instances stay; the scheduler learns its new version policy only.
            if ready.config != current.config:
                await self.router.ask(SCHEDULER, ServeVersion(
                    name, number, ready.config, current.instances, resolved.path,
                    config_only=True))
            current.config = ready.config
            return
        await self.router.ask(SCHEDULER, ServeVersion(name, number, ready.config,
                                                      ready.instances, resolved.path))
        old_load = current.load_id if current is not None else 0
        model.versions[number] = ready
        self._states.changed(name, number, State.READY)
        self._refresh_dependents(name)
        if old_load:
            await self.router.ask(EXECUTORS, UnloadVersion(old_load))

    async def _abandon(
        self, name: str, model: _Model, brought_up: dict[int, _Version], why: str
    ) -> None:
        """A load failed: the copies it brought up unload; a version that was not serving
        before is UNAVAILABLE with ``why`` (unless it failed itself, with its own cause)."""
        for number, ready in brought_up.items():
            current = model.versions.get(number)
            if current is not None and current.load_id == ready.load_id:
                continue  # kept: it serves as before
            await self.router.ask(EXECUTORS, UnloadVersion(ready.load_id))
            if current is None or current.state != State.READY:
                model.versions[number] = _Version(State.UNAVAILABLE, why)
                self._states.changed(name, number, State.UNAVAILABLE, why, failed=True)

    def _forget_if_unknown(self, name: str, model: _Model) -> None:
        """A load of a name the repository does not have leaves no trace (SPEC 3.1), unless
        the model was loaded before (from an override) or another load of it is waiting."""
        if not model.versions and model.lock.statistics().tasks_waiting == 0:
            model.error = ""
            if self._models.get(name) is model:
                del self._models[name]

    def _fail_version(
        self, name: str, model: _Model, number: int, serving: _Version | None, reason: str
    ) -> None:
        if serving is None:
            model.versions[number] = _Version(State.UNAVAILABLE, reason)
            self._states.changed(name, number, State.UNAVAILABLE, reason, failed=True)
        else:
            self._states.changed(name, number, State.READY,
                                 f"the reload failed, the copy serving stays: {reason}",
                                 failed=True)

    async def _unload(self, name: str, *, cause: str = "unload requested") -> None:
        model = self._models.get(name)
        if model is None:
            return
        async with model.lock:
            async with anyio.create_task_group() as tasks:
                for number in list(model.versions):
                    tasks.start_soon(self._unload_version, name, model, number, "unloaded",
                                     cause)
            remove_override_folder(model.override_dir)
            model.override_dir = ""

    async def _unload_version(self, name: str, model: _Model, number: int, reason: str,
                              cause: str = "unload requested") -> None:
        version = model.versions.get(number)
        if version is None or version.state not in (State.READY, State.UNAVAILABLE):
            return
        was_ready = version.state == State.READY or self._dependencies.is_served(name, number)
        version.state = State.UNLOADING
        self._states.changed(name, number, State.UNLOADING, cause)
        if was_ready:
            await self.router.ask(SCHEDULER, RetireVersion(name, number))
        if version.load_id:
            await self.router.ask(EXECUTORS, UnloadVersion(version.load_id))
        model.versions[number] = _Version(State.UNAVAILABLE, reason)
        self._states.changed(name, number, UNLOADED)
        self._version_unloaded(name, number)

    async def on_shutdown(self, message: Shutdown, envelope: Envelope) -> Ack:
        """Unload everything (the last step of a graceful shutdown)."""
        self._stop_following()  # --model-control-state loads nothing more
        async with anyio.create_task_group() as tasks:
            for name in list(self._models):
                tasks.start_soon(functools.partial(self._unload, name, cause="shutting down"))
        return Ack()


def _keep_unreadable(
    previous: dict[str, str], current: dict[str, str], problems: dict[str, str]
) -> dict[str, str]:
    """``current``, plus what was last seen of the models that cannot be read now (a remote
    root that does not answer): an outage is no proof that a folder changed or went, so the
    stable-folder rule still waits a full period of it readable before acting."""
    return {**{name: seen for name, seen in previous.items() if name in problems}, **current}


# Triton's openings of a failed load's answer, which clients and scripts match on.
_LOAD_FAILED_OPENINGS = ("failed to load '", "load failed for model '")


def _failed_to_load(model: str, error: InferdError) -> InferdError:
    """``error`` as a load request's answer: Triton's ``failed to load '<m>': `` before
    inferd's real cause (unless it already opens with Triton's words), with its status."""
    if error.message.startswith(_LOAD_FAILED_OPENINGS):
        return error
    return InferdError.from_code(error.code, f"failed to load '{model}': {error.message}")
