"""Where a request's CUDA shared memory goes, in the main process: to the GPU, or through one
copy to the host.

The data plane hands the scheduler a request whose inputs in CUDA regions are device tensors
(``inferd.protocols.device_tensors``: their windows, no bytes) and whose outputs asked in CUDA
regions are ``output_windows``. This module decides, for the scheduler, what of that stays on
the device: only what a GPU executor of the window's own device gets (``for_executor``), where
the executor opens the handle and hands the backend device memory, or copies once itself for a
backend that takes host memory. Everything else (an instance on the CPU or on another GPU, a
model whose requests the scheduler reads on the way: an ensemble, a sequence, a decoupled or
cached model, a traced or classified request: ``on_host``) gets today's path: each input copied
to the host once here, the outputs left for the data plane to write with one copy. It records
which executors were sent a region's windows (``CudaRegion.sent_to``), so they are told when
it closes. It holds no state and does no I/O beyond those copies.
"""

from __future__ import annotations

from dataclasses import replace

from inferd.kernel.runtime.addresses import gpu_of
from inferd.kernel.sdk.cuda_memory import CudaRegion, live_region
from inferd.protocols.device_tensors import on_device, window_of
from inferd.protocols.errors import Internal
from inferd.protocols.messages import InferRequest, Tensor
from inferd.protocols.tensors import tensor_from_buffer


def host_tensor(tensor: Tensor) -> Tensor:
    """``tensor`` itself, or for a device tensor its bytes copied to the host (read-only)."""
    window = window_of(tensor)
    if window is None:
        return tensor
    region = getattr(tensor.data, "owner", None)
    if not isinstance(region, CudaRegion):  # a device tensor that came from another process
        raise Internal(f"tensor '{tensor.name}' lies in device memory this process cannot read")
    view = region.read(window.offset, window.byte_size)
    return tensor_from_buffer(tensor.name, tensor.datatype, tensor.shape, view)


def on_host(request: InferRequest) -> InferRequest:
    """``request`` with every input on the host and no output windows (the data plane then
    writes those outputs itself)."""
    if not on_device(request):
        return request
    return replace(request, inputs=tuple(map(host_tensor, request.inputs)), output_windows={})


def for_executor(requests: tuple[InferRequest, ...], executor: str) -> tuple[InferRequest, ...]:
    """``requests`` as the executor ``executor`` gets them: what lies on its own GPU stays
    there, the rest goes through the host (``on_host``'s way)."""
    if not any(map(on_device, requests)):
        return requests
    return tuple(_for_gpu(request, gpu_of(executor), executor) for request in requests)


def _for_gpu(request: InferRequest, gpu: int | None, executor: str) -> InferRequest:
    if not on_device(request):
        return request
    inputs = []
    for tensor in request.inputs:
        window = window_of(tensor)
        if window is not None and window.device_id == gpu:
            _sent(live_region(window.region), executor)
            inputs.append(tensor)
        else:
            inputs.append(host_tensor(tensor))
    windows = {}
    for name, window in request.output_windows.items():
        if window.device_id == gpu:
            _sent(live_region(window.region), executor)
            windows[name] = window
    return replace(request, inputs=tuple(inputs), output_windows=windows)


def _sent(region: CudaRegion | None, executor: str) -> None:
    if region is not None:
        region.sent_to.add(executor)
