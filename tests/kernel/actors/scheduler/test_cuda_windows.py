"""CUDA shared memory in place on the GPU, without a GPU: only the CUDA calls are replaced (two
``FakeCuda`` views of one fake device, one per process: the main process's and a GPU
executor's). The data plane, the scheduler, the wire codec both ways, the executor's batch
path (``execute_batch`` with its ``DeviceMemory``) are the real ones; the instance is a
stand-in backend that takes device memory (reading its inputs and writing its outputs at the
addresses it is given, as torch on CUDA does) or one that takes host memory.

What it pins: a request to a GPU instance carries its windows and not one byte of tensor data
either way, the executor opens each region once and closes it after the main process lets go,
the backend gets device addresses (pointer + offset) and writes outputs on the device itself;
an instance on the CPU gets today's one copy in the main process; a GPU backend that takes
host memory gets one copy in the executor; Triton's statuses and messages stay the same."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor.device_memory import DeviceMemory
from inferd.kernel.actors.executor.instance_slot import InstanceSlot, batch_result, execute_batch
from inferd.kernel.actors.scheduler.actor import SchedulerActor
from inferd.kernel.actors.scheduler.cuda_windows import for_executor, on_host
from inferd.plugins.shared_memory.cuda import CudaRegistry
from inferd.plugins.shared_memory.provider import opener
from inferd.kernel.dataplane.data_plane import DataPlane
from inferd.kernel.sdk.cuda_memory import written_window
from inferd.plugins.shared_memory.system import SharedMemoryRegistry
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import SCHEDULER, cpu_executor, gpu_executor
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.backends import NONE_CANCELLED, Instance
from inferd.protocols.wire import codec as wire
from inferd.protocols.device_tensors import device_tensor, window_of
from inferd.protocols.errors import ErrorCode, InferdError
from inferd.protocols.messages import (
    Ack,
    BatchResult,
    CloseDeviceRegions,
    DeviceWindow,
    Envelope,
    InferBatch,
    InferRequest,
    InferResponse,
    Message,
    ServeVersion,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    SharedMemoryRegister,
    SharedMemoryUnregister,
    Tensor,
)
from tests.plugins.shared_memory.test_cuda import FakeCuda

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_recheck")]

CONFIG = """
name: "m"
input [ { name: "IN0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
VALUES = np.arange(16, dtype=np.float32)
GPU = gpu_executor(0)


def device_bytes(pointer: int, byte_size: int) -> bytes:
    return ctypes.string_at(pointer, byte_size)


class DeviceEcho(Instance):
    """A backend on the GPU: reads ``IN0`` where its pointer says and writes it, doubled, as
    ``OUT0`` at its window's address (on the device: no copy through the host), or answers
    it on the host when no window is asked or the window is too small (as torch's does)."""

    takes_device_memory = True

    def __init__(self) -> None:
        self.pointers: list[int] = []

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        responses: list[InferResponse | InferdError] = []
        for request in requests:
            data = request.inputs[0].data
            self.pointers.append(data.pointer)
            doubled = np.frombuffer(device_bytes(data.pointer, data.nbytes), np.float32) * 2
            window = request.output_windows.get("OUT0")
            if window is None or window.byte_size < doubled.nbytes:
                output = Tensor("OUT0", "FP32", (16,), doubled)
            else:
                ctypes.memmove(self.window_addresses[window], doubled.tobytes(), doubled.nbytes)
                output = device_tensor("OUT0", "FP32", (16,), written_window(window, 64))
            responses.append(InferResponse(request.model, "1", (output,), request.id))
        return responses


class HostDouble(Instance):
    """A backend that takes host memory only (onnxruntime, say, on that GPU's executor)."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self.seen += [r.inputs[0].data for r in requests]
        return [InferResponse(r.model, "1", (Tensor("OUT0", "FP32", (16,),
                                                    r.inputs[0].data * 2),), r.id)
                for r in requests]


class WireExecutor(Actor):
    """An executor process as the process link delivers to it: each batch and its result cross
    the wire (encoded and decoded; ``buffers`` counts their buffer frames), the batch runs
    through the executor's own path on ``instance`` with its ``DeviceMemory``."""

    def __init__(self, router: Router, address: str, instance: Instance,
                 memory: DeviceMemory) -> None:
        super().__init__(router, address)
        self.memory = memory
        self.slot = InstanceSlot(instance, ThreadPoolExecutor(1), 1, device_memory=memory)
        self.buffers: list[int] = []
        self.batches: list[InferBatch] = []
        self.told_to_close: list[int] = []  # the regions the main process let go of
        self._told_more = anyio.Event()

    async def on_infer_batch(self, message: InferBatch, envelope: Envelope) -> BatchResult:
        batch = self._crossed(message)
        assert isinstance(batch, InferBatch)
        self.batches.append(batch)
        result = batch_result(batch, self.slot, execute_batch(self.slot, batch, NONE_CANCELLED))
        crossed = self._crossed(result)
        assert isinstance(crossed, BatchResult)
        return crossed

    async def on_close_device_regions(self, message: CloseDeviceRegions,
                                      envelope: Envelope) -> None:
        self.memory.close(message.regions)
        self.told_to_close += message.regions
        self._told_more.set()

    async def told(self, count: int) -> list[int]:
        """The regions it was told to close, once there are ``count``."""
        while len(self.told_to_close) < count:
            self._told_more = anyio.Event()
            await self._told_more.wait()
        return self.told_to_close

    def _crossed(self, body: Message) -> Message:
        frames = wire.encode(Envelope(1, SCHEDULER, self.address, body))
        self.buffers.append(len(frames) - 2)
        return wire.decode(frames).body


@dataclass
class Server:
    dataplane: DataPlane
    registry: SharedMemoryRegistry
    main: FakeCuda  # the main process's view of the device
    executor: FakeCuda  # the executor process's
    actor: WireExecutor
    inputs: bytearray = field(default_factory=bytearray)
    outputs: bytearray = field(default_factory=bytearray)

    async def infer(self, output_size: int = 64) -> Message:
        request = SharedMemoryInferRequest(
            InferRequest("m", (), outputs=("OUT0",)),
            (SharedMemoryInput("IN0", "FP32", (16,), SharedMemoryRef("in", 64, 32)),),
            {"OUT0": SharedMemoryRef("out", output_size, 64)},
        )
        return await self.dataplane.handle(request)


@asynccontextmanager
async def serving(address: str, instance: Instance, tmp_path: Path,
                  elsewhere: tuple[str, ...] = ()) -> AsyncIterator[Server]:
    """The scheduler serving ``m`` on one instance at ``address`` (and, listed after it, one
    on each executor of ``elsewhere``, which never gets a batch here), regions ``in``
    (``VALUES`` from byte 32) and ``out`` (128 bytes each) registered."""
    main = FakeCuda()
    executor = FakeCuda()
    executor.allocations = main.allocations  # one device, two processes' handles on it
    registry = SharedMemoryRegistry(tmp_path, CudaRegistry(lambda: main))
    router = Router("main")
    dataplane = DataPlane(router, shared_memory=opener(registry, allow_client_shm=True))
    memory = DeviceMemory(lambda: executor, local_device=lambda gpu: gpu)
    actor = WireExecutor(router, address, instance, memory)
    inputs_handle, inputs = main.allocate(128)
    outputs_handle, outputs = main.allocate(128)
    inputs[32:96] = VALUES.tobytes()
    async with anyio.create_task_group() as tasks:
        await tasks.start(SchedulerActor(router).run)
        await tasks.start(actor.run)
        with anyio.fail_after(10):
            config = text_format.Parse(CONFIG, ModelConfig())
            served = await router.ask(SCHEDULER, ServeVersion(
                "m", 1, config.SerializeToString(),
                ((address, 0), *((other, 0) for other in elsewhere))))
            assert isinstance(served, Ack)
            for name, handle in (("in", inputs_handle), ("out", outputs_handle)):
                registered = await dataplane.handle(
                    SharedMemoryRegister(name, "", 128, memory="cuda", raw_handle=handle))
                assert isinstance(registered, Ack)
            yield Server(dataplane, registry, main, executor, actor, inputs, outputs)
        tasks.cancel_scope.cancel()


def written(server: Server) -> np.ndarray:
    return np.frombuffer(bytes(server.outputs[64:128]), np.float32)


async def test_a_gpu_instance_gets_the_windows_and_not_one_byte(tmp_path: Path) -> None:
    instance = DeviceEcho()
    async with serving(GPU, instance, tmp_path) as server:
        for _ in range(2):
            reply = await server.infer()
            assert isinstance(reply, SharedMemoryInferResponse)
            assert reply.outputs == (SharedMemoryOutput("OUT0", "FP32", (16,),
                                                        SharedMemoryRef("out", 64, 64)),)
            assert written(server).tolist() == (VALUES * 2).tolist()
            server.outputs[64:128] = bytes(64)
        assert server.actor.buffers == [0, 0, 0, 0]  # no tensor bytes, to it or back
        sent = server.actor.batches[0].requests[0]
        window = window_of(sent.inputs[0])
        assert window is not None and (window.offset, window.byte_size) == (32, 64)
        assert sent.output_windows["OUT0"].offset == 64
        assert server.main.copies == [] and server.executor.copies == []
        # Each region opened once in the executor; the backend got pointer + offset.
        base = {handle: pointer for pointer, handle in server.executor.opened.items()}
        inputs_handle = window.handle
        assert instance.pointers == [base[inputs_handle] + 32] * 2
        assert len(server.executor.opened) == 2 and len(server.actor.memory) == 2

        await server.dataplane.handle(SharedMemoryUnregister(memory="cuda"))
        # Each handle closes with the last reference to it (collected, should one be in a
        # cycle): the main process's first, which then tells the executor to let go of its.
        gc.collect()
        assert len(set(await server.actor.told(2))) == 2  # serving() bounds the wait
        gc.collect()
        assert len(server.main.closed) == 2
        assert sorted(server.executor.closed) == sorted(server.main.closed)
        assert not server.executor.opened and len(server.actor.memory) == 0


async def test_a_window_too_small_or_outside_keeps_tritons_messages(tmp_path: Path) -> None:
    instance = DeviceEcho()
    async with serving(GPU, instance, tmp_path) as server:
        with pytest.raises(InferdError) as error:
            await server.infer(output_size=65)  # past the region's end
        assert (error.value.code, error.value.message) == (
            ErrorCode.INVALID_ARGUMENT,
            "Invalid offset + byte size for shared memory region: 'out'")
        with pytest.raises(InferdError) as error:
            await server.infer(output_size=32)
        assert (error.value.code, error.value.message) == (
            ErrorCode.INVALID_ARGUMENT,
            "shared memory size specified with the request for output 'OUT0' (32 bytes) "
            "should be at least 64 bytes to hold the results")


async def test_an_instance_on_the_cpu_gets_one_copy_each_way(tmp_path: Path) -> None:
    instance = HostDouble()
    async with serving(cpu_executor(0), instance, tmp_path) as server:
        reply = await server.infer()
        assert isinstance(reply, SharedMemoryInferResponse)
        assert isinstance(reply.outputs[0], SharedMemoryOutput)
        assert written(server).tolist() == (VALUES * 2).tolist()
        assert server.main.copies == ["to host", "to device"]  # the main process's, as before
        assert server.executor.copies == [] and not server.executor.opened
        sent = server.actor.batches[0].requests[0]
        assert window_of(sent.inputs[0]) is None and sent.output_windows == {}
        assert server.actor.buffers == [1, 1]  # the bytes travel, once each way


async def test_a_gpu_backend_that_takes_host_memory_gets_one_copy_in_its_executor(
        tmp_path: Path) -> None:
    instance = HostDouble()
    async with serving(GPU, instance, tmp_path) as server:
        reply = await server.infer()
        assert isinstance(reply, SharedMemoryInferResponse)
        assert isinstance(reply.outputs[0], SharedMemoryOutput)
        assert written(server).tolist() == (VALUES * 2).tolist()
        assert server.main.copies == []
        assert server.executor.copies == ["to host", "to device"]
        assert instance.seen[0].tolist() == VALUES.tolist()
        assert not instance.seen[0].flags.writeable  # the client's bytes
        assert server.actor.buffers == [0, 0]


async def test_a_model_with_an_instance_off_the_gpus_reads_through_the_host(
        tmp_path: Path) -> None:
    instance = HostDouble()
    async with serving(GPU, instance, tmp_path, elsewhere=(cpu_executor(0),)) as server:
        reply = await server.infer()
        assert isinstance(reply, SharedMemoryInferResponse)
        assert written(server).tolist() == (VALUES * 2).tolist()
        # Its batches may go to either instance: the request was read at the scheduler's door.
        assert server.main.copies == ["to host", "to device"]
        assert server.executor.copies == [] and server.actor.buffers == [1, 1]


def test_a_bytes_output_is_left_for_the_main_process_to_write() -> None:
    cuda = FakeCuda()
    handle, _ = cuda.allocate(64)
    device = DeviceMemory(lambda: cuda, local_device=lambda gpu: gpu)
    window = DeviceWindow(handle, 0, 0, 64, 7)
    request = InferRequest("m", (), output_windows={"TEXT": window})
    text = Tensor("TEXT", "BYTES", (1,), np.array([b"abc"], dtype=object))
    prepared = device.prepare((request,), HostDouble())
    (response,) = device.finish(prepared, [InferResponse("m", "1", (text,))])
    assert isinstance(response, InferResponse) and response.outputs == (text,)
    assert cuda.copies == [] and not cuda.opened


def test_what_lies_on_another_gpu_or_goes_to_the_cpu_is_read_to_the_host(
        tmp_path: Path) -> None:
    main = FakeCuda()
    registry = SharedMemoryRegistry(tmp_path, CudaRegistry(lambda: main))
    handle, memory = main.allocate(64, device=1)
    memory[:] = VALUES.tobytes()
    registry.register_cuda("r", handle, 1, 64)
    region, window = registry.cuda_window(SharedMemoryRef("r", 64)) or (None, None)
    assert region is not None and window is not None
    request = InferRequest("m", (device_tensor("IN0", "FP32", (16,), window, owner=region),),
                           output_windows={"OUT0": window})
    (same_gpu,) = for_executor((request,), gpu_executor(1))
    assert window_of(same_gpu.inputs[0]) == window and same_gpu.output_windows == {"OUT0": window}
    assert region.sent_to == {gpu_executor(1)}
    assert main.copies == []
    for executor in (gpu_executor(0), cpu_executor(0), "executor/inline"):
        (moved,) = for_executor((request,), executor)
        assert window_of(moved.inputs[0]) is None and moved.output_windows == {}
        assert moved.inputs[0].data.tolist() == VALUES.tolist()
    assert on_host(request).inputs[0].data.tolist() == VALUES.tolist()
    assert main.copies == ["to host"] * 4
    assert region.sent_to == {gpu_executor(1)}


def test_a_close_waits_for_the_batch_that_holds_the_region() -> None:
    cuda = FakeCuda()
    handle, memory = cuda.allocate(64)
    memory[:] = VALUES.tobytes()
    device = DeviceMemory(lambda: cuda, local_device=lambda gpu: gpu)
    window_serial = 41
    window = DeviceWindow(handle, 0, 0, 64, window_serial)
    request = InferRequest("m", (device_tensor("IN0", "FP32", (16,), window),))
    prepared = device.prepare((request,), DeviceEcho())
    pointer = prepared.requests[0].inputs[0].data.pointer
    assert device_bytes(pointer, 64) == VALUES.tobytes()
    device.close((window_serial,))  # the main process let go while the batch runs
    assert cuda.closed == [] and len(device) == 0
    del prepared
    gc.collect()
    assert cuda.closed == [handle]
