"""The dataflow of one pinned ensemble request: each step through its composing model's queue.

Owns running the steps of a request whose versions are pinned
(``inferd.kernel.actors.scheduler.ensembles.pinning``): each step starts as soon as the
tensors it reads exist (``Dataflow``, from ``planning``), alone in the asking task when nothing
runs beside it, else in a task of its own; it becomes an ``InferRequest`` sent through the
composing model's own queue (so it batches with other traffic), or, for a nested ensemble, runs
right here; intermediate tensors are handed on as the same arrays under their new names; under
``max_inflight_requests`` a step holds one of its slots (``inflight``) while it runs; a traced
request gets a child trace per step. After a failed step no other starts, and the request fails
with the step named. It records the ensemble's statistics and each step's. It never pins, never
caches and never streams (``running``'s), and never talks to executors: the scheduler gives it
the way to run a request on a served version.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from inferd.kernel.actors.scheduler.ensembles import pinning
from inferd.kernel.actors.scheduler.ensembles.inflight import StepLimiter
from inferd.kernel.actors.scheduler.ensembles.pinning import Pin
from inferd.kernel.actors.scheduler.ensembles.planning import Dataflow, EnsemblePlan, EnsembleStep
from inferd.kernel.actors.scheduler.ensembles.served import (
    QueuedRequest,
    ServedVersion,
    ensemble_state,
)
from inferd.kernel.actors.scheduler.request_validation import check_request
from inferd.kernel.sdk.tracing import CURRENT
from inferd.protocols.errors import InferdError, Internal
from inferd.protocols.messages import InferRequest, InferResponse, Tensor

V = TypeVar("V", bound=ServedVersion)


@dataclass(slots=True)
class Outcome:
    """What a step (or a whole pinned request) gave: its response, and the time its requests
    queued and computed."""

    response: InferResponse
    queue_ns: int
    compute_ns: tuple[int, int, int]


@dataclass(slots=True)
class Deferred:
    """The decoupled step of a streamed ensemble request: run once the others are done."""

    index: int
    request: InferRequest | None = None


class EnsembleSteps(Generic[V]):
    """Runs the steps of pinned ensemble requests. ``infer(version, request, arrived_ns)``
    runs a request through that version's queue and returns it answered."""

    def __init__(self, infer: Callable[[V, InferRequest, int], Awaitable[QueuedRequest]]
                 ) -> None:
        self._infer = infer

    async def execute(
        self, pin: Pin[V], request: InferRequest, batch_size: int, arrived_ns: int,
        deferred: Deferred | None = None,
    ) -> Outcome:
        """Run the steps of the pinned ensemble for ``request`` (already checked) and record
        the ensemble's statistics. A ``deferred`` step is not sent: its request is kept
        there, and the outcome holds every tensor the other steps made."""
        version = pin.version
        state = ensemble_state(version)
        plan, limiters = state.plan, state.limiters
        wanted = request.outputs or plan.outputs
        flow = Dataflow(plan, wanted, [tensor.name for tensor in request.inputs])
        tensors = {tensor.name: tensor for tensor in request.inputs}
        failures: list[InferdError] = []
        queue_ns = 0
        compute_ns = [0, 0, 0]
        running: dict[asyncio.Task[Outcome], EnsembleStep] = {}

        def settle(
            step: EnsembleStep, outcome: Outcome | None, error: BaseException | None
        ) -> None:
            nonlocal queue_ns
            pinning.release(pin.steps[step.index])
            if error is not None:
                failures.append(step_failed(plan, step, error))
                return
            assert outcome is not None
            queue_ns += outcome.queue_ns
            for phase, ns in enumerate(outcome.compute_ns):
                compute_ns[phase] += ns
            flow.finished(step)

        ready = flow.take_ready()
        try:
            while ready or running:
                if len(ready) == 1 and not running:
                    # A step with nothing beside it runs in this task: a chain spawns no task.
                    step = ready[0]
                    limiter = limiters[step.index] if limiters else None
                    try:
                        outcome = await self._run_step(pin, step, request, tensors, flow, deferred,
                                                       limiter)
                    except Exception as error:  # noqa: BLE001 - a failed step fails the request
                        settle(step, None, error)
                    else:
                        settle(step, outcome, None)
                else:
                    for step in ready:
                        coroutine = self._run_step(pin, step, request, tensors, flow, deferred,
                                                   limiters[step.index] if limiters else None)
                        running[asyncio.get_running_loop().create_task(coroutine)] = step
                    done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        failed = task.exception()
                        settle(running.pop(task), None if failed else task.result(), failed)
                # After a failure no step starts; the running ones finish (their batches hold
                # other requests too) and their results are collected.
                ready = [] if failures else flow.take_ready()
        except asyncio.CancelledError:  # its client went away: no further step starts
            for task in running:
                task.cancel()
            version.statistics.record_request(
                False, time.perf_counter_ns() - arrived_ns, 0, "CANCELED")
            raise
        total_ns = time.perf_counter_ns() - arrived_ns
        if failures:
            version.statistics.record_request(False, total_ns, 0)
            raise failures[0]
        compute = (compute_ns[0], compute_ns[1], compute_ns[2])
        version.statistics.record_batch(batch_size, 1, compute)
        version.statistics.record_request(True, total_ns, queue_ns)
        outputs = (tuple(tensors.values()) if deferred is not None
                   else tuple(tensors[name] for name in wanted))
        response = InferResponse(
            model=version.model, version=str(version.version), outputs=outputs, id=request.id
        )
        return Outcome(response, queue_ns, compute)

    async def _run_step(
        self,
        pin: Pin[V],
        step: EnsembleStep,
        request: InferRequest,
        tensors: dict[str, Tensor],
        flow: Dataflow,
        deferred: Deferred | None = None,
        limiter: StepLimiter | None = None,
    ) -> Outcome:
        """Send one step to its pinned version and store what it writes in ``tensors`` (the
        ``deferred`` step's request is only kept). Under ``max_inflight_requests`` it waits
        for one of the step's slots first and holds it until the step is answered."""
        target = pin.steps[step.index]
        step_request = InferRequest(
            model=step.model,
            inputs=tuple(
                renamed(tensors[tensor], model_input)
                for model_input, tensor in step.inputs
                if not flow.is_absent(tensor)
            ),
            version=str(target.version.version),
            id=request.id,
            outputs=tuple(model_output for model_output, _ in step.outputs),
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
        )
        if deferred is not None and step.index == deferred.index:
            deferred.request = step_request
            empty = InferResponse(step.model, str(target.version.version), ())
            return Outcome(empty, 0, (0, 0, 0))
        statistics = ensemble_state(pin.version).step_statistics(step, target.version.version)
        started_ns = time.perf_counter_ns()
        try:
            if limiter is None:
                outcome = await self._send(target, step_request, started_ns)
            else:
                await limiter.acquire()
                try:
                    outcome = await self._send(target, step_request, started_ns)
                finally:
                    limiter.release()
            written = {tensor.name: tensor for tensor in outcome.response.outputs}
            for model_output, tensor in step.outputs:
                if model_output not in written:
                    raise Internal(f"model '{step.model}' returned no output '{model_output}'")
                tensors[tensor] = renamed(written[model_output], tensor)
        except BaseException:
            statistics.record_answer(False, time.perf_counter_ns() - started_ns, 0)
            raise
        statistics.record_answer(True, time.perf_counter_ns() - started_ns, outcome.queue_ns)
        statistics.record_compute(outcome.compute_ns)
        return outcome

    async def _send(self, target: Pin[V], request: InferRequest, started_ns: int) -> Outcome:
        parent = CURRENT.get()
        if parent is None:
            return await self._send_step(target, request, started_ns)
        # The step's own trace, a child of the ensemble's (Triton's parent_id).
        trace = parent.child(target.version.model)
        token = CURRENT.set(trace)
        try:
            if target.version.ensemble is None:  # the scheduler stamps a model's request
                return await self._send_step(target, request, started_ns)
            trace.request_started(target.version.model, target.version.version, request,
                                  started_ns)
            outcome = await self._send_step(target, request, started_ns)
            trace.request_finished(0, (0, 0, 0), outcome.response)
            return outcome
        finally:
            CURRENT.reset(token)
            trace.end()

    async def _send_step(self, target: Pin[V], request: InferRequest, started_ns: int
                         ) -> Outcome:
        if target.version.ensemble is not None:  # a nested ensemble runs right here
            batch_size = check_request(request, target.version.signature)
            return await self.execute(target, request, batch_size, started_ns)
        queued = await self._infer(target.version, request, started_ns)
        result = queued.result
        if not isinstance(result, InferResponse):
            raise result if isinstance(result, InferdError) else Internal("step got no answer")
        return Outcome(result, queued.started_ns - queued.enqueued_ns, queued.compute_ns)


def renamed(tensor: Tensor, name: str) -> Tensor:
    # The same array under another name: intermediate tensors are never copied.
    if tensor.name == name:
        return tensor
    return Tensor(name, tensor.datatype, tensor.shape, tensor.data)


def step_failed(plan: EnsemblePlan, step: EnsembleStep, error: BaseException) -> InferdError:
    if isinstance(error, InferdError):
        code, message = error.code, error.message
    else:
        code, message = Internal.code, f"{type(error).__name__}: {error}"
    return InferdError.from_code(
        code, f"in ensemble '{plan.name}', step '{step.model}' failed: {message}"
    )
