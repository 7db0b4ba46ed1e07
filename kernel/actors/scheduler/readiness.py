"""A served version's runtime readiness: whether its instances say they can serve.

Triton (core#461) asks each instance of a READY version at every readiness check
(``TRITONBACKEND_ModelInstanceReady``), and its python backend answers with the model's own
``is_ready()`` when it has one (python_backend#430). Here each executor holding instances of
the version is asked once (``InstancesReadyRequest``), all at once, with Triton's bound of
five seconds: an executor that does not answer in time, has gone, or whose instance said no or
failed makes the version not ready for that check. An executor that says none of its instances
has a check of its own is not asked again for them (their ``Slot.checks_readiness``), so a
version without checks costs nothing. Owns these asks only; the scheduler resolves the version.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import anyio

from inferd.kernel.actors.scheduler.requests import Slot
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InstancesReady, InstancesReadyRequest

log = logging.getLogger(__name__)

CHECK_TIMEOUT_SECS = 5.0  # Triton's kUserModelReadinessTimeoutMs


async def instances_ready(router: Router, model: str, slots: list[Slot]) -> bool:
    """Whether every instance of ``slots`` with a check of its own says it is ready."""
    by_executor: dict[str, list[Slot]] = defaultdict(list)
    for slot in slots:
        if slot.checks_readiness:
            by_executor[slot.executor].append(slot)
    if not by_executor:
        return True
    answers: list[bool] = []

    async def ask(executor: str, asked: list[Slot]) -> None:
        request = InstancesReadyRequest(tuple(slot.instance for slot in asked))
        try:
            with anyio.fail_after(CHECK_TIMEOUT_SECS):
                reply = await router.ask(executor, request)
        except TimeoutError:
            log.info("model '%s' is not ready: its readiness check on %s took over %.0f s",
                     model, executor, CHECK_TIMEOUT_SECS)
            answers.append(False)
            return
        except InferdError as error:
            log.info("model '%s' is not ready: %s", model, error.message)
            answers.append(False)
            return
        assert isinstance(reply, InstancesReady)
        if not reply.checked:
            for slot in asked:
                slot.checks_readiness = False
        if not reply.ready:
            log.info("model '%s' is not ready: %s", model, reply.reason)
        answers.append(reply.ready)

    async with anyio.create_task_group() as tasks:
        for executor, asked in by_executor.items():
            tasks.start_soon(ask, executor, asked)
    return all(answers)
