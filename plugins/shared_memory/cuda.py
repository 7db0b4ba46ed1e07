"""The CUDA regions clients register (the KServe extension's ``cudasharedmemory``).

Owns the name -> region map of CUDA regions and its status rows: opening a client's CUDA IPC
handle on the device it names (``cudaIpcOpenMemHandle``), refusing a region larger than the
allocation behind the handle (``cuMemGetAddressRange``), and Triton's message where the server
sees no GPU. The regions themselves, the CUDA runtime binding and the executors' side are the
SDK's (``inferd.kernel.sdk.cuda_memory``), as the scheduler and the executors reach them too.
Closing a handle waits for the last window of a request in flight (the region's finalizer
runs when nothing holds it), so an unregister never pulls memory from under a running
request. Nothing touches CUDA before the first register, so a server that never sees a CUDA
region never makes a CUDA context. Names are unique across system and CUDA regions;
``inferd.plugins.shared_memory.system`` checks that. Statuses and messages are Triton's
(``src/shared_memory_manager.cc``, ``src/http_server.cc``).
"""

from __future__ import annotations

from collections.abc import Callable

from inferd.kernel.sdk.cuda_memory import (
    IPC_HANDLE_BYTES,
    CudaCallFailed,
    CudaRegion,
    CudaRuntime,
    present_runtime,
)
from inferd.kernel.sdk.shared_memory import OnClosed
from inferd.protocols.errors import InvalidArgument, NotFound


def refuse_without_gpus(name: str) -> InvalidArgument:
    """What Triton built without GPUs answers a CUDA register."""
    return InvalidArgument(
        f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
    )


class CudaRegistry:
    """The CUDA regions by name. ``runtime`` is looked up at the first register (``None``:
    no GPU here, and every register is refused)."""

    def __init__(
        self, runtime: Callable[[], CudaRuntime | None] = present_runtime
    ) -> None:
        self._find_runtime = runtime
        self._runtime: CudaRuntime | None = None
        self._looked = False
        self.regions: dict[str, CudaRegion] = {}
        self.on_closed: OnClosed | None = None  # the data plane's: it tells the executors

    def runtime(self) -> CudaRuntime | None:
        if not self._looked:
            self._runtime, self._looked = self._find_runtime(), True
        return self._runtime

    def register(self, name: str, handle: bytes, device_id: int, byte_size: int) -> None:
        """Open ``handle`` on ``device_id``; the caller checked the name is free."""
        runtime = self.runtime()
        if runtime is None:
            raise refuse_without_gpus(name)
        if len(handle) != IPC_HANDLE_BYTES:
            raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        if device_id < 0:
            raise InvalidArgument("failed to register shared memory region: invalid args")
        try:
            pointer = runtime.open_ipc_handle(handle, device_id)
        except CudaCallFailed:
            # Triton logs CUDA's reason and tells the client no more than this.
            raise InvalidArgument("failed to register shared memory region: invalid args") from None
        region = CudaRegion(name, device_id, byte_size, pointer, runtime, handle,
                            self.on_closed)
        try:
            size = runtime.allocation_size(pointer, device_id)
        except CudaCallFailed:
            size = -1
        if byte_size > size:
            region.close()
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        self.regions[name] = region

    def unregister(self, name: str = "") -> None:
        """Drop ``name`` (unknown: nothing happens), or every region; each handle closes when
        the last request using it is done."""
        for each in [name] if name else list(self.regions):
            self.regions.pop(each, None)

    def close(self) -> None:
        for region in self.regions.values():
            region.close()
        self.regions.clear()

    def region(self, name: str) -> CudaRegion:
        region = self.regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find cuda shared memory region: '{name}'")
        return region
