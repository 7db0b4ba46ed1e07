"""The control policies plugins add (``inferd_register_control_policies``), as the control
actor calls them: every policy opened at start-up behind one ``ControlPolicy`` (``Policies``),
and the ``ControlHandle`` through which they reach the actor (``ActorHandle``).

Owns opening the policies (``open_policies``: a flag a policy refuses fails the start) and
the order they are called in: around a load, the first policy registered is outermost.
The lifecycle itself stays the actor's; a policy only takes part at the points the
contract (``inferd.kernel.sdk.control``) names.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from inferd.kernel.actors.control.model_status import ModelStatus, State
from inferd.kernel.runtime.addresses import CONTROL, REPOSITORY, SCHEDULER
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.control import (
    ControlHandle,
    ControlPolicy,
    OpenedPolicy,
    PolicySetup,
    Resolved,
    Sample,
    UnservedModels,
    Usage,
)
from inferd.kernel.settings import Settings
from inferd.protocols.messages import (
    IndexEntry,
    Message,
    ResolvedModel,
    ResolveModel,
    UsageRequest,
)
from inferd.protocols.messages import Usage as SchedulerUsage


def open_policies(settings: Settings, plugins: Plugins, router: Router
                  ) -> list[OpenedPolicy]:
    """Every registered policy its flags turn on; ``ValueError`` from one that refuses them."""
    async def ask_control(message: Message, timeout: float) -> Message:
        return await router.ask(CONTROL, message, timeout=timeout)

    setup = PolicySetup(settings.options, settings.model_control_mode, ask_control,
                        plugins.control_state_stores())
    return [opened for spec in plugins.control_policies()
            if (opened := spec.open(setup)) is not None]


def unserved_models(opened: list[OpenedPolicy]) -> UnservedModels | None:
    """The data plane's part: the first policy's that has one (one may at most wrap it)."""
    return next((policy.unserved for policy in opened if policy.unserved is not None), None)


class Policies(ControlPolicy):
    """Every opened policy, called as one."""

    def __init__(self, policies: list[ControlPolicy]) -> None:
        self._policies = policies
        self.loads_on_request = any(policy.loads_on_request for policy in policies)

    async def around_load(self, name: str, config_override: str,
                          load: Callable[[], Awaitable[None]]) -> None:
        for policy in reversed(self._policies):
            load = _around(policy, name, config_override, load)
        await load()

    def unloaded(self, name: str) -> None:
        for policy in self._policies:
            policy.unloaded(name)

    def load_requested(self, name: str) -> None:
        for policy in self._policies:
            policy.load_requested(name)

    async def started(self, loaded: set[str]) -> None:
        for policy in self._policies:
            await policy.started(loaded)

    async def around_client_load(self, name: str, config: str, files: Mapping[str, bytes],
                                 versions: tuple[int, ...],
                                 load: Callable[[], Awaitable[None]]) -> None:
        for policy in reversed(self._policies):
            load = functools.partial(policy.around_client_load, name, config, files, versions,
                                     load)
        await load()

    async def around_client_unload(self, name: str,
                                   unload: Callable[[], Awaitable[list[str]]]) -> None:
        # Each policy sees what the unload returned; the outermost returns nothing.
        unloaded: list[str] = []

        async def innermost() -> list[str]:
            unloaded.extend(await unload())
            return unloaded

        run: Callable[[], Awaitable[list[str]]] = innermost
        for policy in reversed(self._policies):
            run = _around_unload(policy, name, run, unloaded)
        await run()

    def stopping(self) -> None:
        for policy in self._policies:
            policy.stopping()

    async def requested(self, name: str) -> bool:
        for policy in self._policies:
            if await policy.requested(name):
                return True
        return False

    async def annotate(self, entries: tuple[IndexEntry, ...]) -> tuple[IndexEntry, ...]:
        for policy in self._policies:
            entries = await policy.annotate(entries)
        return entries

    def metrics(self) -> list[Sample]:
        return [sample for policy in self._policies for sample in policy.metrics()]


def _around(policy: ControlPolicy, name: str, config_override: str,
            load: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await policy.around_load(name, config_override, load)
    return run


def _around_unload(policy: ControlPolicy, name: str, unload: Callable[[], Awaitable[list[str]]],
                   unloaded: list[str]) -> Callable[[], Awaitable[list[str]]]:
    async def run() -> list[str]:
        await policy.around_client_unload(name, unload)
        return unloaded
    return run


class ActorHandle(ControlHandle):
    """The control actor as its policies see it: its model status read-only, its loads and
    unloads through the callables it passes."""

    def __init__(
        self, router: Router, models: Mapping[str, ModelStatus], *, pins: set[str],
        ensembles_using: Callable[[str], list[str]], load: Callable[[str, str], Awaitable[None]],
        evict: Callable[[str, str], Awaitable[None]],
        apply_load: Callable[[str, str, dict[str, bytes], str], Awaitable[None]],
        apply_unload: Callable[[str], Awaitable[None]],
        note_failure: Callable[[str, str], None],
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], object],
    ) -> None:
        self._router = router
        self._models = models
        self._ensembles_using = ensembles_using
        self._pins = pins
        self._load = load
        self._evict = evict
        self._apply_load = apply_load
        self._apply_unload = apply_unload
        self._note_failure = note_failure
        self._spawn = spawn

    def is_ready(self, name: str) -> bool:
        model = self._models.get(name)
        return model is not None and model.ready()

    def is_changing(self, name: str) -> bool:
        model = self._models.get(name)
        return model is not None and (model.lock.locked() or any(
            version.state in (State.LOADING, State.UNLOADING)
            for version in model.versions.values()))

    def loaded_configs(self, name: str) -> list[bytes]:
        model = self._models.get(name)
        return [] if model is None else [v.config for v in model.versions.values() if v.config]

    def named_at_start(self, name: str) -> bool:
        return name in self._pins

    def ensembles_using(self, name: str) -> list[str]:
        return self._ensembles_using(name)

    async def usage(self) -> Usage:
        usage = await self._router.ask(SCHEDULER, UsageRequest())
        assert isinstance(usage, SchedulerUsage)
        return {(model, number): (last, busy) for model, number, last, busy in usage.versions}

    async def resolve(self, name: str, config_override: str) -> Resolved:
        resolved = await self._router.ask(REPOSITORY, ResolveModel(name, config_override))
        assert isinstance(resolved, ResolvedModel)
        return Resolved(resolved.backend, resolved.config, resolved.path)

    async def load(self, name: str, cause: str) -> None:
        await self._load(name, cause)

    async def evict(self, name: str, reason: str) -> None:
        await self._evict(name, reason)

    def note_failure(self, name: str, why: str) -> None:
        self._note_failure(name, why)

    def spawn(self, work: Callable[[], Coroutine[Any, Any, None]]) -> object:
        return self._spawn(work)

    async def apply_load(self, name: str, config: str, files: dict[str, bytes],
                         cause: str) -> None:
        await self._apply_load(name, config, files, cause)

    async def apply_unload(self, name: str) -> None:
        await self._apply_unload(name)
