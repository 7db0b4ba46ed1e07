"""Loading one model, whole or nothing (SPEC 3.1), an object the control actor owns and calls:
resolve its config through the repository actor (with its version labels' versions), bring
every selected version up (``versions``: kept when the load changes nothing it depends on,
else a new copy beside the one serving), and serve them only once all are up; if one fails
the copies go again, so what served stays READY. The versions the policy no longer selects
unload last. Loads of one model are serialized by its lock; a refused load leaves no trace.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from inferd.kernel.actors.control.ensembles import EnsembleLifecycle
from inferd.kernel.actors.control.file_overrides import remove_override_folder, write_override_files
from inferd.kernel.actors.control.labels import VersionLabelBook
from inferd.kernel.actors.control.lifecycle_log import ModelStateLog
from inferd.kernel.actors.control.model_status import ModelStatus, VersionStatus
from inferd.kernel.actors.control.unload import VersionUnloader
from inferd.kernel.actors.control.versions import VersionLoader
from inferd.kernel.actors.repository.folders import NO_VERSION_PROBLEM
from inferd.kernel.modelconfig.version_labels import VersionLabels
from inferd.kernel.runtime.addresses import REPOSITORY, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError, InvalidArgument, NotFound
from inferd.protocols.messages import ModelKnown, ResolvedModel, ResolveModel
from inferd.protocols.names import check_model_name


class ModelLoader:
    """What a load needs of the actor: its models' status (``models``), the state log, and
    the parts that bring versions up (``versions``), serve ensembles (``ensembles``), keep
    version labels (``labels``) and unload versions (``unloader``); ``override_root`` is
    where loads with files write their folders."""

    def __init__(
        self, router: Router, models: dict[str, ModelStatus], states: ModelStateLog, *,
        versions: VersionLoader, ensembles: EnsembleLifecycle, labels: VersionLabelBook,
        unloader: VersionUnloader, override_root: str | Path,
    ) -> None:
        self._router = router
        self._models = models
        self._states = states
        self._versions = versions
        self._ensembles = ensembles
        self._labels = labels
        self._unloader = unloader
        self._override_root = override_root

    async def load(
        self, name: str, config_override: str = "", files: dict[str, bytes] | None = None,
        *, cause: str = "load requested", cached_ok: bool = False, only: tuple[int, ...] = (),
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
            model = self._models.setdefault(name, ModelStatus())
            async with model.lock:
                model.cause = cause
                await self._load_locked(name, model, config_override, override_dir, cached_ok,
                                        only)
                if model.override_dir != override_dir:
                    remove_override_folder(model.override_dir)
                model.override_dir = override_dir
        except InferdError:
            remove_override_folder(override_dir)
            raise
        except BaseException:
            remove_override_folder(override_dir)
            raise

    async def _load_locked(
        self, name: str, model: ModelStatus, config_override: str, override_dir: str,
        cached_ok: bool = False, only: tuple[int, ...] = (),
    ) -> None:
        """Resolve and load every version of ``name`` (``only``: exactly those, the others
        left as they are); the caller owns ``override_dir``.

        As Triton, a load is whole or nothing: every version the policy selects is brought
        up (loaded beside the one serving, or kept when unchanged) before any serves; if one
        fails, the copies brought up go again and what served before keeps serving. Only once
        all serve do the versions the policy no longer selects unload."""
        try:
            resolved, labels = await self._resolve(name, config_override, override_dir,
                                                   cached_ok, only)
        except NotFound:
            self._forget_if_unknown(name, model)
            raise
        except InferdError as error:
            if not only:  # a refused load of single versions changes nothing
                model.error, model.error_version = error.message, None
            self._states.load_failed(name, model.serving(), error.message)
            self._known_after_failure(name, model, error.message)
            raise
        assert isinstance(resolved, ResolvedModel)
        try:
            await self._ensembles.prepare(name, model, resolved)
        except InferdError as error:
            self._states.load_failed(name, model.serving(), error.message)
            self._known_after_failure(name, model)
            raise
        # Past its config, as in Triton: until a version serves, its requests hear "has no
        # available versions" (while it loads and warms up, and if the load fails).
        self._router.tell(SCHEDULER, ModelKnown(name, tuple(resolved.versions)))
        failures: dict[int, str] = {}
        brought_up: dict[int, VersionStatus] = {}

        async def bring_up(number: int) -> None:
            try:
                brought_up[number] = await self._versions.bring_up(name, model, resolved, number)
            except InferdError as error:
                failures[number] = error.message

        if resolved.backend:
            async with anyio.create_task_group() as tasks:
                for number in resolved.versions:
                    tasks.start_soon(bring_up, number)
            if not failures:
                for number in resolved.versions:
                    await self._versions.serve(name, model, number, brought_up[number], resolved)
        else:  # an ensemble: nothing to bring up, the scheduler serves it from its config
            for number in resolved.versions:
                try:
                    await self._ensembles.serve_version(name, model, number, resolved)
                except InferdError as error:
                    failures[number] = error.message
        if failures:
            number, cause = min(failures.items())
            model.error = (
                f"load failed for model '{name}': version {number} is at"
                f" UNAVAILABLE state: {cause}"
            )
            model.error_version = number
            await self._versions.abandon(name, model, brought_up, model.error)
            self._router.tell(SCHEDULER, ModelKnown(name))
            raise InvalidArgument(model.error)
        if labels is not None:
            await self._labels.loaded(resolved, labels)  # before what they left unloads
        dropped = [] if only else [n for n in model.versions if n not in resolved.versions]
        for number in dropped:
            await self._unloader.unload_version(name, model, number, reason="unloaded",
                                                cause="no longer selected by the version policy")
        model.error = ""

    async def _resolve(
        self, name: str, config_override: str, override_dir: str, cached_ok: bool,
        only: tuple[int, ...],
    ) -> tuple[ResolvedModel, VersionLabels | None]:
        """The model to load: exactly the versions ``only``, else the policy's and those its
        version labels name (the labels it has, or its file's when that changed: then a
        second look brings their versions in); with the labels it will have once loaded."""
        def resolve(versions: tuple[int, ...]) -> ResolveModel:
            return ResolveModel(name, config_override, override_dir, cached_ok, versions,
                                exact=bool(only))

        wanted = only or self._labels.of(name).targets()
        resolved = await self._router.ask(REPOSITORY, resolve(wanted))
        assert isinstance(resolved, ResolvedModel)
        if only:
            return resolved, None
        labels = self._labels.for_load(resolved)
        if not set(labels.targets()) <= set(resolved.versions):
            resolved = await self._router.ask(REPOSITORY, resolve(labels.targets()))
            assert isinstance(resolved, ResolvedModel)
        return resolved, labels

    def _known_after_failure(self, name: str, model: ModelStatus, why: str = "") -> None:
        """A load that failed before any version: a model that never had one stays unknown
        to requests ("is not found", as Triton's config or duplicate failures) unless its
        config was read and its policy selected no version folder (Triton's lifecycle holds
        it then: "has no available versions"); one that had versions ends its wait for a
        reload."""
        if model.versions or why.startswith(NO_VERSION_PROBLEM):
            self._router.tell(SCHEDULER, ModelKnown(name))

    def _forget_if_unknown(self, name: str, model: ModelStatus) -> None:
        """A load of a name the repository does not have leaves no trace (SPEC 3.1), unless
        the model was loaded before (from an override) or another load of it is waiting."""
        if not model.versions and model.lock.statistics().tasks_waiting == 0:
            model.error = ""
            if self._models.get(name) is model:
                del self._models[name]
