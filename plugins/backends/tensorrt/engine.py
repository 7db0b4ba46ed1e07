"""The TensorRT backend's boundary with TensorRT and CUDA: an engine's signature, and running
one execution context on one CUDA stream.

Owns every call into ``tensorrt`` (10.x, the name-based I/O API: ``num_io_tensors``,
``get_tensor_name``/``_mode``/``_dtype``/``_shape``, ``get_tensor_profile_shape``,
``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``) and into the CUDA runtime
(``cuda-python``'s ``cuda.bindings.runtime``: device buffers, copies, streams), so the rest of
the backend, and its unit tests, see two small objects instead: ``Signature`` (what the
engine says of its tensors) and ``Context`` (set shapes, copy in, run, copy out). Both modules
are imported here, lazily, inside the executor process of a GPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.protocols.errors import Internal, InvalidArgument, Unavailable, Unsupported

MISSING_TENSORRT = (
    "tensorrt is not installed on this machine; install inferd[tensorrt] (NVIDIA's tensorrt "
    "wheels, with cuda-python) on a machine with an NVIDIA GPU"
)

# TensorRT's DataType names -> config types (the types TensorRT and Triton share).
CONFIG_TYPES = {
    "FLOAT": model_config_pb2.TYPE_FP32, "HALF": model_config_pb2.TYPE_FP16,
    "BF16": model_config_pb2.TYPE_BF16, "INT8": model_config_pb2.TYPE_INT8,
    "UINT8": model_config_pb2.TYPE_UINT8, "INT32": model_config_pb2.TYPE_INT32,
    "INT64": model_config_pb2.TYPE_INT64, "BOOL": model_config_pb2.TYPE_BOOL,
}


@dataclass(frozen=True, slots=True)
class EngineTensor:
    """One I/O tensor of an engine: ``shape`` with -1 where it is dynamic, and for an input
    the (min, max) shapes each optimization profile allows."""

    name: str
    data_type: int  # a model_config_pb2 TYPE_*, TYPE_INVALID when the config cannot say it
    shape: tuple[int, ...]
    profiles: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Signature:
    inputs: tuple[EngineTensor, ...]
    outputs: tuple[EngineTensor, ...]
    profile_count: int


def import_tensorrt() -> tuple[Any, Any]:
    """``tensorrt`` and the CUDA runtime module, or ``Unavailable`` saying what is missing."""
    try:
        tensorrt = importlib.import_module("tensorrt")
    except ImportError as error:
        raise Unavailable(f"{MISSING_TENSORRT} ({error})") from None
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return tensorrt, importlib.import_module(name)
        except ImportError:
            continue
    raise Unavailable("the CUDA runtime of cuda-python is not installed; install cuda-python "
                      "beside tensorrt")


def load_engine(tensorrt: Any, path: Path) -> Any:
    logger = tensorrt.Logger(tensorrt.Logger.WARNING)
    runtime = tensorrt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise InvalidArgument(
            f"TensorRT could not deserialize {path.name}: built by another TensorRT version or"
            " for another GPU? (see the executor's log)"
        )
    return engine


def signature(tensorrt: Any, engine: Any) -> Signature:
    inputs, outputs = [], []
    profiles = int(engine.num_optimization_profiles)
    for index in range(int(engine.num_io_tensors)):
        name = engine.get_tensor_name(index)
        dtype = engine.get_tensor_dtype(name)
        data_type = CONFIG_TYPES.get(getattr(dtype, "name", str(dtype)),
                                     model_config_pb2.TYPE_INVALID)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        if engine.get_tensor_mode(name) == tensorrt.TensorIOMode.INPUT:
            bounds = []
            for profile in range(profiles):
                smallest, _, largest = engine.get_tensor_profile_shape(name, profile)
                bounds.append((tuple(int(d) for d in smallest), tuple(int(d) for d in largest)))
            inputs.append(EngineTensor(name, data_type, shape, tuple(bounds)))
        else:
            outputs.append(EngineTensor(name, data_type, shape))
    return Signature(tuple(inputs), tuple(outputs), profiles)


def _check(result: Any, what: str) -> Any:
    """cuda-python returns (error, *values); raise on an error, return the values."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if int(error) != 0:
        raise Internal(f"CUDA {what} failed: {error}")
    return values[0] if len(values) == 1 else values


class Context:
    """One execution context on one CUDA stream of device ``device``, with device buffers that
    grow on need: what one instance runs its batches with. Not thread-safe (an instance runs
    one batch at a time), but any thread may run a batch: CUDA's current device is the calling
    thread's, so each run sets it first."""

    def __init__(self, engine: Any, cuda: Any, profile: int, device: int) -> None:
        self._cuda = cuda
        self._device = device
        _check(cuda.cudaSetDevice(device), "cudaSetDevice")
        self._stream = _check(cuda.cudaStreamCreate(), "cudaStreamCreate")
        self._stream_handle = int(self._stream)  # what TensorRT's calls take
        self._context = engine.create_execution_context()
        if self._context is None:
            raise Internal("TensorRT could not create an execution context (out of GPU memory?)")
        if profile:
            self._context.set_optimization_profile_async(profile, self._stream_handle)
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (device pointer, bytes)

    def run(self, inputs: dict[str, np.ndarray], outputs: Sequence[tuple[str, np.dtype]]
            ) -> list[np.ndarray]:
        cuda, context = self._cuda, self._context
        # The executor's threads run batches, not the thread that made the context: a thread
        # that never set a device is on device 0, and TensorRT's kernels on this stream need
        # the stream's own device.
        _check(cuda.cudaSetDevice(self._device), "cudaSetDevice")
        host_to_device = cuda.cudaMemcpyKind.cudaMemcpyHostToDevice
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            if not context.set_input_shape(name, tuple(array.shape)):
                raise InvalidArgument(f"input '{name}' of shape {list(array.shape)} is outside"
                                      " the engine's optimization profile")
            pointer = self._buffer(name, array.nbytes)
            _check(cuda.cudaMemcpyAsync(pointer, array.ctypes.data, array.nbytes,
                                        host_to_device, self._stream), "copy to the GPU")
            context.set_tensor_address(name, pointer)
        results = []
        for name, dtype in outputs:
            # The context, once every input has its shape, knows each output's by name; a
            # dimension still -1 depends on the data (TensorRT would need an output allocator).
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise Unsupported(
                    f"output '{name}' has a data-dependent shape {list(shape)}; inferd's "
                    "TensorRT backend runs engines whose output shapes follow from the input "
                    "shapes only")
            result = np.empty(shape, dtype)
            context.set_tensor_address(name, self._buffer(name, result.nbytes))
            results.append(result)
        if not context.execute_async_v3(self._stream_handle):
            raise Internal("TensorRT failed to run the engine (see the executor's log)")
        device_to_host = cuda.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for (name, _), result in zip(outputs, results, strict=True):
            _check(cuda.cudaMemcpyAsync(result.ctypes.data, self._buffers[name][0],
                                        result.nbytes, device_to_host, self._stream),
                   "copy from the GPU")
        # The copies are queued on the stream: the host may read the results only after it.
        _check(cuda.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        return results

    def _buffer(self, name: str, nbytes: int) -> int:
        pointer, size = self._buffers.get(name, (0, 0))
        if nbytes > size:
            if pointer:
                _check(self._cuda.cudaFree(pointer), "cudaFree")
            size = max(nbytes, 2 * size, 256)
            pointer = int(_check(self._cuda.cudaMalloc(size), "cudaMalloc"))
            self._buffers[name] = (pointer, size)
        return pointer

    def close(self) -> None:
        self._cuda.cudaSetDevice(self._device)  # closed by whichever thread unloads
        for pointer, _ in self._buffers.values():
            self._cuda.cudaFree(pointer)
        self._buffers.clear()
        self._cuda.cudaStreamDestroy(self._stream)
        self._context = None
