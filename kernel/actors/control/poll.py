"""Control's POLL mode (SPEC 2.2), an object the control actor owns and calls.

Owns what polling the repository means: each model folder's fingerprint at the last poll and
the one last acted on; acting on every folder that changed before the last poll and not since
(the stable-folder rule): loading what is new, reloading what changed, unloading what is gone;
the loop that polls every ``--repository-poll-secs``, and a poll on request, which waits a
short settle interval instead of a whole period. A model whose folder appears in a second
root is unloaded (Triton's rule: duplicates may not serve) and loaded again once it is
unique; one whose remote root does not answer is left as it is. Loading and unloading one
model are the actor's, passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from inferd.kernel.actors.repository.folders import TWO_ROOTS_PROBLEM
from inferd.kernel.runtime.addresses import REPOSITORY
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import FingerprintModels, Fingerprints

log = logging.getLogger(__name__)

POLL_SETTLE_SECS = 1.0

ChangeModel = Callable[[str], Coroutine[Any, Any, None]]
"""``load(name)``: act on one model folder that is new or changed (a failure is the callee's
to log)."""
UnloadModel = Callable[[str, str], Coroutine[Any, Any, None]]
"""``unload(name, cause)``: unload a model whose folder is gone, or is no longer unique."""


class RepositoryPoller:
    def __init__(self, router: Router, period_secs: float, *, load: ChangeModel,
                 unload: UnloadModel) -> None:
        self._router = router
        self._period_secs = period_secs
        self._load = load
        self._unload = unload
        self._seen: dict[str, str] = {}
        self._acted_on: dict[str, str] = {}
        self._lock = anyio.Lock()

    async def begin(self) -> None:
        """At start-up, before the start-up loads: what is there now counts as acted on."""
        self._seen, _ = await self._fingerprints()
        self._acted_on = dict(self._seen)

    async def poll_now(self) -> None:
        """Poll now. The folders must still hold still, for a short settle interval instead
        of a whole poll period: the caller says it has finished copying."""
        async with self._lock:
            current, problems = await self._fingerprints()
            self._seen = _keep_unreadable(self._seen, current, problems)
            await anyio.sleep(min(POLL_SETTLE_SECS, self._period_secs))
            await self._poll_once()

    async def poll_forever(self) -> None:
        while True:
            await anyio.sleep(self._period_secs)
            async with self._lock:
                try:
                    await self._poll_once()
                except InferdError as error:
                    log.error("repository poll failed: %s", error.message)

    async def _fingerprints(self) -> tuple[dict[str, str], dict[str, str]]:
        """Each model folder's fingerprint, and the models that cannot load as they are."""
        reply = await self._router.ask(REPOSITORY, FingerprintModels())
        assert isinstance(reply, Fingerprints)
        return dict(reply.fingerprints), dict(reply.problems)

    async def _poll_once(self) -> None:
        """Act on every folder that changed before the last poll and not since (SPEC 2.2):
        load what is new, reload what changed, unload what is gone or in a second root. A
        model whose remote root does not answer is left as it is: what serves keeps
        serving."""
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
        duplicated = [name for name, problem in problems.items()
                      if problem == TWO_ROOTS_PROBLEM and name in self._acted_on]
        for name in changed:
            self._acted_on[name] = current[name]
        for name in [*removed, *duplicated]:
            del self._acted_on[name]  # loaded again as new, should its folder come back
        for name in duplicated:
            log.error("failed to poll model '%s': not unique across all model repositories",
                      name)
        if changed or removed:
            log.info(
                "poll: loading %s; unloading %s",
                ", ".join(changed) or "nothing",
                ", ".join(removed) or "nothing",
            )
        async with anyio.create_task_group() as tasks:
            for name in changed:
                tasks.start_soon(self._load, name)
            for name in removed:
                tasks.start_soon(self._unload, name, "poll: the model folder is gone")
            for name in duplicated:
                tasks.start_soon(self._unload, name, f"poll: {TWO_ROOTS_PROBLEM}")


def _keep_unreadable(
    previous: dict[str, str], current: dict[str, str], problems: dict[str, str]
) -> dict[str, str]:
    """``current``, plus what was last seen of the models that cannot be read now (a remote
    root that does not answer): an outage is no proof that a folder changed or went, so the
    stable-folder rule still waits a full period of it readable before acting."""
    return {**{name: seen for name, seen in previous.items() if name in problems}, **current}
