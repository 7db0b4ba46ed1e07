"""CUDA shared memory in an executor process: the client's regions opened here, once each.

Owns the IPC handles this process opened (one per region, ``DeviceWindow.region``, opened at
its first window and kept for the next), what a batch's device tensors
(``inferd.protocols.device_tensors``) become before its instance runs (``prepare``): for an
instance that takes device memory (``Instance.takes_device_memory``) they stay device tensors,
now carrying the device address of their first byte and the opened handle that keeps it
valid; for any other their bytes are copied to the host once. After the run (``finish``), an
output asked in device memory that the backend left on the host is checked against its window
(Triton's message when it does not fit) and copied onto the device once; the response carries
it as a device tensor of its window, without bytes (a backend that wrote it on the device
itself answers it so already). ``close`` (the main process's ``CloseDeviceRegions``) forgets
handles; each is closed once the last tensor over it is gone, so a batch still running keeps
its memory. Every CUDA call goes through a ``CudaRuntime``
(``inferd.kernel.sdk.cuda_memory``), the only thing its tests replace. The device ids
are the server's; ``local_device_id`` maps them to this process's (pinned) devices.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from inferd.kernel.sdk.backends import Instance
from inferd.kernel.sdk.cuda_memory import (
    CudaCallFailed,
    CudaRuntime,
    output_too_small,
    present_runtime,
    written_window,
)
from inferd.kernel.sdk.devices import local_device_id
from inferd.protocols.device_tensors import device_tensor, on_device, window_of
from inferd.protocols.errors import InferdError, Internal
from inferd.protocols.messages import DeviceWindow, InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import tensor_from_buffer, tensor_to_buffer

log = logging.getLogger(__name__)


def _close(runtime: CudaRuntime, pointer: int, device: int) -> None:
    try:
        runtime.close_ipc_handle(pointer, device)
    except CudaCallFailed:
        pass  # the memory is gone already: nothing holds it here any more


@dataclass(eq=False)
class OpenedRegion:
    """A region's IPC handle opened in this process: its memory at ``pointer`` on this
    process's CUDA device ``device``. Closed when nothing refers to it."""

    region: int
    pointer: int
    device: int
    runtime: CudaRuntime
    _finalizer: weakref.finalize[..., OpenedRegion] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _close, self.runtime, self.pointer, self.device)


@dataclass(eq=False, slots=True)
class DeviceBatch:
    """A batch's requests as its instance takes them, the device address of each output
    window (``Instance.window_addresses``) and the opened regions those lie in, held here so
    that no close pulls them from under the batch."""

    requests: tuple[InferRequest, ...]
    addresses: dict[DeviceWindow, int] = field(default_factory=dict)
    held: list[OpenedRegion] = field(default_factory=list)


class DeviceMemory:
    """The CUDA regions opened in this executor process. ``runtime`` is looked up at the first
    window (``None``: no CUDA here, and every window fails its request)."""

    def __init__(self, runtime: Callable[[], CudaRuntime | None] = present_runtime,
                 local_device: Callable[[int], int] = local_device_id) -> None:
        self._find_runtime = runtime
        self._local_device = local_device
        self._runtime: CudaRuntime | None = None
        self._looked = False
        self._opened: dict[int, OpenedRegion] = {}
        self._lock = threading.Lock()  # batches of several instances open regions at once

    def opened(self, window: DeviceWindow) -> OpenedRegion:
        with self._lock:
            region = self._opened.get(window.region)
            if region is None:
                region = self._opened[window.region] = self._open(window)
            return region

    def _open(self, window: DeviceWindow) -> OpenedRegion:
        if not self._looked:
            self._runtime, self._looked = self._find_runtime(), True
        runtime = self._runtime
        if runtime is None:
            raise Internal("CUDA shared memory reached an executor that has no CUDA runtime")
        device = self._local_device(window.device_id)
        try:
            pointer = runtime.open_ipc_handle(window.handle, device)
        except CudaCallFailed as error:
            raise Internal(f"failed to open CUDA shared memory in the executor: {error}") from None
        # Once per region: the line that shows this executor was handed the client's memory.
        log.info("opened CUDA shared memory region %d of GPU %d here", window.region,
                 window.device_id)
        return OpenedRegion(window.region, pointer, device, runtime)

    def close(self, regions: Sequence[int]) -> None:
        """Forget ``regions``: each handle closes once no tensor over it is left."""
        with self._lock:
            for region in regions:
                self._opened.pop(region, None)

    def __len__(self) -> int:
        return len(self._opened)

    # ------------------------------------------------------------------ a batch

    def prepare(self, requests: Sequence[InferRequest], instance: Instance) -> DeviceBatch:
        """``requests`` as ``instance`` takes them: device tensors with their addresses, or
        on the host (one copy each); for an instance that takes device memory, also the
        address of each output window, opened now and held until the batch is done."""
        on_gpu = instance.takes_device_memory
        prepared = DeviceBatch(tuple(
            replace(request, inputs=tuple(self._input(tensor, on_gpu) for tensor in request.inputs))
            if on_device(request) else request
            for request in requests
        ))
        if on_gpu:
            for request in requests:
                for window in request.output_windows.values():
                    region = self.opened(window)
                    prepared.held.append(region)
                    prepared.addresses[window] = region.pointer + window.offset
        return prepared

    def _input(self, tensor: Tensor, on_gpu: bool) -> Tensor:
        window = window_of(tensor)
        if window is None:
            return tensor
        region = self.opened(window)
        pointer = region.pointer + window.offset
        if on_gpu:
            return device_tensor(tensor.name, tensor.datatype, tensor.shape, window,
                                 owner=region, pointer=pointer)
        host = np.empty(window.byte_size, np.uint8)
        if window.byte_size:
            try:
                region.runtime.copy_to_host(int(host.ctypes.data), pointer, window.byte_size,
                                            region.device)
            except CudaCallFailed as error:
                raise Internal(f"failed to read CUDA shared memory: {error}") from None
        host.flags.writeable = False  # the client's bytes: a backend copies before writing
        return tensor_from_buffer(tensor.name, tensor.datatype, tensor.shape, host)

    def finish(self, batch: DeviceBatch, results: list[InferResponse | InferdError]
               ) -> list[InferResponse | InferdError]:
        """``results`` with every output asked in device memory written there."""
        requests = batch.requests
        if len(results) != len(requests):
            return results  # the executor fails the batch for that
        return [
            self._written(request, result)
            if request.output_windows and isinstance(result, InferResponse) else result
            for request, result in zip(requests, results, strict=True)
        ]

    def _written(self, request: InferRequest, response: InferResponse
                 ) -> InferResponse | InferdError:
        outputs = []
        for tensor in response.outputs:
            window = request.output_windows.get(tensor.name)
            # BYTES never stays in device memory: the main process writes it, as before.
            if window is None or window_of(tensor) is not None or tensor.datatype == "BYTES":
                outputs.append(tensor)
                continue
            data = memoryview(tensor_to_buffer(tensor)).cast("B")
            if data.nbytes > window.byte_size:
                return output_too_small(tensor.name, window.byte_size, data.nbytes)
            self._copy_to_device(window, data)
            outputs.append(device_tensor(tensor.name, tensor.datatype, tuple(tensor.shape),
                                         written_window(window, data.nbytes)))
        return replace(response, outputs=tuple(outputs))

    def _copy_to_device(self, window: DeviceWindow, data: memoryview) -> None:
        if not data.nbytes:
            return
        region = self.opened(window)
        source = np.frombuffer(data, np.uint8)
        try:
            region.runtime.copy_to_device(region.pointer + window.offset,
                                          int(source.ctypes.data), data.nbytes, region.device)
        except CudaCallFailed as error:
            raise Internal(f"failed to write CUDA shared memory: {error}") from None

