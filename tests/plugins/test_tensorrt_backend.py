"""The TensorRT backend around the engine call, with only that boundary replaced: a fake
``tensorrt`` module (runtime, engine, execution context, as TensorRT 10's name-based API) and
a fake CUDA runtime (cuda-python's call shapes, device memory as host bytearrays), so the
backend's own logic runs for real: auto-complete from the engine, config checks, profiles,
batching through the kernel's skeleton, shapes, copies in and out, errors. No GPU here: real
engines run only in ``bench/gpu_check.sh``'s world."""

from __future__ import annotations

import ctypes
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from inferd.kernel.backend import ModelContext
from inferd.kernel.modelconfig import parse_config_text
from inferd.plugins.backends.tensorrt.backend import TensorRTBackend
from inferd.protocols.errors import InvalidArgument, Unavailable
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
    """cuda-python's runtime calls, each returning (error, *values); memory is host memory."""

    class cudaMemcpyKind:  # noqa: N801 - cuda-python's name
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    def __init__(self) -> None:
        self.blocks: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.freed = 0

    def cudaSetDevice(self, device: int) -> tuple[int]:  # noqa: N802
        return (0,)

    def cudaStreamCreate(self) -> tuple[int, int]:  # noqa: N802
        return 0, 7  # cuda-python's cudaStream_t: int() of it is the handle

    def cudaStreamSynchronize(self, stream: int) -> tuple[int]:  # noqa: N802
        return (0,)

    def cudaStreamDestroy(self, stream: int) -> tuple[int]:  # noqa: N802
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
        ctypes.memmove(dst, src, size)
        return (0,)


class FakeEngine:
    """An engine computing OUTPUT = INPUT * 2 + 1 on FP32 [-1, 4], with one profile allowing
    batches of 1 to 8 (and a second allowing 16 to 32)."""

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
        low, high = ((1, 8), (16, 32))[profile]
        return [(low, 4), (high, 4), (high, 4)]

    def create_execution_context(self) -> FakeContext:
        return FakeContext(self)


class FakeContext:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.profile = 0
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.runs = 0

    def set_optimization_profile_async(self, profile: int, stream: int) -> bool:
        assert stream == 7  # TensorRT takes the stream's handle, an int
        self.profile = profile
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        low, _, high = self.engine.get_tensor_profile_shape(name, self.profile)
        if not low[0] <= shape[0] <= high[0]:
            return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.shapes["INPUT"]

    def set_tensor_address(self, name: str, pointer: int) -> bool:
        self.addresses[name] = pointer
        return True

    def execute_async_v3(self, stream: int) -> bool:
        assert stream == 7
        count = int(np.prod(self.shapes["INPUT"]))
        source = np.ctypeslib.as_array((ctypes.c_float * count).from_address(
            self.addresses["INPUT"]))
        target = np.ctypeslib.as_array((ctypes.c_float * count).from_address(
            self.addresses["OUTPUT"]))
        target[:] = source * 2 + 1
        self.runs += 1
        return True


class FakeLogger:
    WARNING = 2

    def __init__(self, level: int) -> None:
        self.level = level


def fake_tensorrt(engine: FakeEngine | None) -> Any:
    runtime = SimpleNamespace(deserialize_cuda_engine=lambda data: engine)
    return SimpleNamespace(Logger=FakeLogger, Runtime=lambda logger: runtime,
                           TensorIOMode=TensorIOMode)


def engine_of(output_type: DataType = DataType.FLOAT) -> FakeEngine:
    return FakeEngine({"INPUT": (TensorIOMode.INPUT, DataType.FLOAT, (-1, 4)),
                       "OUTPUT": (TensorIOMode.OUTPUT, output_type, (-1, 4))})


def backend(engine: FakeEngine | None, cuda: FakeCuda | None = None) -> TensorRTBackend:
    trt = fake_tensorrt(engine)
    return TensorRTBackend(import_runtime=lambda: (trt, cuda or FakeCuda()))


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


def test_without_tensorrt_the_model_is_unavailable_with_the_install_hint(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="tensorrt is not installed on this machine; install "
                       r"inferd\[tensorrt\]"):
        TensorRTBackend().load_model(context(tmp_path))
