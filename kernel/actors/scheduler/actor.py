"""The scheduler actor: the inference path from a validated request to an instance and back.

It owns the routing table (``RoutingTable``: per model, the versions served, each a
``Version`` with its request queue, its instances as control reported them (executor address
and instance id), its batching and its statistics) and does their I/O through the
``BatchDispatch`` it owns (``dispatch``): the batches a version's ``pump`` forms go
to the executors, their replies come back, and the timers a queue asks for are kept; the queue
logic itself is sans-IO (``inferd.kernel.actors.scheduler``). A request is
resolved to a version (the highest served one when none is given), checked, queued and sent
in a batch to a free instance. Control tells it which versions to serve (``ServeVersion``,
which also swaps instances on reload) and which to retire (``RetireVersion``, answered once
in-flight work is done); its ``VersionServing`` (``serving``) carries those orders out. An
ensemble's request goes to the ``EnsembleRunner``, which runs each step through the composing
model's own queue here (steps batch with other traffic). A sequence model's requests go
through its ``SequenceBatcher`` (one batch per instance at a time); a decoupled model's are
answered through a ``ResponseStream``, its instance sending each response as ``StreamParts``
under the request's token (``DecoupledRequests``). A hit of the response cache is answered
before any queue. A request whose asker goes away (its task cancelled, or ``Cancel`` for its
ask, or the reader of its stream gone) leaves its queue at once, counted as a CANCELED
failure; one already in a batch is named to its executor (``CancelRequests``: the backend may
stop it) and its result dropped. A request's CUDA shared memory (device tensors, output
windows) goes on as it is only to a model served on GPUs alone whose requests it does not read
on the way; otherwise it is read to the host at the door
(``inferd.kernel.actors.scheduler.cuda_windows``). A model readiness check also asks the
version's instances that have a check of their own (``readiness``); the BLS streams of
executors are relayed by its ``RemoteStreams`` (``remote_streams``), a stream's ``cancel()``
(``CancelRemoteStream``) cancelling the request it relays. It never loads models and never
touches the repository.
"""

from __future__ import annotations

import time
from functools import partial

import anyio

from inferd.kernel.actors.scheduler.cuda_windows import on_host
from inferd.kernel.actors.scheduler.decoupled import DecoupledRequests
from inferd.kernel.actors.scheduler.dispatch import BatchDispatch
from inferd.kernel.actors.scheduler.ensembles.running import EnsembleRunner
from inferd.kernel.actors.scheduler.ensembles.served import statistics_dict
from inferd.kernel.actors.scheduler.ensembles.warming import EnsembleWarmUps
from inferd.kernel.actors.scheduler.progress import Progress
from inferd.kernel.actors.scheduler.readiness import instances_ready
from inferd.kernel.actors.scheduler.remote_streams import RemoteStreams
from inferd.kernel.actors.scheduler.requests import Queued, failure_reason
from inferd.kernel.actors.scheduler.response_cache import CacheScope
from inferd.kernel.actors.scheduler.samples import version_samples
from inferd.kernel.actors.scheduler.serving import VersionServing
from inferd.kernel.actors.scheduler.version import Version
from inferd.kernel.actors.scheduler.version_table import RoutingTable
from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.modelconfig.reading import config_to_json_text
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import SCHEDULER, gpu_of
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.caches import ResponseCache
from inferd.kernel.sdk.metrics_config import MetricsConfig
from inferd.kernel.sdk.tracing import CURRENT
from inferd.protocols.device_tensors import on_device
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    DecoupledNotStreamed,
    InferdError,
    Unavailable,
)
from inferd.protocols.messages import (
    Ack,
    CancelRemoteStream,
    Drain,
    Envelope,
    HealthStatus,
    InferRequest,
    InferResponse,
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
    RouteLabels,
    Retired,
    ServeVersion,
    Statistics,
    StatisticsRequest,
    StreamInferRequest,
    StreamParts,
    Usage,
    UsageRequest,
)


class SchedulerActor(Actor):
    address = SCHEDULER
    # A frontend's request runs in its own task (Router.call).
    DIRECT = (InferRequest, StreamInferRequest)
    # An asker elsewhere (BLS from an executor) that stops waiting cancels its request.
    CANCELLABLE = (InferRequest,)

    def __init__(self, router: Router, cache: ResponseCache | None = None,
                 metrics: MetricsConfig | None = None) -> None:
        super().__init__(router)
        self._cache = cache
        self._metrics = metrics if metrics is not None else MetricsConfig()
        self._table = RoutingTable()
        self._closed = False
        self._ensembles = EnsembleRunner(self._table.resolve, self._infer_on,
                                         self._open_stream)
        self._streams = DecoupledRequests()
        # Woken whenever a version's queue, batches or pins change: what waits for work to
        # finish (reload, retire, drain) waits on it, never in a sleep loop.
        self._progress = Progress()
        self._warm_ups = EnsembleWarmUps(
            self._ensembles, lambda: (v for v in self._table.versions() if not v.retired),
            self._progress)
        batches = BatchDispatch(router, self._streams, self.spawn)
        self._pump, self._cancel = batches.pump, batches.cancel  # bound once: the hot path
        self._abandon_stream = batches.abandon_stream
        self._serving = VersionServing(self._table, self._progress, self._streams,
                                       self._warm_ups, self._pump, cache, self._metrics)
        self._remote_streams = RemoteStreams(router, self._open_remote, self.spawn)

    # ------------------------------------------------------------------ routing table

    async def on_serve_version(self, message: ServeVersion, envelope: Envelope) -> Ack:
        await self._serving.serve(message)
        return Ack()

    async def on_model_known(self, message: ModelKnown, envelope: Envelope) -> None:
        self._serving.known(message)

    async def on_route_labels(self, message: RouteLabels, envelope: Envelope) -> Ack:
        """A model's version labels moved: requests naming no version go their way from
        the next one on (answered once they do)."""
        self._serving.route_labels(message)
        return Ack()

    async def on_retire_version(self, message: RetireVersion, envelope: Envelope
                                ) -> Ack | Retired:
        retired = await self._serving.retire(message)
        return Ack() if retired is None else retired

    async def on_drain(self, message: Drain, envelope: Envelope) -> Ack:
        """Shutdown: wait (bounded) for the queues to empty, then refuse what is left and
        everything new, so no request is sent to an executor about to unload its models."""
        with anyio.move_on_after(message.timeout):
            await self._progress.wait_until(
                lambda: not any(v.busy() for v in self._table.versions()))
        self._closed = True
        for version in self._table.versions():
            version.drain(Unavailable(SHUTTING_DOWN))
        return Ack()

    # ------------------------------------------------------------------ model information

    async def on_model_ready_request(
        self, message: ModelReadyRequest, envelope: Envelope
    ) -> HealthStatus:
        try:
            version = self._table.resolve(message.model, message.version)
            if version.ensemble is not None:
                self._ensembles.check_ready(version)
        except InferdError:
            return HealthStatus(False)
        return HealthStatus(await instances_ready(self.router, version.model, version.slots))

    async def on_model_metadata_request(
        self, message: ModelMetadataRequest, envelope: Envelope
    ) -> ModelMetadata:
        version = self._table.resolve(message.model, message.version)
        config, signature = version.config, version.signature
        return ModelMetadata(
            name=message.model,
            versions=tuple(str(n) for n in self._table.live(message.model)),
            platform=config.platform or config.backend,
            inputs=signature.metadata(signature.inputs),
            outputs=signature.metadata(signature.outputs),
        )

    async def on_model_config_request(
        self, message: ModelConfigRequest, envelope: Envelope
    ) -> ModelConfigReply:
        version = self._table.resolve(message.model, message.version)
        return ModelConfigReply(config_to_json_text(version.config))

    async def on_statistics_request(
        self, message: StatisticsRequest, envelope: Envelope
    ) -> Statistics:
        chosen = self._table.for_statistics(message.model, message.version)
        return Statistics(tuple(statistics_dict(v) for v in chosen))

    async def on_usage_request(self, message: UsageRequest, envelope: Envelope) -> Usage:
        """For the memory budget: each version's last inference and whether it is busy."""
        return Usage(tuple((v.model, v.version, v.statistics.last_inference_ms, v.busy())
                           for v in self._table.versions()))

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        now = time.monotonic()
        samples = [sample for version in self._table.versions()
                   for sample in version_samples(version, self._metrics, now)]
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
        version = self._table.route(request.model, request.version)
        if on_device(request) and not _reads_device_memory(version, request):
            request = on_host(request)  # CUDA shared memory through the host, once
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
        version = self._table.route(request.model, request.version)
        if version.ensemble is not None:
            stream = await self._ensembles.stream(version, request, time.perf_counter_ns())
        elif not version.decoupled:
            stream = ResponseStream(single=self._answer(version, request))
        else:
            stream = await self._open_stream(version, request)
        if request.classification:
            stream.map_responses(partial(version.classified, request))
        return stream

    async def _answer(self, version: Version, request: InferRequest) -> InferResponse:
        queued = await self._infer_on(version, request, time.perf_counter_ns())
        assert isinstance(queued.result, InferResponse)
        return queued.result

    async def _open_stream(self, version: Version, request: InferRequest) -> ResponseStream:
        """Queue a request of a decoupled model; its responses go to the stream returned."""
        stream = ResponseStream()
        arrived_ns = time.perf_counter_ns()
        trace = CURRENT.get()
        if trace is not None:
            trace.request_started(version.model, version.version, request, arrived_ns)
        queued = self._queue(version, request, arrived_ns, stream)
        queued.trace = trace
        stream.on_abandon = partial(self._abandon_stream, version, queued)
        return stream

    async def on_remote_stream_request(self, message: RemoteStreamRequest,
                                       envelope: Envelope) -> None:
        """A BLS stream from an executor, relayed back to it (``remote_streams``)."""
        await self._remote_streams.relay(message)

    async def on_cancel_remote_stream(self, message: CancelRemoteStream,
                                      envelope: Envelope) -> None:
        self._remote_streams.cancel(message)

    async def _open_remote(self, request: InferRequest) -> ResponseStream:
        return await self.on_stream_infer_request(StreamInferRequest(request), None)

    async def on_stream_parts(self, message: StreamParts, envelope: Envelope) -> None:
        """Responses of decoupled requests, from their executor, handed to their streams."""
        self._streams.parts(message)

    def _queue(self, version: Version, request: InferRequest, arrived_ns: int,
               stream: ResponseStream | None = None) -> Queued:
        """Check ``request`` against ``version``, queue it (on its sequence, for a sequence
        model) and start what can start; raises the error it gets at the door."""
        queued = version.admit(request, arrived_ns, stream)
        self._pump(version)
        return queued

    async def _infer_on(self, version: Version, request: InferRequest, arrived_ns: int,
                        cached: bool = True) -> Queued:
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
                self._cancel(version, queued)
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

    async def _infer_cached(self, version: Version, cache: CacheScope, request: InferRequest,
                            arrived_ns: int) -> Queued:
        """The response cache's turn (inferd.kernel.actors.scheduler.response_cache): a hit is
        answered here, never queued; a miss runs as any request and its answer is stored."""
        lookup = await cache.lookup(request)
        if lookup.response is not None:
            cache.record_hit(version.statistics, lookup, arrived_ns)
            hit = Queued(request, 0, (), arrived_ns, started_ns=lookup.started_ns)
            if version.plan.preserve_ordering:  # as Triton: behind the requests already sent
                version.order.take(hit)
            version.deliver(hit, lookup.response, True)
            await hit.done.wait()
            return hit
        queued = await self._infer_on(version, request, arrived_ns, cached=False)
        await cache.store(lookup, queued.result, version.statistics)
        return queued


def _reads_device_memory(version: Version, request: InferRequest) -> bool:
    """Whether ``request``'s CUDA shared memory may go to the instances as it is (each batch's
    executor still gets only what lies on its own GPU: ``cuda_windows.for_executor``): not for
    a model whose requests or responses the scheduler reads on the way (an ensemble's steps, a
    sequence's state, a decoupled or cached model, a traced or classified request), nor for
    one with an instance off the GPUs."""
    return (version.ensemble is None and version.sequences is None and not version.decoupled
            and version.cache is None and not request.classification and CURRENT.get() is None
            and all(gpu_of(slot.executor) is not None for slot in version.slots))
