"""Tensors whose bytes stay in a client's CUDA shared memory: what the kernel hands a GPU
instance instead of a host copy.

Owns ``DeviceArray``, the ``Tensor.data`` of such a tensor: a numpy array of the tensor's dtype
and shape that owns no memory (every stride is zero; its values are not the tensor's and must
never be read) and carries ``window``, the ``DeviceWindow`` its bytes lie in. In the process
that holds the memory it also carries ``owner``, the object that keeps the memory valid (the
main process's registered region, an executor's opened IPC handle), and, in an executor,
``pointer``, the device address of the window's first byte. A reshape keeps all three (a slice
would too, wrongly: none is ever taken). On the kernel wire such a tensor travels as its window
(``inferd.protocols.wire.codec``), never as bytes. Whatever needs the values on the host copies them
from the device first (``inferd.kernel.actors.scheduler.cuda_windows``,
``inferd.kernel.actors.executor.device_memory``). Pure: no CUDA, no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import DeviceWindow, InferRequest, Tensor
from inferd.protocols.tensors import checked_shape, numpy_dtype

_REFERENCE = "cuda"  # the first item of a device tensor's reference on the wire


class DeviceArray(np.ndarray):
    """The stand-in data of a tensor in device memory (see the module docstring)."""

    window: DeviceWindow
    owner: Any = None
    pointer: int = 0

    def __array_finalize__(self, source: Any) -> None:
        if source is not None:
            self.window = getattr(source, "window", None)  # type: ignore[assignment]
            self.owner = getattr(source, "owner", None)
            self.pointer = getattr(source, "pointer", 0)


def device_array(datatype: str, shape: tuple[int, ...], window: DeviceWindow,
                 owner: Any = None, pointer: int = 0) -> DeviceArray:
    dtype = numpy_dtype(datatype)
    placeholder = np.lib.stride_tricks.as_strided(
        np.zeros(1, dtype), shape, (0,) * len(shape), writeable=False)
    array = placeholder.view(DeviceArray)
    array.window, array.owner, array.pointer = window, owner, pointer
    return array


def device_tensor(name: str, datatype: str, shape: tuple[int, ...], window: DeviceWindow,
                  owner: Any = None, pointer: int = 0) -> Tensor:
    """A tensor of ``datatype`` and ``shape`` whose bytes are ``window``, which must hold
    exactly them (BYTES never lies on a device: its elements vary in size)."""
    if datatype == "BYTES":
        raise InvalidArgument(f"tensor '{name}': BYTES data cannot stay in device memory")
    dims, count = checked_shape(name, shape)
    expected = count * numpy_dtype(datatype).itemsize
    if window.byte_size != expected:
        raise InvalidArgument(
            f"tensor '{name}' of datatype {datatype} and shape {list(dims)} needs "
            f"{expected} bytes, its device window holds {window.byte_size}")
    return Tensor(name, datatype, dims, device_array(datatype, dims, window, owner, pointer))


def window_of(tensor: Tensor) -> DeviceWindow | None:
    """The device window ``tensor``'s bytes lie in, or ``None`` for a tensor on the host."""
    data = tensor.data
    return data.window if type(data) is DeviceArray else None


def on_device(request: InferRequest) -> bool:
    """Whether any input of ``request`` lies in device memory or any output is to be
    written there."""
    if request.output_windows:
        return True
    return any(type(tensor.data) is DeviceArray for tensor in request.inputs)


def reference(window: DeviceWindow) -> tuple[Any, ...]:
    """What a tensor descriptor holds for a device tensor, in place of a buffer index."""
    return (_REFERENCE, window.handle, window.device_id, window.offset, window.byte_size,
            window.region)


def is_reference(where: Any) -> bool:
    return type(where) is tuple and len(where) == 6 and where[0] == _REFERENCE


def window_from(where: tuple[Any, ...]) -> DeviceWindow:
    """The window a descriptor's reference names, its fields checked (a peer sent it)."""
    _, handle, device_id, offset, byte_size, region = where
    if (type(handle) is not bytes or type(device_id) is not int or type(offset) is not int
            or type(byte_size) is not int or type(region) is not int
            or min(device_id, offset, byte_size) < 0):
        raise InvalidArgument("malformed device memory reference in a tensor descriptor")
    return DeviceWindow(handle, device_id, offset, byte_size, region)
