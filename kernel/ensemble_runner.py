"""Ensemble execution inside the scheduler: one request's dataflow through composing models.

Owns running an ``InferRequest`` addressed to an ensemble version (SPEC 4.1, 4.3): it is
checked against the ensemble's inputs; the version of every step it needs is fixed when it
starts (pinned: a version being retired waits until the requests that chose it are done with
it); each step becomes an ``InferRequest`` that goes through the composing model's own queue
(the scheduler's request path, so it batches with other traffic) as soon as the tensors it
reads exist; intermediate tensors are handed on as the same numpy arrays; the answer holds the
requested ensemble outputs. An ensemble whose last step is a decoupled model is answered as a
stream: the other steps run once, then every response of the decoupled step becomes an
ensemble response. An ensemble with the response cache is cached at the top level, as in
Triton: a hit runs no step (unless a step is a decoupled or sequence model: then it is not
cached). It also owns the ensemble's statistics with their per-step breakdown. It
never talks to executors or control: the scheduler gives it the way to resolve a model to a
served version, to run a request on one and to open a stream on one; the plan comes from
``inferd.kernel.ensemble``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.ensemble import Dataflow, EnsemblePlan, EnsembleStep
from inferd.kernel.config_validation import ENSEMBLE_PLATFORM
from inferd.kernel.response_cache import CacheScope
from inferd.kernel.statistics import COMPUTE_PHASES, Duration, VersionStatistics
from inferd.kernel.request_validation import ModelSignature, check_request
from inferd.kernel.streams import ResponseStream
from inferd.kernel.tracing import CURRENT
from inferd.protocols.errors import (
    DecoupledNotStreamed,
    InferdError,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unsupported,
)
from inferd.protocols.messages import InferRequest, InferResponse, Tensor

STEPS_KEY = "ensemble_steps"
"""The key of the per-step breakdown in an ensemble's statistics (an inferd extension:
tritonclient's gRPC conversion drops it, JSON readers ignore it)."""


@dataclass(slots=True)
class StepStatistics:
    """One step's requests on one version of its model, as the ensemble saw them: ``success``
    and ``fail`` hold the step's whole time (queue, compute and transfers); ``queue`` and
    ``compute_*`` what the composing model reported for it."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)

    def record(
        self, ok: bool, total_ns: int, queue_ns: int, compute_ns: tuple[int, int, int]
    ) -> None:
        if not ok:
            self.fail.add(total_ns)
            return
        self.success.add(total_ns)
        self.queue.add(queue_ns)
        for phase, ns in zip(COMPUTE_PHASES, compute_ns, strict=True):
            getattr(self, phase).add(ns)


@dataclass(eq=False, slots=True)
class EnsembleState:
    """What the scheduler keeps for a served ensemble version: its plan, and statistics per
    (step index, composing model, version); a reload gets a new state sharing the counters,
    while requests in flight finish with the plan they started with."""

    plan: EnsemblePlan
    steps: dict[tuple[int, str, int], StepStatistics] = field(default_factory=dict)

    @classmethod
    def for_config(
        cls, config: ModelConfig, previous: EnsembleState | None
    ) -> EnsembleState | None:
        """The state of a served version with ``config`` (None unless it is an ensemble),
        counting on from ``previous``. ``InvalidArgument`` for a graph that cannot run."""
        if config.platform != ENSEMBLE_PLATFORM:
            return None
        return cls(EnsemblePlan.from_config(config), previous.steps if previous else {})

    def step_statistics(self, step: EnsembleStep, version: int) -> StepStatistics:
        key = (step.index, step.model, version)
        found = self.steps.get(key)
        if found is None:
            found = self.steps[key] = StepStatistics()
        return found

    def as_dicts(self) -> list[dict[str, Any]]:
        return [
            {
                "step": index,
                "model": model,
                "version": str(version),
                "success": stats.success.as_dict(),
                "fail": stats.fail.as_dict(),
                "queue": stats.queue.as_dict(),
                **{phase: getattr(stats, phase).as_dict() for phase in COMPUTE_PHASES},
            }
            for (index, model, version), stats in sorted(self.steps.items())
        ]


class ServedVersion(Protocol):
    """What the runner needs of the scheduler's record of a served version."""

    model: str
    version: int
    pinned: int  # requests that fixed this version and still need it
    signature: ModelSignature
    statistics: VersionStatistics
    ensemble: EnsembleState | None
    decoupled: bool
    cache: CacheScope | None  # its response cache, when its responses are cached

    @property
    def sequences(self) -> object:  # a sequence model's batcher, else None
        ...


class QueuedRequest(Protocol):
    """What the scheduler's request path returns for a request it answered."""

    result: InferResponse | InferdError | None
    enqueued_ns: int
    started_ns: int
    compute_ns: tuple[int, int, int]


V = TypeVar("V", bound=ServedVersion)


def statistics_dict(version: ServedVersion) -> dict[str, Any]:
    """A version's statistics as Triton prints them, plus the per-step breakdown of an
    ensemble under ``STEPS_KEY``."""
    printed = version.statistics.as_dict(version.model, str(version.version))
    if version.ensemble is not None:
        printed[STEPS_KEY] = version.ensemble.as_dicts()
    return printed


@dataclass(eq=False, slots=True)
class _Pin(Generic[V]):
    """A version fixed for one request; for an ensemble, also the versions of its steps."""

    version: V
    steps: dict[int, _Pin[V]] = field(default_factory=dict)
    released: bool = False


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
        trace = CURRENT.get()
        if trace is None:
            return await self._infer_ensemble(version, request, arrived_ns)
        trace.request_started(version.model, version.version, request, arrived_ns)
        response = await self._infer_ensemble(version, request, arrived_ns)
        trace.request_finished(0, (0, 0, 0), response)
        return response

    async def _infer_ensemble(self, version: V, request: InferRequest, arrived_ns: int
                              ) -> InferResponse:
        state = _state(version)
        batch_size = check_request(request, version.signature)
        wanted = request.outputs or state.plan.outputs
        try:
            pin = self._pin_for(version, wanted)
        except InferdError:
            version.statistics.record_request(False, time.perf_counter_ns() - arrived_ns, 0)
            raise
        try:
            decoupled = _decoupled_steps(pin)
            if decoupled:
                raise DecoupledNotStreamed(version.model)
            if version.cache is not None and _cacheable(pin):
                return await self._infer_cached(version.cache, pin, request, batch_size,
                                                arrived_ns)
            outcome = await self._execute(pin, request, batch_size, arrived_ns)
        finally:
            self._release(pin)
        return outcome.response

    async def _infer_cached(self, cache: CacheScope, pin: _Pin[V], request: InferRequest,
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
        state = _state(version)
        batch_size = check_request(request, version.signature)
        wanted = request.outputs or state.plan.outputs
        pin = self._pin_for(version, wanted)
        decoupled = _decoupled_steps(pin)
        if not decoupled or self._stream is None:
            self._release(pin)
            return ResponseStream(single=self.infer(version, request, arrived_ns))
        try:
            deferred = _Deferred(_streamable(state.plan, decoupled))
            outcome = await self._execute(pin, request, batch_size, arrived_ns, deferred)
            assert deferred.request is not None
            step = state.plan.steps[deferred.index]
            target = pin.steps[deferred.index].version
            step_stream = await self._stream(target, deferred.request)
        except BaseException:
            self._release(pin)
            raise
        ensemble_stream = ResponseStream()
        relay = asyncio.get_running_loop().create_task(self._relay(
            pin, step, step_stream, ensemble_stream, outcome, wanted, request.id))
        self._relays.add(relay)
        relay.add_done_callback(self._relays.discard)
        return ensemble_stream

    async def _relay(self, pin: _Pin[V], step: EnsembleStep, step_stream: ResponseStream,
                     ensemble_stream: ResponseStream, outcome: _Outcome,
                     wanted: Iterable[str], request_id: str) -> None:
        """Each response of the decoupled step, with the other steps' tensors, as an
        ensemble response."""
        version, plan = pin.version, _state(pin.version).plan
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
            self._release(pin)

    def check_ready(self, version: V) -> None:
        """Raise the error a request to ``version`` would get because a composing model has
        no READY version (for model readiness)."""
        self._release(self._pin(version, _state(version).plan.outputs, frozenset({version.model})))

    # ------------------------------------------------------------------ versions

    def _pin_for(self, version: V, wanted: Iterable[str]) -> _Pin[V]:
        """``_pin`` for a request to the ensemble ``version``: a step with no version to
        serve is the ensemble's own unavailability, and the answer names the ensemble (as
        Triton's does), keeping the cause of one that is reloading."""
        try:
            return self._pin(version, wanted, frozenset({version.model}))
        except NotFound:
            raise NotFound(f"Request for unknown model: '{version.model}' has no available "
                           "versions") from None
        except Unavailable as error:
            raise Unavailable(f"model '{version.model}' is not available: {error.message}"
                              ) from None

    def _pin(self, version: V, wanted: Iterable[str], visiting: frozenset[str]) -> _Pin[V]:
        plan = _state(version).plan
        pin: _Pin[V] = _Pin(version)
        version.pinned += 1
        try:
            for index in sorted(plan.steps_for(wanted)):
                step = plan.steps[index]
                if step.model in visiting:
                    raise InvalidArgument(
                        f"in ensemble '{plan.name}', {step.label} uses an ensemble that contains it"
                    )
                target = self._resolve(step.model, "" if step.version < 0 else str(step.version))
                if target.ensemble is not None:
                    nested_wanted = [name for name, _ in step.outputs]
                    pin.steps[index] = self._pin(target, nested_wanted, visiting | {step.model})
                else:
                    target.pinned += 1
                    pin.steps[index] = _Pin(target)
        except BaseException:
            self._release(pin)
            raise
        return pin

    def _release(self, pin: _Pin[V]) -> None:
        if pin.released:
            return
        pin.released = True
        pin.version.pinned -= 1
        for step_pin in pin.steps.values():
            self._release(step_pin)

    # ------------------------------------------------------------------ the dataflow

    async def _execute(
        self, pin: _Pin[V], request: InferRequest, batch_size: int, arrived_ns: int,
        deferred: _Deferred | None = None,
    ) -> _Outcome:
        """Run the steps of the pinned ensemble for ``request`` (already checked) and record
        the ensemble's statistics. A ``deferred`` step is not sent: its request is kept
        there, and the outcome holds every tensor the other steps made."""
        version = pin.version
        plan = _state(version).plan
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
            self._release(pin.steps[step.index])
            if error is not None:
                failures.append(_step_failed(plan, step, error))
                return
            assert outcome is not None
            queue_ns += outcome.queue_ns
            for phase, ns in enumerate(outcome.compute_ns):
                compute_ns[phase] += ns
            flow.finished(step)

        ready = flow.take_ready()
        while ready or running:
            if len(ready) == 1 and not running:
                # A step with nothing beside it runs in this task: a chain spawns no task.
                step = ready[0]
                try:
                    outcome = await self._run_step(pin, step, request, tensors, flow, deferred)
                except Exception as error:  # noqa: BLE001 - a failed step fails the request
                    settle(step, None, error)
                else:
                    settle(step, outcome, None)
            else:
                for step in ready:
                    coroutine = self._run_step(pin, step, request, tensors, flow, deferred)
                    running[asyncio.get_running_loop().create_task(coroutine)] = step
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    failed = task.exception()
                    settle(running.pop(task), None if failed else task.result(), failed)
            # After a failure no step starts; the running ones finish (their batches hold
            # other requests too) and their results are collected.
            ready = [] if failures else flow.take_ready()
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
        pin: _Pin[V],
        step: EnsembleStep,
        request: InferRequest,
        tensors: dict[str, Tensor],
        flow: Dataflow,
        deferred: _Deferred | None = None,
    ) -> _Outcome:
        """Send one step to its pinned version and store what it writes in ``tensors`` (the
        ``deferred`` step's request is only kept)."""
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
        statistics = _state(pin.version).step_statistics(step, target.version.version)
        started_ns = time.perf_counter_ns()
        try:
            outcome = await self._send(target, step_request, started_ns)
            written = {tensor.name: tensor for tensor in outcome.response.outputs}
            for model_output, tensor in step.outputs:
                if model_output not in written:
                    raise Internal(f"model '{step.model}' returned no output '{model_output}'")
                tensors[tensor] = _renamed(written[model_output], tensor)
        except BaseException:
            statistics.record(False, time.perf_counter_ns() - started_ns, 0, (0, 0, 0))
            raise
        statistics.record(
            True, time.perf_counter_ns() - started_ns, outcome.queue_ns, outcome.compute_ns
        )
        return outcome

    async def _send(self, target: _Pin[V], request: InferRequest, started_ns: int) -> _Outcome:
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

    async def _send_step(self, target: _Pin[V], request: InferRequest, started_ns: int
                         ) -> _Outcome:
        if target.version.ensemble is not None:  # a nested ensemble runs right here
            batch_size = check_request(request, target.version.signature)
            return await self._execute(target, request, batch_size, started_ns)
        queued = await self._infer(target.version, request, started_ns)
        result = queued.result
        if not isinstance(result, InferResponse):
            raise result if isinstance(result, InferdError) else Internal("step got no answer")
        return _Outcome(result, queued.started_ns - queued.enqueued_ns, queued.compute_ns)


def _cacheable(pin: _Pin[Any]) -> bool:
    """Whether every model a pinned ensemble runs (nested ones included) could be cached:
    as in Triton, a decoupled or sequence model in it keeps the ensemble uncached."""
    for step_pin in pin.steps.values():
        target = step_pin.version
        if target.ensemble is not None:
            if not _cacheable(step_pin):
                return False
        elif target.decoupled or target.sequences is not None:
            return False
    return True


def _decoupled_steps(pin: _Pin[Any]) -> list[int]:
    """The steps of a pinned ensemble (not of nested ones) that run a decoupled model."""
    return [index for index, step_pin in pin.steps.items()
            if step_pin.version.ensemble is None and step_pin.version.decoupled]


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


def _state(version: ServedVersion) -> EnsembleState:
    if version.ensemble is None:
        raise Internal(f"model '{version.model}' is not an ensemble")
    return version.ensemble


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
