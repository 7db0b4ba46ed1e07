"""The scheduler actor: the inference path from a validated request to an instance and back.

It owns, per served model version, the request queue, the instances it may use (executor
address and instance id, as control reported them), the dynamic batching policy and the
statistics. A request is resolved to a version (highest served one when none is given),
checked against the version's signature, queued, and sent in a batch to a free instance; the
batch's results are handed back per request. Control tells it which versions to serve
(``ServeVersion``, which also swaps instances on reload) and which to retire (``RetireVersion``,
answered once in-flight work is done). A request to an ensemble is handed to the
``EnsembleRunner``, which runs each step as a request through the composing model's own queue
here, so ensemble steps batch with other traffic. A sequence model's requests go through its
``SequenceBatcher`` instead of the queue (one batch per instance at a time, each sequence
bound to a slot of one instance). A decoupled model's requests are answered through a
``ResponseStream``: its instance sends each response as ``StreamParts`` under the request's
token. A version whose config enables the response cache (on a server with one) is answered
from it before any queue on a hit (``inferd.kernel.response_cache``). It never loads models
and never touches the repository.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actor import Actor
from inferd.kernel.addresses import SCHEDULER
from inferd.kernel.batcher import DynamicBatcher
from inferd.kernel.classification import Labels, classify, read_labels
from inferd.kernel.ensembles.running import EnsembleRunner
from inferd.kernel.ensembles.served import EnsembleState, statistics_dict
from inferd.kernel.latency_summary import LatencySummaries
from inferd.kernel.metrics_config import MetricsConfig
from inferd.kernel.modelconfig import config_to_json_text
from inferd.kernel.queue_policy import (
    TIMEOUT_MESSAGE,
    PriorityQueue,
    QueuePolicy,
    queue_full_message,
)
from inferd.kernel.response_cache import CacheScope, ResponseCache, cache_samples, scope_for
from inferd.kernel.response_order import ResponseOrder
from inferd.kernel.router import Router
from inferd.kernel.sequence_batcher import SequenceBatch, SequenceBatcher
from inferd.kernel.sequence_plan import SequencePlan
from inferd.kernel.statistics import COMPUTE_PHASES, VersionStatistics
from inferd.kernel.streams import ResponseStream
from inferd.kernel.tracing import CURRENT, Trace
from inferd.kernel.request_validation import ModelSignature, check_request
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    DecoupledNotStreamed,
    InferdError,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from inferd.protocols.messages import (
    Ack,
    BatchResult,
    Drain,
    Envelope,
    Failure,
    HealthStatus,
    InferBatch,
    InferRequest,
    InferResponse,
    Message,
    Metrics,
    MetricsRequest,
    ModelConfigReply,
    ModelConfigRequest,
    ModelKnown,
    ModelMetadata,
    ModelMetadataRequest,
    ModelReadyRequest,
    RemoteStreamRequest,
    RetireVersion,
    ServeVersion,
    Statistics,
    StatisticsRequest,
    StreamBatch,
    StreamInferRequest,
    StreamParts,
)

log = logging.getLogger(__name__)

IDLE_POLL_SECS = 0.01
# An instance gets its next batch while it still runs one: the executor queues it behind the
# running one (never running both at once), so the instance is not idle for the round trip
# between the processes. Only a batch that cannot grow goes early, though (a model without
# dynamic batching, or a full batch): any other waits here, where requests arriving while the
# instance is busy still join it. Deeper would only make requests wait in the executor. Under a
# queue policy nothing goes early (QueuePolicy.prefetch), as in Triton.
BATCHES_IN_FLIGHT_PER_INSTANCE = 2


@dataclass(eq=False, slots=True)
class _Slot:
    executor: str
    instance: int
    in_flight: int = 0  # batches sent to the instance and not answered yet


@dataclass(eq=False, slots=True)
class _Queued:
    request: InferRequest
    batch_size: int
    shape_key: tuple[tuple[int, ...], ...]
    enqueued_ns: int
    # asyncio's own event: anyio's looks up the running backend on every construction, and
    # the kernel runs on asyncio only.
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: InferResponse | InferdError | None = None
    started_ns: int = 0
    compute_ns: tuple[int, int, int] = (0, 0, 0)
    compute_started_ns: int = 0  # when its instance began its batch (the executor's clock)
    level: int = 0  # priority level: lower goes first
    stream: ResponseStream | None = None  # a decoupled model's request: its responses go here
    failed: bool = False  # a decoupled request answered with an error on the way
    executor: str = ""  # where a decoupled request runs (its stream ends if that one restarts)
    trace: Trace | None = None  # a traced decoupled request (its stream ends the request)
    reason: str = ""  # why it failed, when the scheduler knows better than failure_reason()


@dataclass(eq=False, slots=True)
class _Version:
    model: str
    version: int
    config: ModelConfig
    signature: ModelSignature
    batcher: DynamicBatcher
    plan: QueuePolicy
    slots: list[_Slot]
    queue: PriorityQueue[_Queued] = field(init=False)
    # preserve_ordering: where each request sent to an instance stands in the response order
    order: ResponseOrder[_Queued, InferResponse | InferdError | None] = field(
        default_factory=ResponseOrder)
    running: int = 0  # batches sent to instances and not answered
    in_service: int = 0  # requests in those batches
    retired: bool = False
    statistics: VersionStatistics = field(default_factory=VersionStatistics)
    wake_ns: int = 0  # when the pump is next woken (monotonic ns), 0: not planned
    pumping: bool = False  # _pump is running: a batch finishing meanwhile leaves it to it
    pinned: int = 0  # ensemble requests that fixed this version and still need it
    ensemble: EnsembleState | None = None  # set for an ensemble, served without instances
    sequences: SequenceBatcher[_Queued] | None = None  # set for a sequence model
    decoupled: bool = False  # model_transaction_policy { decoupled: true }
    labels: Labels = field(default_factory=dict)  # the outputs' label_filename contents
    cache: CacheScope | None = None  # response_cache { enable: true } on a server with a cache

    def classified(self, request: InferRequest, response: InferResponse) -> InferResponse:
        """``response`` with the outputs ``request`` asks classes of as their top classes."""
        if not request.classification:
            return response
        return classify(response, request.classification, self.labels,
                        batched=self.config.max_batch_size > 0)

    def __post_init__(self) -> None:
        self.queue = PriorityQueue(self.plan)

    def busy(self) -> bool:
        """Whether requests are queued, running or still to come for an ensemble."""
        waiting = self.sequences.pending() if self.sequences is not None else 0
        return bool(self.queue or self.running or self.pinned or waiting)


def _batch_started(version: _Version, slot: _Slot, batch: list[_Queued]) -> None:
    slot.in_flight += 1
    version.running += 1
    version.in_service += len(batch)
    started_ns = time.perf_counter_ns()
    for queued in batch:
        queued.started_ns = started_ns


def _batch_finished(version: _Version, slot: _Slot, count: int) -> None:
    slot.in_flight -= 1
    version.running -= 1
    version.in_service -= count


def failure_reason(queued: _Queued) -> str:
    """Triton's ``reason`` label of a failed request: a request an instance had (its backend
    failed, or its executor died) is BACKEND; REJECTED (queue full, queue timeout) and
    CANCELED are set where they happen; anything else (unload, shutdown) is OTHER."""
    return queued.reason or ("BACKEND" if queued.started_ns else "OTHER")


def _load_of(slot: _Slot) -> int:
    return slot.in_flight


def _hand(queued: _Queued, result: InferResponse | InferdError | None, final: bool) -> None:
    """Give ``queued`` its answer: to its stream (a decoupled request) or its waiting task."""
    if queued.stream is not None:
        queued.stream.put(result, final)
        return
    queued.result = result
    queued.done.set()


def _sequences(config: ModelConfig, path: str, slots: list[_Slot],
               current: SequenceBatcher[_Queued] | None) -> SequenceBatcher[_Queued] | None:
    """The sequence batcher of a sequence model: the current one while its instance count
    holds (its sequences and their state live on), else a new one."""
    if not config.HasField("sequence_batching"):
        return None
    if current is not None and current.instances == len(slots):
        return current
    return SequenceBatcher(SequencePlan.of(config, Path(path) if path else None), len(slots))


def _batcher(config: ModelConfig) -> DynamicBatcher:
    dynamic = config.dynamic_batching
    return DynamicBatcher(
        max_batch_size=int(config.max_batch_size),
        preferred_batch_sizes=tuple(int(s) for s in dynamic.preferred_batch_size),
        max_queue_delay_ns=int(dynamic.max_queue_delay_microseconds) * 1000,
        enabled=config.HasField("dynamic_batching") and config.max_batch_size > 0,
    )


class SchedulerActor(Actor):
    address = SCHEDULER
    # A frontend's request runs in its own task (Router.call).
    DIRECT = (InferRequest, StreamInferRequest)

    def __init__(self, router: Router, cache: ResponseCache | None = None,
                 metrics: MetricsConfig | None = None) -> None:
        super().__init__(router)
        self._cache = cache
        self._metrics = metrics if metrics is not None else MetricsConfig()
        self._served: dict[str, dict[int, _Version]] = {}
        self._ever_served: dict[str, set[int]] = {}
        # Versions retired because their executor died, until they serve again: the reason.
        self._reloading: dict[str, dict[int, str]] = {}
        self._closed = False
        self._ensembles = EnsembleRunner(self._resolve, self._infer_on, self._open_stream)
        self._streams: dict[int, tuple[_Version, _Queued]] = {}  # by token: decoupled requests
        self._tokens = itertools.count(1)

    # ------------------------------------------------------------------ routing table

    async def on_serve_version(self, message: ServeVersion, envelope: Envelope) -> Ack:
        config = ModelConfig()
        config.ParseFromString(message.config)
        slots = [_Slot(executor, instance) for executor, instance in message.instances]
        versions = self._served.setdefault(message.model, {})
        current = versions.get(message.version)
        if message.config_only and current is not None and not current.retired:
            current.config = config  # the same instances: only its version policy changed
            return Ack()
        ensemble = EnsembleState.for_config(config, current.ensemble if current else None)
        replaced: list[_Slot] = []
        if current is not None and not current.retired:
            replaced, current.slots = current.slots, slots
            current.config, current.signature = config, ModelSignature.from_config(config)
            current.batcher, current.plan = _batcher(config), QueuePolicy.of(config)
            current.queue = current.queue.rebuilt(current.plan)
        else:
            versions[message.version] = current = _Version(
                message.model,
                message.version,
                config,
                ModelSignature.from_config(config),
                _batcher(config),
                QueuePolicy.of(config),
                slots,
            )
            if self._metrics.summary_latencies:
                current.statistics.summaries = LatencySummaries(self._metrics.summary_quantiles)
        current.ensemble = ensemble
        current.sequences = _sequences(config, message.path, slots, current.sequences)
        current.decoupled = config.model_transaction_policy.decoupled
        current.labels = read_labels(config, Path(message.path)) if message.path else {}
        current.cache = scope_for(self._cache, message.model, message.version, config)
        self._reloading.get(message.model, {}).pop(message.version, None)
        if replaced:  # a restarted executor's instances: its streams will not go on
            self._fail_streams(current, Unavailable("the model's executor was restarted"),
                               {slot.executor for slot in replaced})
        self._ever_served.setdefault(message.model, set()).add(message.version)
        self._pump(current)
        while any(slot.in_flight for slot in replaced):
            await anyio.sleep(IDLE_POLL_SECS)
        return Ack()

    async def on_model_known(self, message: ModelKnown, envelope: Envelope) -> None:
        self._ever_served.setdefault(message.model, set())
        self._reloading.pop(message.model, None)  # its reload failed: it is not coming back

    async def on_retire_version(self, message: RetireVersion, envelope: Envelope) -> Ack:
        version = self._served.get(message.model, {}).get(message.version)
        reloading = self._reloading.setdefault(message.model, {})
        if message.reloading:
            reloading[message.version] = message.reloading
        else:
            reloading.pop(message.version, None)
        if version is None:
            return Ack()
        version.retired = True
        while version.busy():
            await anyio.sleep(IDLE_POLL_SECS)
        versions = self._served[message.model]
        if versions.get(message.version) is version:
            del versions[message.version]
        self._fail_streams(version, Unavailable(f"model '{message.model}' was unloaded"))
        return Ack()

    async def on_drain(self, message: Drain, envelope: Envelope) -> Ack:
        """Shutdown: wait (bounded) for the queues to empty, then refuse what is left and
        everything new, so no request is sent to an executor about to unload its models."""
        with anyio.move_on_after(message.timeout):
            while any(v.busy() for vs in self._served.values() for v in vs.values()):
                await anyio.sleep(IDLE_POLL_SECS)
        self._closed = True
        for versions in self._served.values():
            for version in versions.values():
                left = version.queue.drain()
                if version.sequences is not None:
                    left += version.sequences.drain()
                for queued in left:
                    _hand(queued, Unavailable(SHUTTING_DOWN), True)
        return Ack()

    def _resolve(self, model: str, version: str) -> _Version:
        versions = self._served.get(model)
        if not versions and model not in self._ever_served:
            raise NotFound(f"Request for unknown model: '{model}' is not found")
        live = {n: v for n, v in (versions or {}).items() if not v.retired}
        if not version:
            if not live:
                self._raise_if_reloading(model, None)
                raise NotFound(f"Request for unknown model: '{model}' has no available versions")
            return live[max(live)]
        try:
            number = int(version)
        except ValueError:
            raise InvalidArgument(
                f"failed to parse version '{version}' of model '{model}': not an integer"
            ) from None
        if number in live:
            return live[number]
        self._raise_if_reloading(model, number)
        if number in self._ever_served.get(model, ()):
            raise Unavailable(
                f"Request for unknown model: '{model}' version {number} is not at ready state"
            )
        raise NotFound(f"Request for unknown model: '{model}' version {number} is not found")

    def _raise_if_reloading(self, model: str, number: int | None) -> None:
        """A version whose executor died is being loaded again: say so, retryable (503)."""
        reloading = self._reloading.get(model)
        if not reloading:
            return
        reason = reloading.get(number) if number is not None else reloading[max(reloading)]
        if reason:
            raise Unavailable(f"model '{model}' is being reloaded: {reason}; retry the request")

    # ------------------------------------------------------------------ model information

    async def on_model_ready_request(
        self, message: ModelReadyRequest, envelope: Envelope
    ) -> HealthStatus:
        try:
            version = self._resolve(message.model, message.version)
            if version.ensemble is not None:
                self._ensembles.check_ready(version)
        except InferdError:
            return HealthStatus(False)
        return HealthStatus(True)

    async def on_model_metadata_request(
        self, message: ModelMetadataRequest, envelope: Envelope
    ) -> ModelMetadata:
        version = self._resolve(message.model, message.version)
        live = sorted(n for n, v in self._served[message.model].items() if not v.retired)
        config, signature = version.config, version.signature
        return ModelMetadata(
            name=message.model,
            versions=tuple(str(n) for n in live),
            platform=config.platform or config.backend,
            inputs=signature.metadata(signature.inputs),
            outputs=signature.metadata(signature.outputs),
        )

    async def on_model_config_request(
        self, message: ModelConfigRequest, envelope: Envelope
    ) -> ModelConfigReply:
        version = self._resolve(message.model, message.version)
        return ModelConfigReply(config_to_json_text(version.config))

    async def on_statistics_request(
        self, message: StatisticsRequest, envelope: Envelope
    ) -> Statistics:
        if not message.model:
            chosen = [v for vs in self._served.values() for v in vs.values()]
        else:
            if not self._ever_served.get(message.model):
                raise InvalidArgument(f"requested model '{message.model}' is not available")
            versions = self._served.get(message.model, {})
            if message.version:
                chosen = [v for n, v in versions.items() if str(n) == message.version]
                if not chosen:
                    raise InvalidArgument(
                        f"requested model '{message.model}' version {message.version} is not"
                        " available"
                    )
            else:
                chosen = list(versions.values())
        chosen.sort(key=lambda v: (v.model, v.version))
        return Statistics(tuple(statistics_dict(v) for v in chosen))

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        samples: list[tuple[str, dict[str, str], float]] = []
        now = time.monotonic()
        for versions in self._served.values():
            for version in versions.values():
                labels = {"model": version.model, "version": str(version.version)}
                stats = version.statistics
                pending = len(version.queue) + version.in_service + (
                    version.sequences.pending() if version.sequences else 0)
                samples += [
                    ("nv_inference_request_success", labels, stats.success.count),
                    *(("nv_inference_request_failure", {**labels, "reason": reason}, count)
                      for reason, count in stats.failures.items()),
                    ("nv_inference_count", labels, stats.inference_count),
                    ("nv_inference_exec_count", labels, stats.execution_count),
                    ("nv_inference_pending_request_count", labels, pending),
                ]
                if self._metrics.counter_latencies:
                    samples += [
                        ("nv_inference_request_duration_us", labels,
                         (stats.success.ns + stats.fail.ns) // 1000),
                        ("nv_inference_queue_duration_us", labels, stats.queue.ns // 1000),
                        *((f"nv_inference_{phase}_duration_us", labels,
                           getattr(stats, phase).ns // 1000) for phase in COMPUTE_PHASES),
                    ]
                if stats.summaries is not None:
                    samples += stats.summaries.samples(labels, now, version.cache is not None)
                if version.cache is not None and self._metrics.counter_latencies:
                    samples += cache_samples(labels, stats)  # Triton's: latency counters
        if self._cache is not None:
            samples += self._cache.metrics()
        return Metrics(tuple(samples))

    # ------------------------------------------------------------------ inference

    async def on_infer_request(
        self, request: InferRequest, envelope: Envelope | None
    ) -> InferResponse:
        arrived_ns = time.perf_counter_ns()
        if self._closed:
            raise Unavailable(SHUTTING_DOWN)
        version = self._resolve(request.model, request.version)
        if version.ensemble is not None:
            response = await self._ensembles.infer(version, request, arrived_ns)
            return version.classified(request, response)
        queued = await self._infer_on(version, request, arrived_ns)
        assert isinstance(queued.result, InferResponse)
        return version.classified(request, queued.result)

    async def on_stream_infer_request(
        self, message: StreamInferRequest, envelope: Envelope | None
    ) -> ResponseStream:
        """The responses to a request, as a stream: one for a model that is not decoupled,
        any number for one that is."""
        request = message.request
        if self._closed:
            raise Unavailable(SHUTTING_DOWN)
        version = self._resolve(request.model, request.version)
        if version.ensemble is not None:
            stream = await self._ensembles.stream(version, request, time.perf_counter_ns())
        elif not version.decoupled:
            stream = ResponseStream(single=self._answer(version, request))
        else:
            stream = await self._open_stream(version, request)
        if request.classification:
            stream.map_responses(partial(version.classified, request))
        return stream

    async def _answer(self, version: _Version, request: InferRequest) -> InferResponse:
        queued = await self._infer_on(version, request, time.perf_counter_ns())
        assert isinstance(queued.result, InferResponse)
        return queued.result

    async def _open_stream(self, version: _Version, request: InferRequest) -> ResponseStream:
        """Queue a request of a decoupled model; its responses go to the stream returned."""
        stream = ResponseStream()
        arrived_ns = time.perf_counter_ns()
        trace = CURRENT.get()
        if trace is not None:
            trace.request_started(version.model, version.version, request, arrived_ns)
        self._queue(version, request, arrived_ns, stream).trace = trace
        return stream

    async def on_remote_stream_request(self, message: RemoteStreamRequest,
                                       envelope: Envelope) -> None:
        """A BLS stream from an executor: its responses go back to ``reply_to`` as they come,
        each as ``StreamParts``."""
        reply_to, token = message.reply_to, message.token

        def send(result: InferResponse | InferdError | None, final: bool) -> None:
            part = (Failure(result.code.value, result.message)
                    if isinstance(result, InferdError) else result)
            self.router.tell(reply_to, StreamParts((token,), (part,), (final,)))

        try:
            stream = await self.on_stream_infer_request(StreamInferRequest(message.request), None)
        except InferdError as error:
            send(error, True)
            return

        async def relay() -> None:
            async for result, final in stream:
                send(result, final)

        self.spawn(relay)

    async def on_stream_parts(self, message: StreamParts, envelope: Envelope) -> None:
        """Responses of decoupled requests, from their executor, handed to their streams."""
        for token, result, final in zip(message.tokens, message.results, message.finals,
                                        strict=True):
            entry = self._streams.get(token)
            if entry is None:
                continue  # its stream was already failed (unload, executor restart)
            version, queued = entry
            answer: InferResponse | InferdError | None = (
                InferdError.from_code(result.code, result.message)
                if isinstance(result, Failure) else result)
            queued.failed = queued.failed or isinstance(answer, InferdError)
            self._deliver(version, queued, answer, final)
            if final:
                self._end_stream(token, version, queued)

    def _end_stream(self, token: int, version: _Version, queued: _Queued) -> None:
        del self._streams[token]
        if queued.trace is not None:
            queued.trace.stamp("REQUEST_END")
        version.statistics.record_request(
            not queued.failed, time.perf_counter_ns() - queued.enqueued_ns,
            queued.started_ns - queued.enqueued_ns, failure_reason(queued))

    def _fail_streams(self, version: _Version, error: InferdError,
                      executors: set[str] | None = None) -> None:
        """End the open streams of ``version`` (of ``executors`` only, when given) with
        ``error``."""
        for token, (owner, queued) in list(self._streams.items()):
            if owner is version and (executors is None or queued.executor in executors):
                queued.failed = True
                queued.reason = queued.reason or ("BACKEND" if executors else "OTHER")
                self._deliver(version, queued, error, True)
                self._end_stream(token, version, queued)

    def _queue(self, version: _Version, request: InferRequest, arrived_ns: int,
               stream: ResponseStream | None = None) -> _Queued:
        """Check ``request`` against ``version``, queue it (on its sequence, for a sequence
        model) and start what can start; raises the error it gets at the door."""
        batch_size = check_request(request, version.signature)
        shape_key = tuple(tuple(t.shape[1:]) for t in request.inputs)
        level = version.plan.level(request.priority)
        queued = _Queued(request, batch_size, shape_key, arrived_ns, level=level, stream=stream)
        if version.sequences is not None:
            version.sequences.admit(queued, request, batch_size, arrived_ns)
        elif not version.queue.admit(queued, level, request.timeout_us, arrived_ns):
            version.statistics.record_request(
                False, time.perf_counter_ns() - arrived_ns, 0, "REJECTED")
            raise Unavailable(queue_full_message(request.id))
        self._pump(version)
        return queued

    async def _infer_on(self, version: _Version, request: InferRequest, arrived_ns: int,
                        cached: bool = True) -> _Queued:
        """Queue ``request`` on ``version`` and wait for its answer (the path of every
        request, ensemble steps included); raises the error it got."""
        if version.decoupled:
            raise DecoupledNotStreamed(version.model)
        if cached and version.cache is not None:
            return await self._infer_cached(version, version.cache, request, arrived_ns)
        trace = CURRENT.get()
        if trace is not None:
            trace.request_started(version.model, version.version, request, arrived_ns)
        queued = self._queue(version, request, arrived_ns)
        if not queued.done.is_set():  # the queue's policy times it out, not this task
            try:
                await queued.done.wait()
            except anyio.get_cancelled_exc_class():
                version.statistics.record_request(
                    False, time.perf_counter_ns() - arrived_ns, 0, "CANCELED")
                raise
        finished_ns = time.perf_counter_ns()
        result = queued.result
        if trace is not None:
            trace.request_finished(queued.compute_started_ns or queued.started_ns,
                                   queued.compute_ns, result)
        version.statistics.record_request(
            isinstance(result, InferResponse),
            finished_ns - arrived_ns,
            queued.started_ns - arrived_ns if queued.started_ns else 0,
            failure_reason(queued),
        )
        if isinstance(result, InferdError):
            raise result
        assert result is not None
        return queued

    async def _infer_cached(self, version: _Version, cache: CacheScope, request: InferRequest,
                            arrived_ns: int) -> _Queued:
        """The response cache's turn (inferd.kernel.response_cache): a hit is answered here,
        never queued; a miss runs as any request and its answer is stored."""
        lookup = await cache.lookup(request)
        if lookup.response is not None:
            cache.record_hit(version.statistics, lookup, arrived_ns)
            hit = _Queued(request, 0, (), arrived_ns, started_ns=lookup.started_ns)
            if version.plan.preserve_ordering:  # as Triton: behind the requests already sent
                version.order.take(hit)
            self._deliver(version, hit, lookup.response, True)
            await hit.done.wait()
            return hit
        queued = await self._infer_on(version, request, arrived_ns, cached=False)
        await cache.store(lookup, queued.result, version.statistics)
        return queued

    def _pump(self, version: _Version) -> None:
        """Start as many batches as there are free instances and ready batches. A batch that
        finishes at once (an executor in this process) pumps again only when this returns:
        this loop sees the instance it freed."""
        if version.pumping:
            return
        if version.sequences is not None:
            self._pump_sequences(version, version.sequences)
            return
        version.pumping = True
        queue = version.queue
        in_flight_limit = BATCHES_IN_FLIGHT_PER_INSTANCE if version.plan.prefetch else 1
        try:
            self._expire(version)
            while queue:
                slot = min(version.slots, key=_load_of, default=None)
                if slot is None or slot.in_flight >= in_flight_limit:
                    break
                if slot.in_flight and not version.batcher.complete(queue):
                    break  # the batch grows here until an instance is free
                count = version.batcher.take(queue, time.perf_counter_ns())
                if count == 0:
                    self._wake_at(version, version.batcher.wake_at(queue))
                    break
                self._start_batch(version, slot, queue.pop(count))
        finally:
            version.pumping = False
        deadline = queue.next_deadline()
        if deadline is not None:  # a REJECT timeout answers when it expires, not later
            self._wake_at(version, deadline + 1)

    def _expire(self, version: _Version) -> None:
        """Apply the queue's timeouts: DELAY requests move behind the live ones (in the
        queue), REJECT ones fail now."""
        for queued in version.queue.expire(time.perf_counter_ns()):
            error = Unavailable(TIMEOUT_MESSAGE)
            queued.reason = "REJECTED"
            if queued.stream is not None:  # no task waits for a decoupled request: count it
                queued.failed = True
                version.statistics.record_request(
                    False, time.perf_counter_ns() - queued.enqueued_ns, 0, "REJECTED")
            _hand(queued, error, True)

    def _deliver(self, version: _Version, queued: _Queued,
                 result: InferResponse | InferdError | None, final: bool) -> None:
        """Hand a response of a request sent to an instance to its waiter or stream, in
        request order under preserve_ordering."""
        if not version.order:
            _hand(queued, result, final)
            return
        for held, part, last in version.order.put(queued, result, final):
            _hand(held, part, last)

    def _pump_sequences(self, version: _Version, sequences: SequenceBatcher[_Queued]) -> None:
        """Start the next batch of every instance that runs none (one at a time each, so a
        request sees the state its sequence's previous request left)."""
        version.pumping = True
        try:
            now_ns = time.perf_counter_ns()
            sequences.expire(now_ns)
            started = True
            while started:  # an executor in this process answers at once: go round again
                started = False
                for index, slot in enumerate(version.slots):
                    batch = sequences.next_batch(index, now_ns)
                    if batch is not None:
                        self._start_sequence_batch(version, slot, batch)
                        started = True
        finally:
            version.pumping = False
        self._wake_at(version, sequences.wake_at())

    def _wake_at(self, version: _Version, wake_ns: int | None) -> None:
        """Pump ``version`` again at ``wake_ns`` (unless a wake no later is planned)."""
        if wake_ns is None or (version.wake_ns and version.wake_ns <= wake_ns):
            return
        version.wake_ns = wake_ns

        async def wake() -> None:
            await anyio.sleep(max(0, wake_ns - time.perf_counter_ns()) / 1e9)
            if version.wake_ns == wake_ns:
                version.wake_ns = 0
            self._pump(version)

        self.spawn(wake)

    def _start_batch(self, version: _Version, slot: _Slot, batch: list[_Queued]) -> None:
        """Send ``batch`` to ``slot``'s instance; ``_finish_batch`` takes the reply, with no
        task waiting for it (a request's task waits only for its own result)."""
        _batch_started(version, slot, batch)
        if version.plan.preserve_ordering:
            for queued in batch:
                version.order.take(queued)
        requests = tuple(q.request for q in batch)
        if version.decoupled:
            tokens = tuple(next(self._tokens) for _ in batch)
            for token, queued in zip(tokens, batch, strict=True):
                self._streams[token] = (version, queued)
                queued.executor = slot.executor
            stream_batch = StreamBatch(version.model, version.version, slot.instance, requests,
                                       tokens)
            self.router.ask_then(slot.executor, stream_batch,
                                 partial(self._finish_stream_batch, version, slot, batch, tokens))
            return
        message = InferBatch(version.model, version.version, slot.instance, requests)
        self.router.ask_then(slot.executor, message,
                             partial(self._finish_batch, version, slot, batch))

    def _finish_batch(
        self, version: _Version, slot: _Slot, batch: list[_Queued], reply: Message | InferdError
    ) -> None:
        _batch_finished(version, slot, len(batch))
        results = self._results(version, slot, batch, reply)
        for queued, result in zip(batch, results, strict=True):
            self._deliver(version, queued, result, True)
        self._pump(version)

    def _finish_stream_batch(self, version: _Version, slot: _Slot, batch: list[_Queued],
                             tokens: tuple[int, ...], reply: Message | InferdError) -> None:
        """A decoupled batch's instance is free; its requests' responses come on their own
        (those of a batch that failed outright end with its error)."""
        _batch_finished(version, slot, len(batch))
        if isinstance(reply, BatchResult):
            version.statistics.record_batch(
                sum(q.batch_size for q in batch), len(batch), reply.compute_ns)
        else:
            error = reply if isinstance(reply, InferdError) else Internal(
                f"executor '{slot.executor}' answered a decoupled batch with "
                f"{type(reply).__name__}")
            for token, queued in zip(tokens, batch, strict=True):
                if token in self._streams:
                    queued.failed = True
                    self._deliver(version, queued, error, True)
                    self._end_stream(token, version, queued)
        self._pump(version)

    def _results(self, version: _Version, slot: _Slot, batch: list[_Queued],
                 reply: Message | InferdError, count: int | None = None
                 ) -> list[InferResponse | InferdError]:
        """One result per request of an executor's reply to a batch of ``count`` requests
        (``batch`` are the real ones, recorded in the statistics)."""
        count = len(batch) if count is None else count
        if isinstance(reply, InferdError):
            return [reply] * count
        if not isinstance(reply, BatchResult) or len(reply.results) != count:
            error = Internal(f"executor '{slot.executor}' answered a batch of {count}"
                             f" with {type(reply).__name__}")
            return [error] * count
        version.statistics.record_batch(
            sum(q.batch_size for q in batch), len(batch), reply.compute_ns
        )
        for queued in batch:
            queued.compute_ns = reply.compute_ns
            queued.compute_started_ns = reply.started_ns
        return [
            InferdError.from_code(r.code, r.message) if isinstance(r, Failure) else r
            for r in reply.results
        ]

    def _start_sequence_batch(self, version: _Version, slot: _Slot,
                              batch: SequenceBatch[_Queued]) -> None:
        real = [entry.item for entry in batch.real if entry.item is not None]
        _batch_started(version, slot, real)
        message = InferBatch(version.model, version.version, slot.instance, batch.requests)
        self.router.ask_then(slot.executor, message,
                             partial(self._finish_sequence_batch, version, slot, batch, real))

    def _finish_sequence_batch(self, version: _Version, slot: _Slot,
                               batch: SequenceBatch[_Queued], real: list[_Queued],
                               reply: Message | InferdError) -> None:
        _batch_finished(version, slot, len(real))
        results = self._results(version, slot, real, reply, count=len(batch.entries))
        assert version.sequences is not None
        for queued, result in version.sequences.complete(batch, results, time.perf_counter_ns()):
            queued.result = result
            queued.done.set()
        self._pump(version)
