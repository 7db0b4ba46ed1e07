"""The protocol-agnostic data plane every frontend adapts: one entry point, ``handle``.

It maps each request kind to the actor that owns the answer (inference and model information
to the scheduler, the repository API and readiness to control, the log settings to the
executor pool) and asks it; server metadata it answers itself. A model name that breaks the
rule of ``inferd.protocols.names`` is refused here, before any actor (and so any disk, index
or log line) sees it. It owns the shared-memory registry
(``inferd.kernel.dataplane.system_shared_memory``, system and CUDA regions) and answers its requests
itself (registers and unregisters only with ``--allow-client-shm``, off by default, as in Triton);
for an inference request whose inputs lie in registered regions it hands the scheduler
ordinary tensors that are views of the mapped memory (no copy), or for a CUDA region device tensors
(its window, no bytes: ``inferd.kernel.actors.scheduler.cuda_windows`` decides where they are read),
and writes the outputs asked for in a region into it once the reply comes, unless a GPU executor
already wrote them on the device, returning them without their data. When a CUDA region whose
windows went to executors closes, it tells them (``CloseDeviceRegions``). Frontends stay thin:
decode, ``await dataplane.handle(request)``, encode. Errors arrive as ``InferdError`` with the code
that decides the status. Once a request's model name is checked, the data plane notes its
model, version and id in the frontend's log context (``inferd.kernel.sdk.log_context``),
so the frontend's one error line names them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import replace

from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.dataplane.system_shared_memory import (
    CLIENT_SHM_DISABLED,
    SharedMemoryRegistry,
    check_input_size,
    output_too_small,
)
from inferd.kernel.observability.tracing import Tracer, disabled_tracer
from inferd.kernel.runtime import link_memory
from inferd.kernel.runtime.addresses import CONTROL, EXECUTORS, REPOSITORY, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.control import UnservedModels
from inferd.protocols.device_tensors import device_tensor, window_of
from inferd.protocols.errors import Internal, InvalidArgument, Unsupported
from inferd.protocols.messages import (
    Ack,
    CatalogRequest,
    CloseDeviceRegions,
    DeviceWindow,
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
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    SharedMemoryRegister,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    StatisticsRequest,
    StreamInferRequest,
    Tensor,
    TraceSettingRequest,
    UnloadRequest,
)
from inferd.protocols.names import check_load_name, check_model_name
from inferd.protocols.tensors import tensor_from_buffer, tensor_to_buffer

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
        shared_memory: SharedMemoryRegistry | None = None,
        tracer: Tracer | None = None,
        on_demand: UnservedModels | None = None,
        *,
        allow_client_shm: bool = False,
    ) -> None:
        self._router = router
        # --allow-client-shm: whether clients may register (and unregister) regions at all.
        self.allow_client_shm = allow_client_shm
        # --model-load-on-demand: a request for a model not loaded loads it first.
        self._on_demand = on_demand
        self.extensions = extensions
        self.shared_memory = shared_memory if shared_memory is not None else SharedMemoryRegistry()
        self.shared_memory.cuda.on_closed = self._device_region_closed
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
            return self._shared_memory_request(request)
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
        the shared memory's are the data plane's own (the regions it mapped) and the
        server's segments in /dev/shm."""
        samples: list[tuple[str, dict[str, str], float]] = []
        for owner in (SCHEDULER, CONTROL, EXECUTORS, REPOSITORY):
            reply = await self._router.ask(owner, MetricsRequest())
            assert isinstance(reply, Metrics)
            samples += reply.samples
        regions = self.shared_memory.status().regions
        segments, segment_bytes = link_memory.server_segment_bytes(os.getpid())
        samples += [
            ("inferd_system_shared_memory_bytes", {}, sum(r.byte_size for r in regions)),
            ("inferd_system_shared_memory_regions", {}, len(regions)),
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

    def _shared_memory_request(
        self, request: SharedMemoryRegister | SharedMemoryUnregister | SharedMemoryStatusRequest
    ) -> Message:
        registry = self.shared_memory
        if request.memory not in ("system", "cuda"):
            raise InvalidArgument(f"unknown shared memory kind '{request.memory}'")
        if not self.allow_client_shm and not isinstance(request, SharedMemoryStatusRequest):
            # Status stays open, as in Triton: with nothing registered it lists nothing.
            raise Unsupported(CLIENT_SHM_DISABLED)
        if isinstance(request, SharedMemoryRegister):
            if request.memory == "cuda":
                # Refused with Triton's message where this server sees no GPU.
                registry.register_cuda(request.name, request.raw_handle, request.device_id,
                                       request.byte_size)
            else:
                registry.register(request.name, request.key, request.offset, request.byte_size)
            return Ack()
        if isinstance(request, SharedMemoryUnregister):
            registry.unregister(request.name, request.memory)
            return Ack()
        return registry.status(request.name, request.memory)

    async def _infer_in_shared_memory(
        self, request: SharedMemoryInferRequest
    ) -> SharedMemoryInferResponse:
        """Inputs become read-only views of their regions (a CUDA region's: a device tensor
        of its window); output windows are looked up before the model runs, so an unknown
        region or a bad window costs no inference. The writers and tensors held here keep the
        regions' memory alive if a region is unregistered meanwhile."""
        check_model_name(request.request.model)
        log_context.note(request.request.model, request.request.version, request.request.id)
        self._loop = asyncio.get_running_loop()
        inputs = tuple(
            self._input_tensor(item, request.request)
            if isinstance(item, SharedMemoryInput) else item
            for item in request.inputs
        )
        windows = {
            name: self.shared_memory.writer(location)
            for name, location in request.output_regions.items()
        }
        on_device: dict[str, DeviceWindow] = {}
        for name, location in request.output_regions.items():
            found = self.shared_memory.cuda_window(location)
            if found is not None:
                on_device[name] = found[1]
        plain = replace(request.request, inputs=inputs, output_windows=on_device)
        if self._on_demand is not None:
            reply = await self._on_demand.call(
                lambda: self._router.call(_OWNER[InferRequest], plain), plain, plain.model)
        else:
            reply = await self._router.call(_OWNER[InferRequest], plain)
        if not isinstance(reply, InferResponse):
            raise Internal(f"an inference request was answered with a {reply.kind()}")
        outputs: list[Tensor | SharedMemoryOutput] = []
        for tensor in reply.outputs:
            window = windows.get(tensor.name)
            written = window_of(tensor)
            if written is not None:  # its executor wrote it on the device
                asked = on_device.get(tensor.name)
                if asked is None or (written.region, written.offset) != (asked.region,
                                                                          asked.offset):
                    raise Internal(f"output '{tensor.name}' was written in device memory the "
                                   "request did not name")
                outputs.append(SharedMemoryOutput(tensor.name, tensor.datatype,
                                                  tuple(tensor.shape),
                                                  request.output_regions[tensor.name]))
            elif window is None:
                outputs.append(tensor)
            else:
                location = request.output_regions[tensor.name]
                outputs.append(_write_output(tensor, window, location))
        return SharedMemoryInferResponse(
            reply.model, reply.version, tuple(outputs), reply.id, reply.parameters
        )

    def _input_tensor(self, item: SharedMemoryInput, request: InferRequest) -> Tensor:
        found = (self.shared_memory.cuda_window(item.location) if item.datatype != "BYTES"
                 else None)
        if found is not None:  # its window, not its bytes: the scheduler decides where to read
            region, window = found
            check_input_size(item.name, item.datatype, item.shape, window.byte_size,
                             request.model, request.id)
            return device_tensor(item.name, item.datatype, item.shape, window, owner=region)
        # Read-only: a backend must not write into memory the client owns.
        view = self.shared_memory.view(item.location).toreadonly()
        check_input_size(item.name, item.datatype, item.shape, view.nbytes, request.model,
                         request.id)
        return tensor_from_buffer(item.name, item.datatype, item.shape, view)


def _write_output(
    tensor: Tensor, write: Callable[[memoryview], None], location: SharedMemoryRef
) -> SharedMemoryOutput:
    data = memoryview(tensor_to_buffer(tensor)).cast("B")
    if data.nbytes > location.byte_size:
        raise output_too_small(tensor.name, location.byte_size, data.nbytes)
    write(data)
    return SharedMemoryOutput(tensor.name, tensor.datatype, tuple(tensor.shape), location)
