"""CUDA shared memory in a GPU executor (inferd.kernel.actors.executor.device_memory) over the
real ``BindingsRuntime``, with only cuda-bindings replaced (``CudaBindings``: it records each
call, and a host -> device copy reaches the device only at the stream's synchronize, as CUDA
documents for pageable memory): an output a backend left on the host is on the device when
``finish`` hands the response back to be sent, and the device the executor opens a region on
is the one its pinning makes of the server's GPU id."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from inferd.kernel.actors.executor.device_memory import DeviceMemory
from inferd.kernel.runtime.devices import pinned_environment
from inferd.kernel.sdk.devices import local_device_id
from inferd.protocols.device_tensors import window_of
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import DeviceWindow, InferRequest, InferResponse, Tensor
from tests.plugins.shared_memory.test_cuda import CudaBindings, bindings_runtime

VALUES = np.arange(16, dtype=np.float32)
HOST_INSTANCE = SimpleNamespace(takes_device_memory=False)  # a backend that takes host memory


def test_an_output_copied_onto_the_device_is_there_before_the_response_goes() -> None:
    bindings = CudaBindings()
    handle, memory = bindings.allocate(64)
    device = DeviceMemory(lambda: bindings_runtime(bindings), local_device=lambda gpu: gpu)
    window = DeviceWindow(handle, 0, 0, 64, 3)
    request = InferRequest("m", (), output_windows={"OUT0": window})
    prepared = device.prepare((request,), HOST_INSTANCE)  # type: ignore[arg-type]
    (response,) = device.finish(prepared, [InferResponse("m", "1", (
        Tensor("OUT0", "FP32", (16,), VALUES),))])
    assert isinstance(response, InferResponse) and window_of(response.outputs[0]) == window
    # What the main process sends on is only the window: the bytes must be the device's now.
    assert bindings.staged == [] and bytes(memory) == VALUES.tobytes()
    names = [call[0] for call in bindings.calls]
    assert names[names.index("cudaMemcpy"):] == ["cudaMemcpy", "cudaStreamSynchronize"]


def test_a_pinned_executor_opens_the_servers_gpu_as_its_device_zero() -> None:
    bindings = CudaBindings()
    handle, _ = bindings.allocate(64)
    # The server sees CUDA_VISIBLE_DEVICES=3,1; the region is on its GPU 1 (physical 1), and
    # the executor of GPU 1 sees that one device alone.
    executor = pinned_environment(1, {"CUDA_VISIBLE_DEVICES": "3,1"})
    device = DeviceMemory(lambda: bindings_runtime(bindings),
                          local_device=lambda gpu: local_device_id(gpu, executor))
    device.opened(DeviceWindow(handle, 1, 0, 64, 5))
    assert bindings.calls[0] == ("cudaSetDevice", 0)
    with pytest.raises(Unavailable, match="GPU 0 is not visible in this executor process"):
        device.opened(DeviceWindow(handle, 0, 0, 64, 6))
