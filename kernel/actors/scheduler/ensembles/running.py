"""Ensemble execution inside the scheduler: one request's dataflow through composing models.

Owns running an ``InferRequest`` addressed to an ensemble version (SPEC 4.1, 4.3): it is
checked against the ensemble's inputs; the version of every step it needs is fixed when it
starts (``inferd.kernel.actors.scheduler.ensembles.pinning``); each step becomes an
``InferRequest`` that goes through the composing model's own queue (the scheduler's request
path, so it batches with other traffic) as soon as the tensors it reads exist; intermediate
tensors are handed on as the same numpy arrays; the answer holds the requested ensemble
outputs. An ensemble whose last step is a decoupled model is answered as a stream: the other
steps run once, then every response of the decoupled step becomes an ensemble response. An
ensemble with the response cache is cached at the top level, as in Triton: a hit runs no step
(unless a step is a decoupled or sequence model: then it is not cached). Under
``max_inflight_requests`` each step waits for one of its slots (``inflight``); while the
ensemble warms up again (``warming``) new requests wait at its gate, and ``run_warmup`` runs a
warm-up request past it. It records the ensemble's statistics with their per-step breakdown
(kept in ``inferd.kernel.actors.scheduler.ensembles.served``). It never talks to executors or
control: the scheduler gives it the way to resolve a model to a served version, to run a
request on one and to open a stream on one; the plan comes from
``inferd.kernel.actors.scheduler.ensembles.planning``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
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
from inferd.kernel.actors.scheduler.response_cache import CacheScope
from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.sdk.tracing import CURRENT
from inferd.protocols.errors import (
    DecoupledNotStreamed,
    InferdError,
    Internal,
    Unsupported,
)
from inferd.protocols.messages import InferRequest, InferResponse, Tensor

V = TypeVar("V", bound=ServedVersion)


@dataclass(slots=True)
class _Outcome:
    response: InferResponse
    queue_ns: int
    compute_ns: tuple[int, int, int]


@dataclass(slots=True)
class _Deferred:
    """The decoupled step of a streamed ensemble request: run once the others are done."""

    index: int
    request: InferRequest | None = None


class EnsembleRunner(Generic[V]):
    """Runs ensemble requests. ``resolve(model, version)`` returns the served version a
    request would go to (raising Triton's unknown-model errors); ``infer(version, request,
    arrived_ns)`` runs a request through that version's queue and returns it answered."""

    def __init__(
        self,
        resolve: Callable[[str, str], V],
        infer: Callable[[V, InferRequest, int], Awaitable[QueuedRequest]],
        stream: Callable[[V, InferRequest], Awaitable[ResponseStream]] | None = None,
    ) -> None:
        self._resolve = resolve
        self._infer = infer
        self._stream = stream
        self._relays: set[asyncio.Task[None]] = set()

    async def infer(self, version: V, request: InferRequest, arrived_ns: int) -> InferResponse:
        """Answer ``request`` to the ensemble ``version`` (resolved by the caller)."""
        gate = ensemble_state(version).gate
        if gate is not None:  # its warm-up runs again: new requests wait until it is warm
            await gate.wait()
        trace = CURRENT.get()
        if trace is None:
            return await self._infer_ensemble(version, request, arrived_ns)
        trace.request_started(version.model, version.version, request, arrived_ns)
        response = await self._infer_ensemble(version, request, arrived_ns)
        trace.request_finished(0, (0, 0, 0), response)
        return response

    async def _infer_ensemble(self, version: V, request: InferRequest, arrived_ns: int
                              ) -> InferResponse:
        state = ensemble_state(version)
        batch_size = check_request(request, version.signature)
        wanted = request.outputs or state.plan.outputs
        try:
            pin = pinning.pin_for(version, wanted, self._resolve)
        except InferdError:
            version.statistics.record_request(False, time.perf_counter_ns() - arrived_ns, 0)
            raise
        try:
            decoupled = pinning.decoupled_steps(pin)
            if decoupled:
                raise DecoupledNotStreamed(version.model)
            if version.cache is not None and pinning.cacheable(pin):
                return await self._infer_cached(version.cache, pin, request, batch_size,
                                                arrived_ns)
            outcome = await self._execute(pin, request, batch_size, arrived_ns)
        finally:
            pinning.release(pin)
        return outcome.response

    async def _infer_cached(self, cache: CacheScope, pin: Pin[V], request: InferRequest,
                            batch_size: int, arrived_ns: int) -> InferResponse:
        """An ensemble request through the ensemble's own response cache (Triton caches
        ensembles at the top level): a hit runs no step."""
        statistics = pin.version.statistics
        lookup = await cache.lookup(request)
        if lookup.response is not None:
            cache.record_hit(statistics, lookup, arrived_ns)
            return lookup.response
        outcome = await self._execute(pin, request, batch_size, arrived_ns)
        await cache.store(lookup, outcome.response, statistics)
        return outcome.response

    async def stream(self, version: V, request: InferRequest, arrived_ns: int
                     ) -> ResponseStream:
        """Answer ``request`` to the ensemble ``version`` as a stream: one response, or, when
        its last step is a decoupled model, one per response of that step."""
        state = ensemble_state(version)
        if state.gate is not None:  # its warm-up runs again: new requests wait until it is warm
            await state.gate.wait()
        batch_size = check_request(request, version.signature)
        wanted = request.outputs or state.plan.outputs
        pin = pinning.pin_for(version, wanted, self._resolve)
        decoupled = pinning.decoupled_steps(pin)
        if not decoupled or self._stream is None:
            pinning.release(pin)
            return ResponseStream(single=self.infer(version, request, arrived_ns))
        return await self._stream_pinned(pin, request, batch_size, arrived_ns, wanted, decoupled)

    async def _stream_pinned(self, pin: Pin[V], request: InferRequest, batch_size: int,
                             arrived_ns: int, wanted: Iterable[str], decoupled: list[int]
                             ) -> ResponseStream:
        """The stream of a pinned ensemble request with a decoupled step (it owns ``pin``)."""
        state = ensemble_state(pin.version)
        limiter: StepLimiter | None = None
        try:
            deferred = _Deferred(_streamable(state.plan, decoupled))
            outcome = await self._execute(pin, request, batch_size, arrived_ns, deferred)
            assert deferred.request is not None and self._stream is not None
            step = state.plan.steps[deferred.index]
            target = pin.steps[deferred.index].version
            if state.limiters:
                limiter = state.limiters[deferred.index]
                await limiter.acquire()  # held until the step's last response
            step_stream = await self._stream(target, deferred.request)
        except BaseException:
            if limiter is not None:
                limiter.release()
            pinning.release(pin)
            raise
        ensemble_stream = ResponseStream()
        relay = asyncio.get_running_loop().create_task(self._relay(
            pin, step, step_stream, ensemble_stream, outcome, wanted, request.id, limiter))
        self._relays.add(relay)
        relay.add_done_callback(self._relays.discard)
        # The client went away: the step's request stops, its stream ends, and so the relay.
        ensemble_stream.on_abandon = step_stream.abandon
        return ensemble_stream

    async def _relay(self, pin: Pin[V], step: EnsembleStep, step_stream: ResponseStream,
                     ensemble_stream: ResponseStream, outcome: _Outcome,
                     wanted: Iterable[str], request_id: str,
                     limiter: StepLimiter | None = None) -> None:
        """Each response of the decoupled step, with the other steps' tensors, as an
        ensemble response."""
        version, plan = pin.version, ensemble_state(pin.version).plan
        tensors = {tensor.name: tensor for tensor in outcome.response.outputs}
        try:
            async for result, final in step_stream:
                if isinstance(result, InferResponse):
                    written = {tensor.name: tensor for tensor in result.outputs}
                    produced = dict(tensors)
                    for model_output, tensor in step.outputs:
                        if model_output in written:
                            produced[tensor] = _renamed(written[model_output], tensor)
                    missing = [name for name in wanted if name not in produced]
                    answer: InferResponse | InferdError | None = (
                        _step_failed(plan, step, Internal(
                            f"model '{step.model}' returned no output '{missing[0]}'"))
                        if missing else InferResponse(
                            model=version.model, version=str(version.version),
                            outputs=tuple(produced[name] for name in wanted), id=request_id))
                elif isinstance(result, InferdError):
                    answer = _step_failed(plan, step, result)
                else:
                    answer = None
                ensemble_stream.put(answer, final)
        finally:
            if limiter is not None:
                limiter.release()
            pinning.release(pin)

    async def run_warmup(self, version: V, request: InferRequest) -> None:
        """One warm-up request through every step of the ensemble ``version``, as a client's
        runs (the composing models' queues, the in-flight limits, a decoupled step's whole
        stream), but past the warm-up gate and the ensemble's response cache, and with the
        versions now served; raises what the request would get."""
        arrived_ns = time.perf_counter_ns()
        state = ensemble_state(version)
        batch_size = check_request(request, version.signature)
        pin = pinning.pin_for(version, state.plan.outputs, self._resolve)
        decoupled = pinning.decoupled_steps(pin)
        if decoupled and self._stream is not None:
            stream = await self._stream_pinned(pin, request, batch_size, arrived_ns,
                                               state.plan.outputs, decoupled)
            async for result, _ in stream:
                if isinstance(result, InferdError):
                    raise result
            return
        try:
            if decoupled:
                raise DecoupledNotStreamed(version.model)
            await self._execute(pin, request, batch_size, arrived_ns)
        finally:
            pinning.release(pin)

    def can_run(self, version: V) -> bool:
        """Whether every composing model of the ensemble ``version`` has a version to serve."""
        try:
            self.check_ready(version)
        except InferdError:
            return False
        return True

    def check_ready(self, version: V) -> None:
        """Raise the error a request to ``version`` would get because a composing model has
        no READY version (for model readiness)."""
        pinning.release(pinning.pin(version, ensemble_state(version).plan.outputs,
                                    frozenset({version.model}), self._resolve))

    # ------------------------------------------------------------------ the dataflow

    async def _execute(
        self, pin: Pin[V], request: InferRequest, batch_size: int, arrived_ns: int,
        deferred: _Deferred | None = None,
    ) -> _Outcome:
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
        running: dict[asyncio.Task[_Outcome], EnsembleStep] = {}

        def settle(
            step: EnsembleStep, outcome: _Outcome | None, error: BaseException | None
        ) -> None:
            nonlocal queue_ns
            pinning.release(pin.steps[step.index])
            if error is not None:
                failures.append(_step_failed(plan, step, error))
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
        return _Outcome(response, queue_ns, compute)

    async def _run_step(
        self,
        pin: Pin[V],
        step: EnsembleStep,
        request: InferRequest,
        tensors: dict[str, Tensor],
        flow: Dataflow,
        deferred: _Deferred | None = None,
        limiter: StepLimiter | None = None,
    ) -> _Outcome:
        """Send one step to its pinned version and store what it writes in ``tensors`` (the
        ``deferred`` step's request is only kept). Under ``max_inflight_requests`` it waits
        for one of the step's slots first and holds it until the step is answered."""
        target = pin.steps[step.index]
        step_request = InferRequest(
            model=step.model,
            inputs=tuple(
                _renamed(tensors[tensor], model_input)
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
            return _Outcome(empty, 0, (0, 0, 0))
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
                tensors[tensor] = _renamed(written[model_output], tensor)
        except BaseException:
            statistics.record_answer(False, time.perf_counter_ns() - started_ns, 0)
            raise
        statistics.record_answer(True, time.perf_counter_ns() - started_ns, outcome.queue_ns)
        statistics.record_compute(outcome.compute_ns)
        return outcome

    async def _send(self, target: Pin[V], request: InferRequest, started_ns: int) -> _Outcome:
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
                         ) -> _Outcome:
        if target.version.ensemble is not None:  # a nested ensemble runs right here
            batch_size = check_request(request, target.version.signature)
            return await self._execute(target, request, batch_size, started_ns)
        queued = await self._infer(target.version, request, started_ns)
        result = queued.result
        if not isinstance(result, InferResponse):
            raise result if isinstance(result, InferdError) else Internal("step got no answer")
        return _Outcome(result, queued.started_ns - queued.enqueued_ns, queued.compute_ns)

def _streamable(plan: EnsemblePlan, decoupled: list[int]) -> int:
    """The one decoupled step an ensemble can be streamed through: its outputs feed no other
    step (so each of its responses is an ensemble response)."""
    step = plan.steps[decoupled[0]]
    written = {tensor for _, tensor in step.outputs}
    feeds = any(tensor in written for other in plan.steps if other is not step
                for _, tensor in other.inputs)
    if len(decoupled) > 1 or feeds:
        raise Unsupported(
            f"in ensemble '{plan.name}', step '{step.model}' is decoupled: inferd streams an "
            "ensemble through one decoupled step whose outputs are the ensemble's own")
    return decoupled[0]


def _renamed(tensor: Tensor, name: str) -> Tensor:
    # The same array under another name: intermediate tensors are never copied.
    if tensor.name == name:
        return tensor
    return Tensor(name, tensor.datatype, tensor.shape, tensor.data)


def _step_failed(plan: EnsemblePlan, step: EnsembleStep, error: BaseException) -> InferdError:
    if isinstance(error, InferdError):
        code, message = error.code, error.message
    else:
        code, message = Internal.code, f"{type(error).__name__}: {error}"
    return InferdError.from_code(
        code, f"in ensemble '{plan.name}', step '{step.model}' failed: {message}"
    )
