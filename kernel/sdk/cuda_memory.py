"""CUDA memory a client shares, as every process of the server reaches it: the CUDA runtime
binding, a region opened from a client's IPC handle, and the window an output was written in.

Every CUDA call goes through a ``CudaRuntime``: ``BindingsRuntime`` (NVIDIA's cuda-bindings,
the ``cuda`` extra) where the process sees a GPU (``present_runtime``), none otherwise. A copy
onto the device is complete when it returns: ``cudaMemcpy`` from pageable host memory may
return before its DMA reaches the device, so the copy's stream is synchronized before the
answer that tells a client (or another process) to read it is sent. Nothing here touches CUDA
until a runtime's first call, so a process that never sees a CUDA region makes no context.

A ``CudaRegion`` is one client region opened in the main process (by the shared-memory
plugin, ``inferd.plugins.shared_memory``): its handle closes when nothing holds it any more
(the registry, a request in flight), and its finalizer then names it to the executors that
were sent its windows (``on_closed``), so they close theirs; ``live_region`` finds it by the
serial a ``DeviceWindow`` carries (the scheduler's ``cuda_windows``). An executor opens the
same handles itself (``inferd.kernel.actors.executor.device_memory``) and writes outputs in
place (``written_window``, ``output_too_small``). Statuses and messages are Triton's
(``src/shared_memory_manager.cc``). Imports only the standard library, numpy and
``inferd.protocols``.
"""

from __future__ import annotations

import ctypes
import importlib.util
import itertools
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from inferd.kernel.sdk.devices import visible_gpus
from inferd.kernel.sdk.shared_memory import OnClosed
from inferd.protocols.errors import Internal, InvalidArgument
from inferd.protocols.messages import DeviceWindow

__all__ = [
    "DEFAULT_STREAM", "IPC_HANDLE_BYTES", "BindingsRuntime", "CudaCallFailed", "CudaRegion",
    "CudaRuntime", "live_region", "output_too_small", "present_runtime",
    "written_window",
]

IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_serials = itertools.count(1)
_live: weakref.WeakValueDictionary[int, CudaRegion] = weakref.WeakValueDictionary()



class CudaCallFailed(Exception):
    """A CUDA call answered an error; the message is CUDA's error string."""


class CudaRuntime(Protocol):
    """The CUDA calls the extension makes (the only thing its unit tests replace)."""

    def open_ipc_handle(self, handle: bytes, device_id: int) -> int:
        """``cudaSetDevice`` then ``cudaIpcOpenMemHandle``: the device pointer."""

    def allocation_size(self, pointer: int, device_id: int) -> int:
        """The bytes of the allocation ``pointer`` lies in (``cuMemGetAddressRange``)."""

    def close_ipc_handle(self, pointer: int, device_id: int) -> None:
        """``cudaIpcCloseMemHandle``."""

    def copy_to_host(self, target: int, source: int, byte_size: int, device_id: int) -> None:
        """``cudaMemcpy`` device -> host, complete when it returns."""

    def copy_to_device(self, target: int, source: int, byte_size: int, device_id: int) -> None:
        """``cudaMemcpy`` host -> device and a synchronize of its stream: complete, on the
        device, when it returns."""


DEFAULT_STREAM = 0
"""The stream ``cudaMemcpy`` runs on, as cuda-bindings names it to ``cudaStreamSynchronize``:
the legacy default stream, or the thread's own where cuda-bindings is set to per-thread
default streams (it then means that one in both calls)."""


def _cuda_call(runtime: Any, function: Any, *arguments: Any) -> Any:
    """``function(*arguments)`` of cuda-bindings (``runtime``: its runtime module, for the
    error's text), its values; ``CudaCallFailed`` for an error it answers and for one it
    raises (a CUDA library it cannot load, say)."""
    try:
        result = function(*arguments)
    except Exception as failure:
        raise CudaCallFailed(f"{getattr(function, '__name__', function)}: {failure}") from None
    return _checked(runtime, result)


def _checked(runtime: Any, result: Any) -> Any:
    """cuda-bindings answer ``(error, *values)``; raise on an error, else the values."""
    error, *values = result
    if int(error) != 0:
        raise CudaCallFailed(_error_text(runtime, error))
    return values[0] if len(values) == 1 else tuple(values)


def _error_text(runtime: Any, error: Any) -> str:
    """CUDA's text for a runtime error; the enum's name for a driver one."""
    if isinstance(error, runtime.cudaError_t):
        _, text = runtime.cudaGetErrorString(error)
        return text.decode() if isinstance(text, bytes) else str(text)
    return str(error)


class BindingsRuntime:
    """``CudaRuntime`` through cuda-bindings' runtime and driver modules (imported here unless
    given: a unit test hands in fakes of them)."""

    def __init__(self, runtime: Any = None, driver: Any = None) -> None:
        if runtime is None or driver is None:
            from cuda.bindings import driver as bindings_driver
            from cuda.bindings import runtime as bindings_runtime

            runtime = bindings_runtime if runtime is None else runtime
            driver = bindings_driver if driver is None else driver
        self._runtime = runtime
        self._driver = driver

    def _call(self, function: Any, *arguments: Any) -> Any:
        return _cuda_call(self._runtime, function, *arguments)

    def open_ipc_handle(self, handle: bytes, device_id: int) -> int:
        runtime = self._runtime
        self._call(runtime.cudaSetDevice, device_id)
        ipc = runtime.cudaIpcMemHandle_t()
        # The struct is the handle's 64 bytes; not every cuda-bindings release exposes its
        # ``reserved`` field, so they are written through its address.
        ctypes.memmove(ipc.getPtr(), handle, IPC_HANDLE_BYTES)
        pointer = self._call(runtime.cudaIpcOpenMemHandle, ipc,
                             runtime.cudaIpcMemLazyEnablePeerAccess)
        return int(pointer)

    def allocation_size(self, pointer: int, device_id: int) -> int:
        self._call(self._runtime.cudaSetDevice, device_id)
        _base, size = self._call(self._driver.cuMemGetAddressRange,
                                 self._driver.CUdeviceptr(pointer))
        return int(size)

    def close_ipc_handle(self, pointer: int, device_id: int) -> None:
        self._call(self._runtime.cudaSetDevice, device_id)
        self._call(self._runtime.cudaIpcCloseMemHandle, pointer)

    def copy_to_host(self, target: int, source: int, byte_size: int, device_id: int) -> None:
        # Device -> pageable host: CUDA returns only once the copy has completed.
        runtime = self._runtime
        self._call(runtime.cudaSetDevice, device_id)
        kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._call(runtime.cudaMemcpy, target, source, byte_size, kind)

    def copy_to_device(self, target: int, source: int, byte_size: int, device_id: int) -> None:
        runtime = self._runtime
        self._call(runtime.cudaSetDevice, device_id)
        kind = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._call(runtime.cudaMemcpy, target, source, byte_size, kind)
        # From pageable memory cudaMemcpy may return once the bytes are staged, before the DMA
        # to the device is done; whoever reads them next (the client, another process) is
        # told to only after this returns.
        self._call(runtime.cudaStreamSynchronize, DEFAULT_STREAM)


def present_runtime() -> CudaRuntime | None:
    """cuda-bindings' runtime where this process sees a GPU and has cuda-bindings, else
    ``None``. Imports cuda-bindings but makes no CUDA call (no context)."""
    if not visible_gpus() or importlib.util.find_spec("cuda.bindings") is None:
        return None
    try:
        return BindingsRuntime()
    except ImportError:
        return None


def _close(runtime: CudaRuntime, pointer: int, device_id: int, serial: int,
           sent_to: set[str], on_closed: OnClosed | None) -> None:
    try:
        runtime.close_ipc_handle(pointer, device_id)
    except CudaCallFailed:
        pass  # nothing is left to tell: the region is already gone from every list
    if sent_to and on_closed is not None:
        on_closed(serial, frozenset(sent_to))


@dataclass(eq=False)
class CudaRegion:
    """One registered CUDA region: ``byte_size`` bytes of device memory at ``pointer``."""

    name: str
    device_id: int
    byte_size: int
    pointer: int
    runtime: CudaRuntime
    handle: bytes = b""
    on_closed: OnClosed | None = field(default=None, repr=False)
    serial: int = field(default_factory=lambda: next(_serials))
    # The executors sent windows of it (``inferd.kernel.actors.scheduler.cuda_windows``), told when
    # it closes.
    sent_to: set[str] = field(default_factory=set)
    _finalizer: weakref.finalize[..., CudaRegion] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Closes the handle once neither the registry nor a request in flight holds the region.
        self._finalizer = weakref.finalize(
            self, _close, self.runtime, self.pointer, self.device_id, self.serial,
            self.sent_to, self.on_closed
        )
        _live[self.serial] = self

    def window(self, offset: int, byte_size: int) -> DeviceWindow:
        """``byte_size`` bytes from ``offset`` as an executor is sent them (bounds checked by
        the caller)."""
        return DeviceWindow(self.handle, self.device_id, offset, byte_size, self.serial)

    def read(self, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes from ``offset`` copied into host memory (read-only)."""
        host = bytearray(byte_size)
        if byte_size:
            address = ctypes.addressof((ctypes.c_char * byte_size).from_buffer(host))
            try:
                self.runtime.copy_to_host(address, self.pointer + offset, byte_size,
                                          self.device_id)
            except CudaCallFailed as error:
                raise Internal(f"failed to read CUDA shared memory region '{self.name}': "
                               f"{error}") from None
        return memoryview(host).toreadonly()

    def write(self, offset: int, data: memoryview) -> None:
        """``data`` copied onto the device at ``offset``; the caller checked the bounds."""
        if data.nbytes:
            array = np.frombuffer(data, dtype=np.uint8)
            address = int(array.ctypes.data)
            try:
                self.runtime.copy_to_device(self.pointer + offset, address, data.nbytes,
                                            self.device_id)
            except CudaCallFailed as error:
                raise Internal(f"failed to write CUDA shared memory region '{self.name}': "
                               f"{error}") from None

    def close(self) -> None:
        self._finalizer()


def live_region(serial: int) -> CudaRegion | None:
    """The region of that serial while anything still holds it (a window's ``region``)."""
    return _live.get(serial)


def written_window(window: DeviceWindow, byte_size: int) -> DeviceWindow:
    """The part of ``window`` an output of ``byte_size`` bytes was written in."""
    return replace(window, byte_size=byte_size)


def output_too_small(name: str, byte_size: int, needed: int) -> InvalidArgument:
    """An output of ``needed`` bytes asked in a window of ``byte_size``. Triton answers 500
    here; the client chose the size, so it is a client error."""
    return InvalidArgument(
        f"shared memory size specified with the request for output '{name}' ({byte_size} "
        f"bytes) should be at least {needed} bytes to hold the results")
