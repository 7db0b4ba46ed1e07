"""The TensorRT backend around the engine call, with only that boundary replaced: a fake
``tensorrt`` module (runtime, engine, execution context, as TensorRT 10's name-based API) and
a fake CUDA runtime (cuda-python's call shapes, device memory as host buffers), so the
backend's own logic runs for real: auto-complete from the engine, config checks, profiles,
batching through the kernel's skeleton, shapes, copies in and out, errors. The fakes refuse
what the real ones would (``test_the_fake_refuses_what_cuda_and_tensorrt_refuse``): a copy
the other way than its kind, a host read before the stream is synchronized (copies and runs
happen at the synchronize), a run before every I/O tensor has a device address, a shape
outside the profile, an engine run from a thread whose current CUDA device is not its
stream's (CUDA's current device is per thread, 0 where the thread set none); shapes come from
the context per tensor name, -1 where they depend on the data. No TensorRT here, nor on the
GPU machine (its wheels do not fit a device run): a real engine has never run under these
tests."""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from inferd.kernel.modelconfig.reading import parse_config_text
from inferd.kernel.sdk.backends import ModelContext
from inferd.plugins.backends.tensorrt import engine as trt_engine
from inferd.plugins.backends.tensorrt.backend import TensorRTBackend
from inferd.protocols.errors import InvalidArgument, Unavailable, Unsupported
from inferd.protocols.messages import InferRequest, InferResponse
from inferd.protocols.tensors import from_numpy


class DataType(Enum):
    FLOAT = 0
    INT32 = 3
    INT4 = 99  # a type inferd cannot serve


class TensorIOMode(Enum):
    INPUT = 1
    OUTPUT = 2


class FakeCuda:
    """cuda-python's runtime calls, each returning (error, *values), checked as CUDA would:
    device memory is host memory the fake hands out (``cudaMalloc``) and knows by range; a
    copy must go the way its kind says (host -> device, device -> host, inside allocated
    blocks); copies and engine runs are queued on their stream and happen only at
    ``cudaStreamSynchronize``, so a host that reads too early reads nothing."""

    class cudaMemcpyKind:  # noqa: N801 - cuda-python's name
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    STREAM = 7

    def __init__(self) -> None:
        self.blocks: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.freed = 0
        self.queued: list[Callable[[], None]] = []
        self.synchronized = 0
        self._thread = threading.local()  # CUDA's current device is each thread's own
        self.stream_device: int | None = None
        self.set_devices: list[tuple[str, int]] = []  # (thread name, device) of each set

    def device_block(self, pointer: int, size: int) -> bool:
        return any(base <= pointer and pointer + size <= base + len(block)
                   for base, block in self.blocks.items())

    def current_device(self) -> int:
        return getattr(self._thread, "device", 0)  # a thread that set none is on device 0

    def cudaSetDevice(self, device: int) -> tuple[int]:  # noqa: N802
        self._thread.device = device
        self.set_devices.append((threading.current_thread().name, device))
        return (0,)

    def cudaStreamCreate(self) -> tuple[int, int]:  # noqa: N802
        self.stream_device = self.current_device()
        return 0, self.STREAM  # cuda-python's cudaStream_t: int() of it is the handle

    def cudaStreamSynchronize(self, stream: int) -> tuple[int]:  # noqa: N802
        assert stream == self.STREAM
        for operation in self.queued:
            operation()
        self.queued.clear()
        self.synchronized += 1
        return (0,)

    def cudaStreamDestroy(self, stream: int) -> tuple[int]:  # noqa: N802
        assert not self.queued, "a stream destroyed with work still queued"
        return (0,)

    def cudaMalloc(self, size: int) -> tuple[int, int]:  # noqa: N802
        block = ctypes.create_string_buffer(size)
        self.blocks[ctypes.addressof(block)] = block
        return 0, ctypes.addressof(block)

    def cudaFree(self, pointer: int) -> tuple[int]:  # noqa: N802
        self.blocks.pop(pointer)
        self.freed += 1
        return (0,)

    def cudaMemcpyAsync(self, dst: int, src: int, size: int, kind: int,  # noqa: N802
                        stream: int) -> tuple[int]:
        assert stream == self.STREAM
        to_device = kind == self.cudaMemcpyKind.cudaMemcpyHostToDevice
        device, host = (dst, src) if to_device else (src, dst)
        if not self.device_block(device, size) or self.device_block(host, 1):
            return (1,)  # cudaErrorInvalidValue: the copy goes another way than its kind
        self.queued.append(lambda: ctypes.memmove(dst, src, size))
        return (0,)


class FakeEngine:
    """TensorRT 10's engine for a network computing OUTPUT = INPUT * 2 + 1 (FP32 [-1, 4]) and
    SUM = the sum of each INPUT row ([-1, 1]), with one profile allowing batches of 1 to 8 (and
    a second allowing 16 to 32). ``data_dependent`` adds an output whose length depends on the
    values (as NonZero's)."""

    num_optimization_profiles = 2

    def __init__(self, tensors: dict[str, tuple[TensorIOMode, DataType, tuple[int, ...]]]):
        self.tensors = tensors
        self.num_io_tensors = len(tensors)

    def get_tensor_name(self, index: int) -> str:
        return list(self.tensors)[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self.tensors[name][0]

    def get_tensor_dtype(self, name: str) -> DataType:
        return self.tensors[name][1]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][2]

    def get_tensor_profile_shape(self, name: str, profile: int) -> list[tuple[int, ...]]:
        assert self.tensors[name][0] == TensorIOMode.INPUT, "profiles are the inputs'"
        low, high = ((1, 8), (16, 32))[profile]
        return [(low, 4), (high, 4), (high, 4)]

    def create_execution_context(self) -> FakeContext:
        return FakeContext(self)


class FakeContext:
    """An execution context that refuses what TensorRT refuses: a shape outside the
    profile, a run before every input has its shape and every I/O tensor a device address."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.profile = 0
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.cuda: FakeCuda | None = None  # the runtime whose stream runs the engine
        self.runs = 0

    def set_optimization_profile_async(self, profile: int, stream: int) -> bool:
        assert stream == FakeCuda.STREAM  # TensorRT takes the stream's handle, an int
        self.profile = profile
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        assert self.engine.get_tensor_mode(name) == TensorIOMode.INPUT
        low, _, high = self.engine.get_tensor_profile_shape(name, self.profile)
        if not low[0] <= shape[0] <= high[0] or tuple(shape[1:]) != tuple(high[1:]):
            return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        """Per name, as TensorRT: an input's set shape, an output's inferred from them, -1
        where the input shapes are not all set or the size depends on the data."""
        if name in self.shapes:
            return self.shapes[name]
        batch = self.shapes["INPUT"][0] if "INPUT" in self.shapes else -1
        return {"OUTPUT": (batch, 4), "SUM": (batch, 1), "NONZERO": (-1,)}[name]

    def set_tensor_address(self, name: str, pointer: int) -> bool:
        assert name in self.engine.tensors, f"no tensor '{name}' in the engine"
        self.addresses[name] = pointer
        return True

    def execute_async_v3(self, stream: int) -> bool:
        assert stream == FakeCuda.STREAM and self.cuda is not None
        cuda = self.cuda
        if cuda.current_device() != cuda.stream_device:
            return False  # CUDA: a kernel launch into a stream of another device fails
        for name, (mode, _, _) in self.engine.tensors.items():
            if mode == TensorIOMode.INPUT and name not in self.shapes:
                return False  # TensorRT: not every input shape is specified
            pointer = self.addresses.get(name)
            shape = self.get_tensor_shape(name)
            size = 4 * int(np.prod(shape)) if min(shape) >= 0 else 1
            if pointer is None or not cuda.device_block(pointer, size):
                return False  # TensorRT: a tensor without a (device) address
        count = int(np.prod(self.shapes["INPUT"]))
        addresses = dict(self.addresses)

        def compute() -> None:
            source = np.ctypeslib.as_array((ctypes.c_float * count).from_address(
                addresses["INPUT"])).reshape(-1, 4)
            doubled = np.ctypeslib.as_array((ctypes.c_float * count).from_address(
                addresses["OUTPUT"])).reshape(-1, 4)
            doubled[:] = source * 2 + 1
            if "SUM" in addresses:
                sums = np.ctypeslib.as_array((ctypes.c_float * (count // 4)).from_address(
                    addresses["SUM"]))
                sums[:] = source.sum(axis=1)

        cuda.queued.append(compute)
        self.runs += 1
        return True


class FakeLogger:
    WARNING = 2

    def __init__(self, level: int) -> None:
        self.level = level


def fake_tensorrt(engine: FakeEngine | None, cuda: FakeCuda) -> Any:
    def deserialize(data: bytes) -> FakeEngine | None:
        if engine is not None:
            original = engine.create_execution_context

            def create() -> FakeContext:
                context = original()
                context.cuda = cuda  # its runs go on the stream the backend synchronizes
                return context

            engine.create_execution_context = create  # type: ignore[method-assign]
        return engine

    runtime = SimpleNamespace(deserialize_cuda_engine=deserialize)
    return SimpleNamespace(Logger=FakeLogger, Runtime=lambda logger: runtime,
                           TensorIOMode=TensorIOMode)


def engine_of(output_type: DataType = DataType.FLOAT, *, sums: bool = False,
              data_dependent: bool = False) -> FakeEngine:
    tensors = {"INPUT": (TensorIOMode.INPUT, DataType.FLOAT, (-1, 4)),
               "OUTPUT": (TensorIOMode.OUTPUT, output_type, (-1, 4))}
    if sums:
        tensors["SUM"] = (TensorIOMode.OUTPUT, DataType.FLOAT, (-1, 1))
    if data_dependent:
        tensors["NONZERO"] = (TensorIOMode.OUTPUT, DataType.FLOAT, (-1,))
    return FakeEngine(tensors)


def backend(engine: FakeEngine | None, cuda: FakeCuda | None = None) -> TensorRTBackend:
    cuda = cuda or FakeCuda()
    trt = fake_tensorrt(engine, cuda)
    return TensorRTBackend(import_runtime=lambda: (trt, cuda))


def context(tmp_path: Path, config_text: str = "") -> ModelContext:
    version = tmp_path / "plan" / "1"
    version.mkdir(parents=True)
    (version / "model.plan").write_bytes(b"engine bytes")
    text = 'name: "plan" platform: "tensorrt_plan" ' + (
        config_text or "instance_group [{ kind: KIND_GPU count: 1 gpus: [0] }]")
    return ModelContext(name="plan", version=1, model_dir=tmp_path / "plan",
                        config=parse_config_text(text, "config.pbtxt"), auto_complete=True,
                        options={})


def request(rows: np.ndarray, request_id: str) -> InferRequest:
    return InferRequest("plan", (from_numpy("INPUT", rows),), id=request_id)


def test_the_config_is_completed_from_the_engine_and_batches_run_through_it(
        tmp_path: Path) -> None:
    cuda = FakeCuda()
    model = backend(engine_of(), cuda).load_model(context(tmp_path))
    config = model.config
    assert config.max_batch_size == 8  # the first profile's largest batch
    assert [(i.name, model_config_pb2.DataType.Name(i.data_type), list(i.dims))
            for i in config.input] == [("INPUT", "TYPE_FP32", [4])]
    assert [o.name for o in config.output] == ["OUTPUT"]

    instance = model.create_instance(0)
    first = np.arange(8, dtype=np.float32).reshape(2, 4)
    second = np.full((1, 4), 10, np.float32)
    results = instance.execute([request(first, "a"), request(second, "b")])
    assert all(isinstance(result, InferResponse) for result in results)
    np.testing.assert_array_equal(results[0].outputs[0].data, first * 2 + 1)  # type: ignore[union-attr]
    np.testing.assert_array_equal(results[1].outputs[0].data, second * 2 + 1)  # type: ignore[union-attr]
    instance.close()
    assert cuda.blocks == {} and cuda.freed == 2  # every device buffer given back


def test_a_batch_outside_the_profile_fails_with_the_reason(tmp_path: Path) -> None:
    model = backend(engine_of()).load_model(context(
        tmp_path, "max_batch_size: 32 instance_group [{ kind: KIND_GPU gpus: [0] }]"))
    [result] = model.create_instance(0).execute(
        [request(np.zeros((9, 4), np.float32), "x")])
    assert isinstance(result, InvalidArgument)
    assert "outside the engine's optimization profile" in result.message


def test_the_groups_profile_picks_the_instances_optimization_profile(tmp_path: Path) -> None:
    model = backend(engine_of()).load_model(context(
        tmp_path, 'max_batch_size: 32 instance_group [{ kind: KIND_GPU gpus: [0] profile: "1" }]'))
    [result] = model.create_instance(0).execute([request(np.ones((16, 4), np.float32), "big")])
    assert isinstance(result, InferResponse), result
    with pytest.raises(InvalidArgument, match="profile 2 does not exist; the engine has 2"):
        backend(engine_of()).load_model(context(
            tmp_path / "other",
            'instance_group [{ kind: KIND_GPU gpus: [0] profile: "2" }]'))


@pytest.mark.parametrize("config_text, message", [
    ('input [{ name: "WRONG" data_type: TYPE_FP32 dims: [4] }] '
     "instance_group [{ kind: KIND_GPU gpus: [0] }]",
     "unexpected input 'WRONG', the engine's inputs are: INPUT"),
    ('max_batch_size: 8 input [{ name: "INPUT" data_type: TYPE_INT32 dims: [4] }] '
     "instance_group [{ kind: KIND_GPU gpus: [0] }]",
     "input 'INPUT' has data type TYPE_INT32 but the engine's is TYPE_FP32"),
    ('max_batch_size: 8 input [{ name: "INPUT" data_type: TYPE_FP32 dims: [5] }] '
     "instance_group [{ kind: KIND_GPU gpus: [0] }]",
     r"input 'INPUT': the configuration's shape \[5\] does not match the engine's shape \[4\]"),
])
def test_a_config_that_disagrees_with_the_engine_fails_the_load(
        tmp_path: Path, config_text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        backend(engine_of()).load_model(context(tmp_path, config_text))


def test_what_cannot_run_fails_the_load_with_a_clear_reason(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="is KIND_CPU, but TensorRT engines run on GPUs only"):
        backend(engine_of()).load_model(
            context(tmp_path / "a", "instance_group [{ kind: KIND_CPU }]"))
    with pytest.raises(InvalidArgument, match="could not deserialize model.plan"):
        backend(None).load_model(context(tmp_path / "b"))
    with pytest.raises(InvalidArgument, match="output 'OUTPUT' has a data type inferd cannot"):
        backend(engine_of(DataType.INT4)).load_model(context(tmp_path / "c"))


def test_without_tensorrt_the_model_is_unavailable_with_the_install_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail, also where tensorrt is installed.
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(Unavailable, match="tensorrt is not installed on this machine; install "
                       r"inferd\[tensorrt\]"):
        TensorRTBackend().load_model(context(tmp_path))


def test_the_fake_refuses_what_cuda_and_tensorrt_refuse() -> None:
    # The boundary the tests above run against: were the backend to copy the wrong way, read
    # before synchronizing or leave a tensor without an address, these are what it would meet.
    cuda = FakeCuda()
    _, device = cuda.cudaMalloc(16)
    host = ctypes.create_string_buffer(b"\x01" * 16, 16)
    to_host, to_device = (cuda.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                          cuda.cudaMemcpyKind.cudaMemcpyHostToDevice)
    assert cuda.cudaMemcpyAsync(device, ctypes.addressof(host), 16, to_host, 7) == (1,)
    assert cuda.cudaMemcpyAsync(ctypes.addressof(host), device, 16, to_device, 7) == (1,)
    assert cuda.cudaMemcpyAsync(device, ctypes.addressof(host), 17, to_device, 7) == (1,)
    assert cuda.cudaMemcpyAsync(device, ctypes.addressof(host), 16, to_device, 7) == (0,)
    assert cuda.blocks[device].raw == bytes(16)  # queued, not done
    cuda.cudaStreamSynchronize(7)
    assert cuda.blocks[device].raw == b"\x01" * 16

    trt_context = engine_of(sums=True).create_execution_context()
    trt_context.cuda = cuda
    assert trt_context.get_tensor_shape("OUTPUT") == (-1, 4)  # until the input has its shape
    assert not trt_context.set_input_shape("INPUT", (9, 4))  # outside profile 0
    assert trt_context.set_input_shape("INPUT", (2, 4))
    assert (trt_context.get_tensor_shape("OUTPUT"), trt_context.get_tensor_shape("SUM")) == (
        (2, 4), (2, 1))
    _, inputs = cuda.cudaMalloc(32)
    _, outputs = cuda.cudaMalloc(32)
    trt_context.set_tensor_address("INPUT", inputs)
    trt_context.set_tensor_address("OUTPUT", outputs)
    assert not trt_context.execute_async_v3(7)  # SUM has no address
    trt_context.set_tensor_address("SUM", ctypes.addressof(host))
    assert not trt_context.execute_async_v3(7)  # a host address is no device address


def test_outputs_take_their_own_shapes_and_a_request_may_ask_for_one(tmp_path: Path) -> None:
    cuda = FakeCuda()
    model = backend(engine_of(sums=True), cuda).load_model(context(tmp_path))
    assert [(o.name, list(o.dims)) for o in model.config.output] == [
        ("OUTPUT", [4]), ("SUM", [1])]
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    only_sum = InferRequest("plan", (from_numpy("INPUT", rows),), outputs=("SUM",))
    [result] = model.create_instance(0).execute([only_sum])
    assert isinstance(result, InferResponse), result
    assert [t.name for t in result.outputs] == ["SUM"]
    np.testing.assert_array_equal(result.outputs[0].data, rows.sum(axis=1, keepdims=True))
    assert cuda.synchronized == 1 and not cuda.queued


def test_a_config_that_leaves_out_an_engine_output_fails_the_load_as_in_triton(
        tmp_path: Path) -> None:
    # Triton's auto-complete keeps a config's own output list; the engine output it leaves out
    # would have no address at execution, so the load fails naming it.
    with pytest.raises(InvalidArgument, match="expected configuration for output 'SUM' for plan"):
        backend(engine_of(sums=True)).load_model(context(
            tmp_path, 'max_batch_size: 8 output [{ name: "OUTPUT" data_type: TYPE_FP32 '
            "dims: [4] }] instance_group [{ kind: KIND_GPU gpus: [0] }]"))


def test_a_data_dependent_output_shape_is_refused_by_name(tmp_path: Path) -> None:
    model = backend(engine_of(data_dependent=True)).load_model(context(tmp_path))
    [result] = model.create_instance(0).execute([request(np.ones((2, 4), np.float32), "d")])
    assert isinstance(result, Unsupported)
    assert result.message.startswith("output 'NONZERO' has a data-dependent shape [-1]")


def test_each_batch_sets_the_device_on_the_thread_that_runs_it(tmp_path: Path) -> None:
    # The context is made on the loading thread, on device 1; the executor runs its batches on
    # threads of its own, which CUDA puts on device 0 until they set another.
    cuda = FakeCuda()
    engine = engine_of()
    engine = fake_tensorrt(engine, cuda).Runtime(None).deserialize_cuda_engine(b"")
    context = trt_engine.Context(engine, cuda, 0, device=1)
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    with ThreadPoolExecutor(1, thread_name_prefix="batch") as batches:
        (result,) = batches.submit(context.run, {"INPUT": rows},
                                   [("OUTPUT", np.dtype(np.float32))]).result()
    np.testing.assert_array_equal(result, rows * 2 + 1)
    assert [device for thread, device in cuda.set_devices if thread.startswith("batch")] == [1]
    context.close()
