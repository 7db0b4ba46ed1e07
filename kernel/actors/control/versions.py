"""Bringing the versions of one load up on the executors, serving them, or giving them up.

Owns the executor side of a load, for the control actor (which owns the model's lock and its
whole-or-nothing decision): a version is kept when the load changes nothing it depends on
(``inferd.kernel.actors.control.version_reuse``), else a new copy is loaded on the executors (within
``--model-load-timeout-secs``) beside the one serving, and the config auto-completed there is
held to the same rules as the one written (validation, labels, sequence batching); a copy
brought up is served by telling the scheduler, and the copy it replaces unloads; a load that
failed unloads the copies it brought up. A version that fails is UNAVAILABLE with its
reason, unless a copy serves (then it stays READY, and the log says the reload failed).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.control.lifecycle_log import ModelStateLog
from inferd.kernel.actors.control.model_status import ModelStatus, State, VersionStatus
from inferd.kernel.actors.control.version_reuse import load_signature, with_version_policy
from inferd.kernel.actors.scheduler.classification import read_labels
from inferd.kernel.modelconfig.sequence_plan import SequencePlan
from inferd.kernel.modelconfig.support import check_supported
from inferd.kernel.modelconfig.validation import executor_isolated, validate
from inferd.kernel.runtime.addresses import EXECUTORS, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.kernel.settings import Settings
from inferd.protocols.errors import DeadlineExceeded, InferdError, InvalidArgument
from inferd.protocols.messages import (
    LoadVersion,
    ResolvedModel,
    ServeVersion,
    UnloadVersion,
    VersionLoaded,
)


class VersionLoader:
    """``refresh_dependents(name)``: the ensembles using ``name`` follow its new state."""

    def __init__(self, router: Router, settings: Settings, states: ModelStateLog, *,
                 refresh_dependents: Callable[[str], None]) -> None:
        self._router = router
        self._settings = settings
        self._states = states
        self._refresh_dependents = refresh_dependents
        self._load_ids = itertools.count(1)

    async def bring_up(
        self, name: str, model: ModelStatus, resolved: ResolvedModel, number: int
    ) -> VersionStatus:
        """The READY version ``number`` will be once served: the one serving, kept when
        the load changes nothing it depends on (``inferd.kernel.actors.control.version_reuse``),
        else a new copy loaded on the executors beside it. Not served yet: ``serve`` does."""
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
            model.versions[number] = VersionStatus(State.LOADING)
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
            loaded = await self._router.ask(EXECUTORS, load, timeout=timeout)
            assert isinstance(loaded, VersionLoaded)
        except DeadlineExceeded:
            self._router.tell(EXECUTORS, UnloadVersion(load_id))  # if it ever finishes
            reason = f"load did not finish within {timeout:g} s (--model-load-timeout-secs)"
            self._fail(name, model, number, serving, reason)
            raise InvalidArgument(reason) from None
        except InferdError as error:
            # Clients read this (the error, the index): the folder is named as the model, not
            # by where it lives on the server.
            reason = error.message.replace(resolved.path, name) if resolved.path else error.message
            self._fail(name, model, number, serving, reason)
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
            await self._router.ask(EXECUTORS, UnloadVersion(load_id))
            self._fail(name, model, number, serving, error.message)
            raise
        instances = loaded.instances or tuple((loaded.executor, i) for i in loaded.instance_ids)
        return VersionStatus(
            State.READY, "", load_id, tuple(dict.fromkeys(e for e, _ in instances)),
            time.monotonic() - started, signature=signature, fingerprint=fingerprint,
            path=resolved.path, config=loaded.config, instances=instances,
            warnings=tuple(warnings), warmup=loaded.warmup,
        )

    async def serve(
        self, name: str, model: ModelStatus, number: int, ready: VersionStatus,
        resolved: ResolvedModel,
    ) -> None:
        """Make the scheduler serve ``ready`` (from ``bring_up``) as version
        ``number``; a new copy replaces the one serving, which then unloads."""
        current = model.versions.get(number)
        if current is not None and current.load_id and current.load_id == ready.load_id:
            # Kept: its instances stay; the scheduler learns its new version policy only.
            if ready.config != current.config:
                await self._router.ask(SCHEDULER, ServeVersion(
                    name, number, ready.config, current.instances, resolved.path,
                    config_only=True))
            current.config = ready.config
            return
        await self._router.ask(SCHEDULER, ServeVersion(name, number, ready.config,
                                                      ready.instances, resolved.path,
                                                      warmup=ready.warmup))
        old_load = current.load_id if current is not None else 0
        model.versions[number] = ready
        self._states.changed(name, number, State.READY)
        self._refresh_dependents(name)
        if old_load:
            await self._router.ask(EXECUTORS, UnloadVersion(old_load))

    async def abandon(
        self, name: str, model: ModelStatus, brought_up: dict[int, VersionStatus], why: str
    ) -> None:
        """A load failed: the copies it brought up unload; a version that was not serving
        before is UNAVAILABLE with ``why`` (unless it failed itself, with its own cause)."""
        for number, ready in brought_up.items():
            current = model.versions.get(number)
            if current is not None and current.load_id == ready.load_id:
                continue  # kept: it serves as before
            await self._router.ask(EXECUTORS, UnloadVersion(ready.load_id))
            if current is None or current.state != State.READY:
                model.versions[number] = VersionStatus(State.UNAVAILABLE, why)
                self._states.changed(name, number, State.UNAVAILABLE, why, failed=True)

    def _fail(
        self, name: str, model: ModelStatus, number: int, serving: VersionStatus | None, reason: str
    ) -> None:
        if serving is None:
            model.versions[number] = VersionStatus(State.UNAVAILABLE, reason)
            self._states.changed(name, number, State.UNAVAILABLE, reason, failed=True)
        else:
            self._states.changed(name, number, State.READY,
                                 f"the reload failed, the copy serving stays: {reason}",
                                 failed=True)
