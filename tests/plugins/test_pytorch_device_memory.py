"""The pytorch backend on CUDA shared memory, without a GPU: torch is the real one except its
CUDA boundary (``FakeCudaTorch``: ``torch.as_tensor`` over a ``__cuda_array_interface__``
wraps the fake device's memory, host memory here, without a copy, and a stream synchronize
is counted), the CUDA calls are ``FakeCuda``'s. A batch goes through the executor's own path
(``execute_batch`` with a ``DeviceMemory``), as it does in a GPU executor: the instance wraps
each input at the region's pointer + offset in place, joins a batch on the device, and copies
each output device-to-device into its window; an instance on the CPU gets one copy each way,
in the executor."""

from __future__ import annotations

import ctypes
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from inferd.kernel.actors.executor.device_memory import DeviceMemory
from inferd.kernel.actors.executor.instance_slot import InstanceSlot, execute_batch
from inferd.kernel.sdk.backends import NONE_CANCELLED
from inferd.protocols.device_tensors import device_tensor, window_of
from inferd.protocols.messages import DeviceWindow, InferBatch, InferRequest, InferResponse
from tests.plugins.shared_memory.test_cuda import FakeCuda
from tests.plugins.test_pytorch_backend import AddsOneInPlace, load, save_script
from tests.services import import_or_missing

torch = import_or_missing("torch", "make setup installs it unless WITH_TORCH=0")
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated"),
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable"),
]

from inferd.plugins.backends.pytorch.instance import PyTorchInstance  # noqa: E402
from inferd.plugins.backends.pytorch.tensors import write_on_device  # noqa: E402

GPU = SimpleNamespace(type="cuda", index=0)  # the instance's device, as torch names it
CONFIG = """
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }]
"""


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class FakeCudaTorch:
    """torch, but a ``__cuda_array_interface__`` is wrapped over the fake device's memory
    (``wrapped``: its pointer, shape, typestr and device) and stream synchronizes counted."""

    def __init__(self) -> None:
        self.wrapped: list[tuple[int, tuple[int, ...], str, Any]] = []
        self.synchronized = 0
        self.held: list[Any] = []  # what torch's tensors hold, as real torch does
        stream = SimpleNamespace(synchronize=self._synchronize)
        self.cuda = SimpleNamespace(current_stream=lambda device=None: stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def _synchronize(self) -> None:
        self.synchronized += 1

    def as_tensor(self, value: Any, device: Any = None) -> Any:
        interface = value.__cuda_array_interface__
        pointer, _ = interface["data"]
        shape, typestr = interface["shape"], interface["typestr"]
        assert interface["version"] == 3 and interface["strides"] is None
        self.wrapped.append((pointer, shape, typestr, device))
        self.held.append(value)
        dtype = np.dtype(typestr)
        memory = (ctypes.c_char * (math.prod(shape) * dtype.itemsize)).from_address(pointer)
        return torch.from_numpy(np.frombuffer(memory, dtype).reshape(shape))


def instance_on(tmp_path: Path, module: Any, fake: FakeCudaTorch | None) -> PyTorchInstance:
    """The model's instance, on the fake GPU with ``fake``'s boundary (or on the CPU)."""
    on_cpu = load(save_script(tmp_path / "m", module), CONFIG).create_instance(0)
    if fake is None:
        assert isinstance(on_cpu, PyTorchInstance)
        return on_cpu
    return PyTorchInstance(fake, on_cpu._program, GPU, on_cpu._plan)  # type: ignore[arg-type]


class Device:
    """Two regions on the fake device, ``in`` holding rows 0..7 (one row: 4 floats, 16 bytes)
    and ``out``, and the executor's ``DeviceMemory`` over them."""

    def __init__(self) -> None:
        self.cuda = FakeCuda()
        self.in_handle, self.inputs = self.cuda.allocate(128)
        self.out_handle, self.outputs = self.cuda.allocate(128)
        self.inputs[:] = np.arange(32, dtype=np.float32).tobytes()
        self.memory = DeviceMemory(lambda: self.cuda, local_device=lambda gpu: gpu)

    def request(self, row: int, output_row: int | None) -> InferRequest:
        window = DeviceWindow(self.in_handle, 0, row * 16, 16, 1)
        windows = ({} if output_row is None else
                   {"OUTPUT__0": DeviceWindow(self.out_handle, 0, output_row * 16, 16, 2)})
        return InferRequest("m", (device_tensor("x", "FP32", (1, 4), window),), id=str(row),
                            output_windows=windows)

    def run(self, instance: PyTorchInstance, *requests: InferRequest
            ) -> list[InferResponse]:
        slot = InstanceSlot(instance, ThreadPoolExecutor(1), 1, device_memory=self.memory)
        outcome = execute_batch(slot, InferBatch("m", 1, 1, requests), NONE_CANCELLED)
        assert not isinstance(outcome, BaseException), outcome
        results = outcome[0]
        assert all(isinstance(r, InferResponse) for r in results), results
        return results  # type: ignore[return-value]

    def base(self, handle: bytes) -> int:
        return next(pointer for pointer, opened in self.cuda.opened.items() if opened == handle)

    def output_row(self, row: int) -> list[float]:
        return np.frombuffer(bytes(self.outputs[row * 16:(row + 1) * 16]), np.float32).tolist()


def test_inputs_are_wrapped_in_place_and_outputs_copied_device_to_device(
        tmp_path: Path) -> None:
    fake, device = FakeCudaTorch(), Device()
    instance = instance_on(tmp_path, Double(), fake)
    assert instance.takes_device_memory
    first, second, third = device.run(instance, device.request(1, 0), device.request(2, 5),
                                      device.request(3, None))
    inputs, outputs = device.base(device.in_handle), device.base(device.out_handle)
    # Each request's input wrapped at its pointer + offset, on the instance's device.
    assert fake.wrapped[:3] == [(inputs + 16 * row, (1, 4), "<f4", GPU) for row in (1, 2, 3)]
    # The two outputs asked in the region, each written into its window by the device.
    assert [entry[0] for entry in fake.wrapped[3:]] == [outputs, outputs + 5 * 16]
    assert device.output_row(0) == [8, 10, 12, 14] and device.output_row(5) == [16, 18, 20, 22]
    assert fake.synchronized == 2  # the client reads them once it has the response
    for response, row in ((first, 0), (second, 5)):
        (tensor,) = response.outputs
        window = window_of(tensor)
        assert window is not None and (window.offset, window.byte_size) == (row * 16, 16)
    (host,) = third.outputs  # no window asked: its values come back as always
    assert window_of(host) is None and host.data.tolist() == [[24, 26, 28, 30]]
    assert device.cuda.copies == []  # no copy through the host, either way
    assert len(device.memory) == 2  # each region opened once


def test_a_model_that_writes_its_input_gets_a_device_copy_of_the_clients_memory(
        tmp_path: Path) -> None:
    fake, device = FakeCudaTorch(), Device()
    (response,) = device.run(instance_on(tmp_path, AddsOneInPlace(), fake),
                             device.request(1, 0))
    assert device.output_row(0) == [5, 6, 7, 8]
    assert np.frombuffer(bytes(device.inputs[16:32]), np.float32).tolist() == [4, 5, 6, 7]
    assert device.cuda.copies == []


def test_an_instance_on_the_cpu_gets_one_copy_each_way_in_its_executor(
        tmp_path: Path) -> None:
    device = Device()
    instance = instance_on(tmp_path, Double(), None)
    assert not instance.takes_device_memory
    (response,) = device.run(instance, device.request(1, 0))
    assert device.output_row(0) == [8, 10, 12, 14]
    assert device.cuda.copies == ["to host", "to device"]
    window = window_of(response.outputs[0])
    assert window is not None and window.byte_size == 16


def test_a_device_to_device_copy_is_synchronized_before_the_write_returns() -> None:
    # torch's copy_ between CUDA tensors is only queued on the current stream; the client in
    # another process reads its window once it has the response, so the write waits for it.
    calls: list[str] = []

    class Window:
        def copy_(self, source: Any) -> None:
            calls.append("copy_")

    def current_stream(device: Any = None) -> Any:
        calls.append(f"current_stream {device.type}:{device.index}")
        return SimpleNamespace(synchronize=lambda: calls.append("synchronize"))

    fake = SimpleNamespace(bfloat16=torch.bfloat16, as_tensor=lambda value, device: Window(),
                           cuda=SimpleNamespace(current_stream=current_stream))
    write_on_device(fake, torch.ones(4), 4096, GPU)  # type: ignore[arg-type]
    assert calls == ["copy_", "current_stream cuda:0", "synchronize"]
