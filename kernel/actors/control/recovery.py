"""Control's answer to a lost executor, an object the control actor owns and calls.

Owns what happens to the versions whose instances lived in an executor that went: each READY
one becomes UNAVAILABLE (its requests hear why until it serves again) and the scheduler
retires it; the instances it still has in other executors unload (the reload brings every
part up again); the models lost are remembered per executor, and reloaded once that executor
says hello again (a cached copy standing in for storage that cannot be read now). The
actor's map of model status, its state log, how to reload a model, how to refresh the
ensembles using a model and where to run work are passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from inferd.kernel.actors.control.lifecycle_log import ModelStateLog
from inferd.kernel.actors.control.model_status import ModelStatus, State, VersionStatus
from inferd.kernel.runtime.addresses import EXECUTORS, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import RetireVersion, UnloadVersion

log = logging.getLogger(__name__)

Reload = Callable[[str], Awaitable[None]]
"""``reload(name)``: load the model again after its executor restarted (raising its error)."""
Spawn = Callable[..., object]
"""``spawn(function, *args)``: run ``function(*args)`` in a task the actor owns."""


class ExecutorRecovery:
    def __init__(
        self, router: Router, models: Mapping[str, ModelStatus], states: ModelStateLog, *,
        reload: Reload, refresh_dependents: Callable[..., None], spawn: Spawn,
    ) -> None:
        self._router = router
        self._models = models
        self._states = states
        self._reload = reload
        self._refresh_dependents = refresh_dependents
        self._spawn = spawn
        self._orphans: dict[str, set[str]] = {}  # executor -> models lost with it

    def executor_lost(self, executor: str, reason: str) -> None:
        lost = set()
        for name, model in self._models.items():
            for number, version in model.versions.items():
                if executor in version.executors and version.state == State.READY:
                    version.state = State.UNAVAILABLE
                    version.reason = f"{reason}; reloading"
                    self._states.changed(name, number, State.UNAVAILABLE, version.reason,
                                         failed=True)
                    lost.add(name)
                    self._spawn(self._retire, name, number, version, reason)
        self._orphans.setdefault(executor, set()).update(lost)
        self._refresh_dependents(*lost)

    def executor_started(self, executor: str) -> None:
        for name in sorted(self._orphans.pop(executor, set())):
            self._spawn(self._reload_orphan, name)

    async def _reload_orphan(self, name: str) -> None:
        try:
            await self._reload(name)
        except InferdError as error:
            log.error("reloading %s after its executor restarted failed: %s", name, error.message)

    async def _retire(self, name: str, number: int, version: VersionStatus, why: str) -> None:
        """A version that lost an executor stops serving (its requests hear ``why`` until it
        serves again); the instances it still has in its other executors go (the reload
        brings up every part again)."""
        await self._router.ask(SCHEDULER, RetireVersion(name, number, reloading=why))
        if len(version.executors) > 1:
            await self._router.ask(EXECUTORS, UnloadVersion(version.load_id))
            version.load_id = 0

