"""What the data plane asks of client shared memory, answered over the registries.

``ClientSharedMemory`` is this plugin's ``SharedMemory`` (``inferd.kernel.sdk.shared_memory``):
it answers the extension's register, unregister and status requests (registers and
unregisters only with ``--allow-client-shm``, off by default, as in Triton; status stays open)
and prepares a request whose inputs or outputs name regions. Inputs become read-only views of
their system regions (no copy), or for a CUDA region device tensors of its window, no bytes
(``inferd.kernel.actors.scheduler.cuda_windows`` decides where they are read). Output windows
are looked up before the model runs, so an unknown region or a bad window costs no inference;
once the reply comes, the outputs asked in a region are written into it, unless a GPU executor
already wrote them on the device, and returned without their data. The writers and tensors
held meanwhile keep the regions' memory alive if a region is unregistered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from inferd.kernel.sdk.cuda_memory import output_too_small
from inferd.kernel.sdk.shared_memory import (
    CLIENT_SHM_DISABLED,
    FinishInference,
    OnClosed,
    SharedMemoryRequest,
)
from inferd.plugins.shared_memory.system import SharedMemoryRegistry, check_input_size
from inferd.protocols.device_tensors import device_tensor, window_of
from inferd.protocols.errors import Internal, InvalidArgument, Unsupported
from inferd.protocols.messages import (
    Ack,
    DeviceWindow,
    InferRequest,
    InferResponse,
    Message,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    SharedMemoryRegister,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    Tensor,
)
from inferd.protocols.tensors import tensor_from_buffer, tensor_to_buffer

EXTENSIONS = (
    "system_shared_memory",
    "cuda_shared_memory",  # listed by Triton with or without GPUs; without, a register is refused
)


class ClientSharedMemory:
    """The server's regions; ``allow_client_shm`` is ``--allow-client-shm``."""

    extensions = EXTENSIONS

    def __init__(self, registry: SharedMemoryRegistry, *, allow_client_shm: bool) -> None:
        self.registry = registry
        self.allow_client_shm = allow_client_shm

    def answer(self, request: SharedMemoryRequest) -> Message:
        registry = self.registry
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

    def prepare(self, request: SharedMemoryInferRequest
                ) -> tuple[InferRequest, FinishInference]:
        inputs = tuple(
            self._input_tensor(item, request.request)
            if isinstance(item, SharedMemoryInput) else item
            for item in request.inputs
        )
        regions = request.output_regions
        writers = {name: self.registry.writer(location) for name, location in regions.items()}
        on_device: dict[str, DeviceWindow] = {}
        for name, location in regions.items():
            found = self.registry.cuda_window(location)
            if found is not None:
                on_device[name] = found[1]
        plain = replace(request.request, inputs=inputs, output_windows=on_device)

        def finish(reply: InferResponse) -> SharedMemoryInferResponse:
            return _finished(reply, regions, writers, on_device)

        return plain, finish

    def _input_tensor(self, item: SharedMemoryInput, request: InferRequest) -> Tensor:
        found = (self.registry.cuda_window(item.location) if item.datatype != "BYTES"
                 else None)
        if found is not None:  # its window, not its bytes: the scheduler decides where to read
            region, window = found
            check_input_size(item.name, item.datatype, item.shape, window.byte_size,
                             request.model, request.id)
            return device_tensor(item.name, item.datatype, item.shape, window, owner=region)
        # Read-only: a backend must not write into memory the client owns.
        view = self.registry.view(item.location).toreadonly()
        check_input_size(item.name, item.datatype, item.shape, view.nbytes, request.model,
                         request.id)
        return tensor_from_buffer(item.name, item.datatype, item.shape, view)

    def usage(self) -> tuple[int, int]:
        regions = self.registry.status().regions
        return sum(region.byte_size for region in regions), len(regions)

    def close(self) -> None:
        self.registry.close()


def opener(registry: SharedMemoryRegistry, *, allow_client_shm: bool
           ) -> Callable[[OnClosed], ClientSharedMemory]:
    """What the data plane opens the provider over ``registry`` with: ``on_closed`` is how a
    closed CUDA region reaches the executors sent its windows."""

    def open_it(on_closed: OnClosed) -> ClientSharedMemory:
        registry.cuda.on_closed = on_closed
        return ClientSharedMemory(registry, allow_client_shm=allow_client_shm)

    return open_it


def _finished(reply: InferResponse, regions: dict[str, SharedMemoryRef],
              writers: dict[str, Callable[[memoryview], None]],
              on_device: dict[str, DeviceWindow]) -> SharedMemoryInferResponse:
    """``reply`` with every output asked in a region written there (or checked to be
    written there already, on the device) and returned without its data."""
    outputs: list[Tensor | SharedMemoryOutput] = []
    for tensor in reply.outputs:
        writer = writers.get(tensor.name)
        written = window_of(tensor)
        if written is not None:  # its executor wrote it on the device
            asked = on_device.get(tensor.name)
            if asked is None or (written.region, written.offset) != (asked.region,
                                                                      asked.offset):
                raise Internal(f"output '{tensor.name}' was written in device memory the "
                               "request did not name")
            outputs.append(SharedMemoryOutput(tensor.name, tensor.datatype, tuple(tensor.shape),
                                              regions[tensor.name]))
        elif writer is None:
            outputs.append(tensor)
        else:
            outputs.append(_write_output(tensor, writer, regions[tensor.name]))
    return SharedMemoryInferResponse(
        reply.model, reply.version, tuple(outputs), reply.id, reply.parameters
    )


def _write_output(
    tensor: Tensor, write: Callable[[memoryview], None], location: SharedMemoryRef
) -> SharedMemoryOutput:
    data = memoryview(tensor_to_buffer(tensor)).cast("B")
    if data.nbytes > location.byte_size:
        raise output_too_small(tensor.name, location.byte_size, data.nbytes)
    write(data)
    return SharedMemoryOutput(tensor.name, tensor.datatype, tuple(tensor.shape), location)
