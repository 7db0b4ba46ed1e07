"""Ensemble execution inside the scheduler: one request's dataflow through composing models.

Owns running an ``InferRequest`` addressed to an ensemble version (SPEC 4.1, 4.3): it is
checked against the ensemble's inputs; the version of every step it needs is fixed when it
starts (``inferd.kernel.actors.scheduler.ensembles.pinning``); its steps then run through the
composing models' own queues (``steps``: each as soon as the tensors it reads exist, under
``max_inflight_requests``, with the ensemble's statistics and their per-step breakdown, kept in
``inferd.kernel.actors.scheduler.ensembles.served``); the answer holds the requested ensemble
outputs. An ensemble whose last step is a decoupled model is answered as a stream: the other
steps run once, then every response of the decoupled step becomes an ensemble response. An
ensemble with the response cache is cached at the top level, as in Triton: a hit runs no step
(unless a step is a decoupled or sequence model: then it is not cached). While the ensemble
warms up again (``warming``) new requests wait at its gate, and ``run_warmup`` runs a warm-up
request past it. It never talks to executors or control: the scheduler gives it the way to
resolve a model to a served version, to run a request on one and to open a stream on one; the
plan comes from ``inferd.kernel.actors.scheduler.ensembles.planning``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from inferd.kernel.actors.scheduler.ensembles import pinning
from inferd.kernel.actors.scheduler.ensembles.inflight import StepLimiter
from inferd.kernel.actors.scheduler.ensembles.pinning import Pin
from inferd.kernel.actors.scheduler.ensembles.planning import EnsemblePlan, EnsembleStep
from inferd.kernel.actors.scheduler.ensembles.served import (
    QueuedRequest,
    ServedVersion,
    ensemble_state,
)
from inferd.kernel.actors.scheduler.ensembles.steps import (
    Deferred,
    EnsembleSteps,
    Outcome,
    renamed,
    step_failed,
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
from inferd.protocols.messages import InferRequest, InferResponse

V = TypeVar("V", bound=ServedVersion)


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
        self._steps = EnsembleSteps(infer)
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
            outcome = await self._steps.execute(pin, request, batch_size, arrived_ns)
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
        outcome = await self._steps.execute(pin, request, batch_size, arrived_ns)
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
            deferred = Deferred(_streamable(state.plan, decoupled))
            outcome = await self._steps.execute(pin, request, batch_size, arrived_ns, deferred)
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
                     ensemble_stream: ResponseStream, outcome: Outcome,
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
                            produced[tensor] = renamed(written[model_output], tensor)
                    missing = [name for name in wanted if name not in produced]
                    answer: InferResponse | InferdError | None = (
                        step_failed(plan, step, Internal(
                            f"model '{step.model}' returned no output '{missing[0]}'"))
                        if missing else InferResponse(
                            model=version.model, version=str(version.version),
                            outputs=tuple(produced[name] for name in wanted), id=request_id))
                elif isinstance(result, InferdError):
                    answer = step_failed(plan, step, result)
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
            await self._steps.execute(pin, request, batch_size, arrived_ns)
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

