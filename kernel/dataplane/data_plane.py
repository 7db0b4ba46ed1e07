"""The protocol-agnostic data plane every frontend adapts: one entry point, ``handle``.

It maps each request kind to the actor that owns the answer (inference and model information
to the scheduler, the repository API and readiness to control, the log settings to the
executor pool) and asks it; server metadata it answers itself. A model name that breaks the
rule of ``inferd.protocols.names`` is refused here, before any actor (and so any disk, index
or log line) sees it. Client shared memory is a plugin's (``inferd.kernel.sdk.shared_memory``):
the data plane hands the extension's requests to the provider opened at start-up, and for an
inference request that names regions asks it for the plain request to route and for what
finishes the reply; when a CUDA region whose windows went to executors closes, it tells them
(``CloseDeviceRegions``). Without a provider, the extension answers as Triton does with
client shared memory off, and a request naming a region is refused. Frontends stay thin:
decode, ``await dataplane.handle(request)``, encode. Errors arrive as ``InferdError`` with the code
that decides the status. Once a request's model name is checked, the data plane notes its
model, version and id in the frontend's log context (``inferd.kernel.sdk.log_context``),
so the frontend's one error line names them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.observability.tracing import Tracer, disabled_tracer
from inferd.kernel.runtime import link_memory
from inferd.kernel.runtime.addresses import CONTROL, EXECUTORS, REPOSITORY, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.control import UnservedModels
from inferd.kernel.sdk.shared_memory import CLIENT_SHM_DISABLED, OnClosed, SharedMemory
from inferd.protocols.errors import Internal, InvalidArgument, Unsupported
from inferd.protocols.messages import (
    CatalogRequest,
    CloseDeviceRegions,
    HealthRequest,
    HealthStatus,
    IndexRequest,
    InferRequest,
    InferResponse,
    LabelsRequest,
    LoadRequest,
    LogSettingsRequest,
    Message,
    Metrics,
    MetricsRequest,
    ModelConfigRequest,
    ModelMetadataRequest,
    ModelReadyRequest,
    PollRequest,
    ServerMetadata,
    ServerMetadataRequest,
    SharedMemoryInferRequest,
    SharedMemoryInput,
    SharedMemoryRegister,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    StatisticsRequest,
    StreamInferRequest,
    TraceSettingRequest,
    UnloadRequest,
)
from inferd.protocols.names import check_load_name, check_model_name

SERVER_NAME = "inferd"
SERVER_VERSION = "0.1.0"

_OWNER: dict[type[Message], str] = {
    InferRequest: SCHEDULER,
    ModelMetadataRequest: SCHEDULER,
    ModelReadyRequest: SCHEDULER,
    ModelConfigRequest: SCHEDULER,
    StatisticsRequest: SCHEDULER,
    HealthRequest: CONTROL,
    IndexRequest: CONTROL,
    CatalogRequest: CONTROL,
    LoadRequest: CONTROL,
    UnloadRequest: CONTROL,
    LabelsRequest: CONTROL,
    PollRequest: CONTROL,
    LogSettingsRequest: EXECUTORS,  # it owns the settings every process logs by
}

# The requests that load their model when --model-load-on-demand is on.
_LOADS_ON_DEMAND = (InferRequest, ModelMetadataRequest, ModelReadyRequest, ModelConfigRequest)

# Requests whose model name may not be empty (statistics without a name mean every model).
_NAMES_A_MODEL = (
    InferRequest, ModelMetadataRequest, ModelReadyRequest, ModelConfigRequest, LoadRequest,
    UnloadRequest, LabelsRequest,
)


_SHARED_MEMORY_REQUESTS = (SharedMemoryRegister, SharedMemoryUnregister, SharedMemoryStatusRequest)


class DataPlane:
    def __init__(
        self,
        router: Router,
        extensions: tuple[str, ...] = (),
        shared_memory: Callable[[OnClosed], SharedMemory] | None = None,
        tracer: Tracer | None = None,
        on_demand: UnservedModels | None = None,
    ) -> None:
        self._router = router
        # --model-load-on-demand: a request for a model not loaded loads it first.
        self._on_demand = on_demand
        # Client shared memory, opened here with what tells executors of a closed CUDA region;
        # None: no plugin provides it.
        self.shared_memory = (shared_memory(self._device_region_closed)
                              if shared_memory is not None else None)
        self.extensions = extensions + (self.shared_memory.extensions
                                        if self.shared_memory is not None else ())
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the executors are told on
        # Frontends begin and end the traces of the requests they take
        # (inferd.kernel.observability.tracing).
        self.tracer = tracer if tracer is not None else disabled_tracer()

    async def handle(self, request: Message) -> Message:
        owner = _OWNER.get(type(request))  # first: the common case, an inference
        if owner is not None:
            model = getattr(request, "model", "")
            if model or isinstance(request, _NAMES_A_MODEL):
                # Before any actor sees it: a bad name never reaches the disk, the index or
                # a log line. A load hears Triton's words for the names Triton refuses.
                (check_load_name if isinstance(request, LoadRequest) else check_model_name)(model)
                log_context.note(model, getattr(request, "version", ""),
                                 getattr(request, "id", ""))
                if self._on_demand is not None and isinstance(request, _LOADS_ON_DEMAND):
                    return await self._on_demand.call(
                        lambda: self._router.call(owner, request), request, model)
            return await self._router.call(owner, request)  # an inference: in this task
        if isinstance(request, SharedMemoryInferRequest):
            return await self._infer_in_shared_memory(request)
        if isinstance(request, _SHARED_MEMORY_REQUESTS):
            if self.shared_memory is None:  # as Triton answers with client shared memory off
                raise Unsupported(CLIENT_SHM_DISABLED)
            return self.shared_memory.answer(request)
        if isinstance(request, ServerMetadataRequest):
            return ServerMetadata(SERVER_NAME, SERVER_VERSION, self.extensions)
        if isinstance(request, MetricsRequest):
            return await self._metrics()
        if isinstance(request, TraceSettingRequest):
            return await self._trace_setting(request)
        raise Unsupported(f"{type(request).__name__} is not a request inferd serves")

    async def stream(self, request: InferRequest) -> ResponseStream:
        """The responses to ``request`` as they come: one for a model that is not decoupled,
        any number for one that is (gRPC's ``ModelStreamInfer``, HTTP's generate_stream)."""
        check_model_name(request.model)
        log_context.note(request.model, request.version, request.id)
        message = StreamInferRequest(request)
        if self._on_demand is not None:
            stream = await self._on_demand.call(
                lambda: self._router.call(_OWNER[InferRequest], message), message, request.model)
        else:
            stream = await self._router.call(_OWNER[InferRequest], message)
        if not isinstance(stream, ResponseStream):
            raise Internal(f"a stream request was answered with a {type(stream).__name__}")
        return stream

    async def _trace_setting(self, request: TraceSettingRequest) -> Message:
        """The trace extension: a model's settings only while it is ready, as in Triton."""
        if request.model:
            check_model_name(request.model)
            ready = await self._router.call(SCHEDULER, ModelReadyRequest(request.model))
            if not (isinstance(ready, HealthStatus) and ready.ok):
                raise InvalidArgument(f"Request for unknown model : {request.model}")
        if request.update:
            self.tracer.update(request)
        return self.tracer.settings(request.model)

    async def _metrics(self) -> Metrics:
        """Inference metrics come from the scheduler, load metrics from control, the
        executor processes' from the executor pool, remote fetches' from the repository;
        the shared memory's are the provider's (the regions it mapped) and the
        server's segments in /dev/shm."""
        samples: list[tuple[str, dict[str, str], float]] = []
        for owner in (SCHEDULER, CONTROL, EXECUTORS, REPOSITORY):
            reply = await self._router.ask(owner, MetricsRequest())
            assert isinstance(reply, Metrics)
            samples += reply.samples
        region_bytes, regions = (self.shared_memory.usage() if self.shared_memory is not None
                                 else (0, 0))
        segments, segment_bytes = link_memory.server_segment_bytes(os.getpid())
        samples += [
            ("inferd_system_shared_memory_bytes", {}, region_bytes),
            ("inferd_system_shared_memory_regions", {}, regions),
            ("inferd_link_shared_memory_bytes", {}, segment_bytes),
            ("inferd_link_shared_memory_segments", {}, segments),
        ]
        return Metrics(tuple(samples))

    def _device_region_closed(self, serial: int, executors: frozenset[str]) -> None:
        """A CUDA region's handle closed here (on whatever thread dropped it last): the
        executors that were sent its windows close theirs, told on the loop."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._tell_closed, serial, executors)
        except RuntimeError:  # the loop is closed: the executors are going too
            pass

    def _tell_closed(self, serial: int, executors: frozenset[str]) -> None:
        for executor in executors:
            try:
                self._router.tell(executor, CloseDeviceRegions((serial,)))
            except Exception:  # noqa: BLE001 - a gone executor took its handles with it
                pass

    async def _infer_in_shared_memory(
        self, request: SharedMemoryInferRequest
    ) -> Message:
        """The provider checks the regions and windows and gives the plain request (whose
        tensors keep the regions' memory alive), then writes the outputs it names."""
        check_model_name(request.request.model)
        log_context.note(request.request.model, request.request.version, request.request.id)
        if self.shared_memory is None:
            raise InvalidArgument(_no_shared_memory(request))
        self._loop = asyncio.get_running_loop()
        plain, finish = self.shared_memory.prepare(request)
        if self._on_demand is not None:
            reply = await self._on_demand.call(
                lambda: self._router.call(_OWNER[InferRequest], plain), plain, plain.model)
        else:
            reply = await self._router.call(_OWNER[InferRequest], plain)
        if not isinstance(reply, InferResponse):
            raise Internal(f"an inference request was answered with a {reply.kind()}")
        return finish(reply)


def _no_shared_memory(request: SharedMemoryInferRequest) -> str:
    """Why a request naming a region is refused by a server without client shared memory."""
    named = [(item.name, item.location.region) for item in request.inputs
             if isinstance(item, SharedMemoryInput)]
    named += [(name, location.region) for name, location in request.output_regions.items()]
    tensor, region = named[0] if named else ("", "")
    return (f"tensor '{tensor}' names shared memory region '{region}', but this server has no "
            "client shared memory (its shared_memory plugin is not installed)")
