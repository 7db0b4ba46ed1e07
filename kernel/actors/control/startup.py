"""What the server loads at start-up and when it is ready, as the control actor decides them.

Owns the start-up set of each control mode (``startup_names``: NONE and POLL every model of
the repository, EXPLICIT those of ``--load-model``, ``*`` meaning all; none in POLL mode when
models load on their first request; as Triton's, a folder in two roots is loaded from neither
and is no failure) and the server's readiness (``server_ready``: live at once; ready once the
start-up loads are done and, with strict readiness, every model the server requires is READY
and its instances say they can serve). It loads nothing and keeps no state: the models, the
set the server requires and the loads are the actor's.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from inferd.kernel.actors.control.model_status import ModelStatus
from inferd.kernel.actors.repository.folders import TWO_ROOTS_PROBLEM
from inferd.kernel.runtime.addresses import REPOSITORY, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.kernel.settings import Settings
from inferd.protocols.messages import HealthStatus, ListModels, ModelList, ModelReadyRequest

log = logging.getLogger(__name__)


async def startup_names(router: Router, settings: Settings, loads_on_request: bool
                        ) -> list[str]:
    """The models the control mode loads at start-up (``loads_on_request``: a policy loads
    each on its first request instead)."""
    mode = settings.model_control_mode
    if mode == "explicit" and "*" not in settings.load_models:
        return list(settings.load_models)
    if mode == "poll" and loads_on_request:
        return []  # on demand: a model loads on its first request
    if mode not in ("explicit", "none", "poll"):
        return []
    listing = await router.ask(REPOSITORY, ListModels())
    assert isinstance(listing, ModelList)
    # As Triton's, a folder in two roots is loaded from neither and is no failure:
    # the index says why (and the server is ready without it).
    names = [name for name in listing.names
             if listing.problems.get(name) != TWO_ROOTS_PROBLEM]
    for name in sorted(set(listing.names) - set(names)):
        log.error("failed to poll model '%s': not unique across all model "
                  "repositories", name)
    return names


async def server_ready(router: Router, models: dict[str, ModelStatus],
                       required: Collection[str], *, strict: bool) -> bool:
    """Whether the server (its start-up done) is ready: without strict readiness always;
    with it, once every model in ``required`` is READY and says it can serve."""
    if not strict:
        return True
    if not all(models.setdefault(name, ModelStatus()).ready() for name in required):
        return False
    # As Triton since core#473: a model whose instances say they cannot serve now (a
    # python model's is_ready()) makes the server not ready either.
    for name in sorted(required):
        reply = await router.ask(SCHEDULER, ModelReadyRequest(name))
        if not (isinstance(reply, HealthStatus) and reply.ok):
            return False
    return True
