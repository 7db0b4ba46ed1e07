"""The CUDA shared-memory extension without a GPU: only the CUDA calls are replaced, by
``FakeCuda``, whose device memory is host memory that it lends out only through opened IPC
handles and checks as CUDA would (a handle opened once per process, copies only inside an
opened allocation, nothing after a close). The registry, the data plane and the HTTP/gRPC
codecs are the real ones. ``BindingsRuntime`` itself runs over ``CudaBindings``, a recording
fake of cuda-bindings' runtime and driver modules whose host -> device ``cudaMemcpy`` behaves
as CUDA documents it for pageable memory: the bytes are staged when it returns and reach the
device only at the stream's synchronize."""

from __future__ import annotations

import ctypes
import enum
import gc
import json
import os
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from inferd.kernel.actors.scheduler.cuda_windows import on_host
from inferd.kernel.sdk.cuda_memory import BindingsRuntime, CudaCallFailed, present_runtime
from inferd.plugins.shared_memory.cuda import CudaRegistry
from inferd.plugins.shared_memory.provider import opener
from inferd.kernel.dataplane.data_plane import DataPlane
from inferd.kernel.runtime.addresses import SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.plugins.shared_memory.system import SharedMemoryRegistry
from inferd.kernel.sdk.devices import visible_gpus
from inferd.protocols.kserve_grpc import admin as kserve_grpc_admin
from inferd.protocols.kserve_http import admin as kserve_http_admin
from inferd.protocols.errors import ErrorCode, InferdError
from inferd.protocols.messages import (
    Ack,
    Envelope,
    InferRequest,
    InferResponse,
    Message,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    SharedMemoryRegionStatus,
    SharedMemoryRegister,
    SharedMemoryStatus,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    Tensor,
)
from tests.services import import_or_missing


def address(memory: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(memory)).from_buffer(memory))


class FakeCuda:
    """``CudaRuntime`` over host memory: what a client's ``cudaMalloc`` + ``cudaIpcGetMemHandle``
    made (``allocate``), refusing what the real calls refuse."""

    def __init__(self) -> None:
        self.allocations: dict[bytes, tuple[bytearray, int]] = {}
        self.opened: dict[int, bytes] = {}
        self.closed: list[bytes] = []
        self.copies: list[str] = []

    def allocate(self, size: int, device: int = 0) -> tuple[bytes, bytearray]:
        handle = os.urandom(64)
        memory = bytearray(size)
        self.allocations[handle] = (memory, device)
        return handle, memory

    def open_ipc_handle(self, handle: bytes, device_id: int) -> int:
        if handle not in self.allocations or self.allocations[handle][1] != device_id:
            raise CudaCallFailed("invalid argument")
        pointer = address(self.allocations[handle][0])
        if pointer in self.opened:  # one open per handle and context
            raise CudaCallFailed("invalid resource handle")
        self.opened[pointer] = handle
        return pointer

    def allocation_size(self, pointer: int, device_id: int) -> int:
        return len(self.allocations[self.opened[pointer]][0])

    def close_ipc_handle(self, pointer: int, device_id: int) -> None:
        handle = self.opened.pop(pointer, None)
        if handle is None:
            raise CudaCallFailed("invalid argument")
        self.closed.append(handle)

    def _check(self, pointer: int, byte_size: int, device_id: int) -> None:
        for base, handle in self.opened.items():
            memory, device = self.allocations[handle]
            if base <= pointer and pointer + byte_size <= base + len(memory):
                assert device == device_id, "a copy on another device than the region's"
                return
        raise CudaCallFailed("invalid argument")  # outside every opened allocation

    def copy_to_host(self, target: int, source: int, byte_size: int, device_id: int) -> None:
        self._check(source, byte_size, device_id)
        self.copies.append("to host")
        ctypes.memmove(target, source, byte_size)

    def copy_to_device(self, target: int, source: int, byte_size: int, device_id: int) -> None:
        self._check(target, byte_size, device_id)
        self.copies.append("to device")
        ctypes.memmove(target, source, byte_size)


class CudaBindings:
    """cuda-bindings' ``runtime`` and ``driver`` modules, as far as ``BindingsRuntime`` calls
    them, over host memory: every call recorded (``calls``: its name and arguments) and
    answered ``(error, *values)`` as cuda-bindings answers, ``failing``'s error for every call
    when set. ``cudaMemcpy`` host -> device from pageable memory returns once the bytes are
    staged; they reach the device when the stream is synchronized, as CUDA documents."""

    class cudaError_t(enum.IntEnum):  # noqa: N801 - cuda-bindings' names
        cudaSuccess = 0
        cudaErrorInvalidValue = 1

    class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    class cudaIpcMemHandle_t:  # noqa: N801
        def __init__(self) -> None:
            self.reserved = ctypes.create_string_buffer(64)

        def getPtr(self) -> int:  # noqa: N802
            return ctypes.addressof(self.reserved)

    cudaIpcMemLazyEnablePeerAccess = 1
    CUdeviceptr = int
    TEXTS = {cudaError_t.cudaErrorInvalidValue: b"invalid argument"}

    def __init__(self, failing: cudaError_t | None = None) -> None:
        self.failing = failing
        self.calls: list[tuple[object, ...]] = []
        self.allocations: dict[bytes, bytearray] = {}
        self.staged: list[tuple[int, bytes]] = []  # (device address, bytes) on their way

    def allocate(self, size: int) -> tuple[bytes, bytearray]:
        handle, memory = os.urandom(64), bytearray(size)
        self.allocations[handle] = memory
        return handle, memory

    def _answer(self, *call: object, values: tuple[object, ...] = ()) -> tuple[object, ...]:
        self.calls.append(call)
        if self.failing is not None:
            return (self.failing,)
        return (self.cudaError_t.cudaSuccess, *values)

    def cudaGetErrorString(self, error: cudaError_t) -> tuple[object, bytes]:  # noqa: N802
        return self.cudaError_t.cudaSuccess, self.TEXTS[error]

    def cudaSetDevice(self, device: int) -> tuple[object, ...]:  # noqa: N802
        return self._answer("cudaSetDevice", device)

    def cudaIpcOpenMemHandle(self, handle: cudaIpcMemHandle_t,  # noqa: N802
                             flags: int) -> tuple[object, ...]:
        memory = self.allocations.get(handle.reserved.raw)
        pointer = 0 if memory is None else address(memory)
        return self._answer("cudaIpcOpenMemHandle", pointer, values=(pointer,))

    def cudaIpcCloseMemHandle(self, pointer: int) -> tuple[object, ...]:  # noqa: N802
        return self._answer("cudaIpcCloseMemHandle", pointer)

    def cuMemGetAddressRange(self, pointer: int) -> tuple[object, ...]:  # noqa: N802
        for memory in self.allocations.values():
            base = address(memory)
            if base <= pointer < base + len(memory):
                return self._answer("cuMemGetAddressRange", pointer, values=(base, len(memory)))
        return self._answer("cuMemGetAddressRange", pointer, values=(0, 0))

    def cudaMemcpy(self, target: int, source: int, byte_size: int,  # noqa: N802
                   kind: cudaMemcpyKind) -> tuple[object, ...]:
        answer = self._answer("cudaMemcpy", target, source, byte_size, kind)
        if self.failing is None:
            if kind == self.cudaMemcpyKind.cudaMemcpyHostToDevice:
                self.staged.append((target, ctypes.string_at(source, byte_size)))
            else:
                ctypes.memmove(target, source, byte_size)
        return answer

    def cudaStreamSynchronize(self, stream: int) -> tuple[object, ...]:  # noqa: N802
        answer = self._answer("cudaStreamSynchronize", stream)
        if self.failing is None:
            for target, data in self.staged:
                ctypes.memmove(target, data, len(data))
            self.staged.clear()
        return answer


def bindings_runtime(bindings: CudaBindings) -> BindingsRuntime:
    """``BindingsRuntime`` over ``bindings`` as its runtime and its driver module."""
    return BindingsRuntime(bindings, bindings)


@pytest.fixture
def cuda() -> FakeCuda:
    return FakeCuda()


@pytest.fixture
def registry(cuda: FakeCuda, tmp_path: Path) -> SharedMemoryRegistry:
    (tmp_path / "data").write_bytes(bytes(4096))
    return SharedMemoryRegistry(tmp_path, CudaRegistry(lambda: cuda))


class EchoScheduler:
    """A scheduler of a model on the CPU answering each input ``INx`` as output ``OUTx``: as
    the real one, it has CUDA inputs read to the host (``on_host``); ``gate`` holds the
    answer until it is set. It serves a real ``Router`` as the real one does: the data
    plane's ``Router.call`` runs its direct handler."""

    def __init__(self) -> None:
        self.seen: list[InferRequest] = []
        self.gate: anyio.Event | None = None
        self.arrived = anyio.Event()
        self.router = Router("main")
        self.router.register(SCHEDULER, self._accept, {InferRequest: self._infer})

    def _accept(self, envelope: Envelope) -> None:
        raise AssertionError(f"the data plane asked {envelope.body!r} instead of calling")

    async def _infer(self, request: InferRequest, envelope: None) -> Message:
        request = on_host(request)
        self.seen.append(request)
        self.arrived.set()
        if self.gate is not None:
            await self.gate.wait()
        outputs = tuple(Tensor(t.name.replace("IN", "OUT"), t.datatype, t.shape, t.data)
                        for t in request.inputs)
        return InferResponse(request.model, "1", outputs)


def handle(dataplane: DataPlane, request: Message) -> Message:
    async def run() -> Message:
        return await dataplane.handle(request)

    return anyio.run(run)


def error_of(dataplane: DataPlane, request: Message) -> InferdError:
    with pytest.raises(InferdError) as error:
        handle(dataplane, request)
    return error.value


def register(name: str, handle_bytes: bytes, size: int, device: int = 0) -> SharedMemoryRegister:
    return SharedMemoryRegister(name, "", size, memory="cuda", raw_handle=handle_bytes,
                                device_id=device)


def test_register_status_and_unregister_one_or_all(
        registry: SharedMemoryRegistry, cuda: FakeCuda) -> None:
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=True))
    first, _ = cuda.allocate(256)
    second, _ = cuda.allocate(512, device=1)
    assert isinstance(handle(dataplane, register("a", first, 256)), Ack)
    assert isinstance(handle(dataplane, register("b", second, 100, device=1)), Ack)
    status = handle(dataplane, SharedMemoryStatusRequest(memory="cuda"))
    assert status == SharedMemoryStatus((SharedMemoryRegionStatus("a", "", 0, 256, 0),
                                         SharedMemoryRegionStatus("b", "", 0, 100, 1)))
    assert handle(dataplane, SharedMemoryStatusRequest()) == SharedMemoryStatus(())
    assert handle(dataplane, SharedMemoryUnregister("a", "cuda")) == Ack()
    assert cuda.closed == [first]
    handle(dataplane, SharedMemoryUnregister("unknown", "cuda"))  # not an error, as in Triton
    handle(dataplane, SharedMemoryUnregister(memory="cuda"))
    assert cuda.closed == [first, second] and not cuda.opened
    assert handle(dataplane, register("a", first, 256)) == Ack()  # the name is free again
    registry.close()
    assert not cuda.opened


def test_tritons_statuses_and_messages(registry: SharedMemoryRegistry, cuda: FakeCuda) -> None:
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=True))
    allocation, _ = cuda.allocate(64)
    handle(dataplane, register("gpu", allocation, 64))
    handle(dataplane, SharedMemoryRegister("host", "/data", 64))
    other, _ = cuda.allocate(64)
    cases: list[tuple[Message, ErrorCode, str]] = [
        (register("gpu", other, 64), ErrorCode.ALREADY_EXISTS,
         "shared memory region 'gpu' already in manager"),
        (register("host", other, 64), ErrorCode.ALREADY_EXISTS,
         "shared memory region 'host' already in manager"),
        (SharedMemoryRegister("gpu", "/data", 64), ErrorCode.ALREADY_EXISTS,
         "shared memory region 'gpu' already in manager"),
        (register("", other, 64), ErrorCode.INVALID_ARGUMENT,
         "'region name' is necessary to register cuda shared memory region"),
        (register("short", other[:60], 64), ErrorCode.INVALID_ARGUMENT,
         "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"),
        (register("stranger", os.urandom(64), 64), ErrorCode.INVALID_ARGUMENT,
         "failed to register shared memory region: invalid args"),
        (register("elsewhere", other, 64, device=3), ErrorCode.INVALID_ARGUMENT,
         "failed to register shared memory region: invalid args"),
        (register("big", other, 65), ErrorCode.INVALID_ARGUMENT,
         "failed to register shared memory region 'big': invalid args"),
        (SharedMemoryStatusRequest("nope", "cuda"), ErrorCode.NOT_FOUND,
         "Unable to find cuda shared memory region: 'nope'"),
        (SharedMemoryStatusRequest("host", "cuda"), ErrorCode.NOT_FOUND,
         "The region named 'host' is registered as system shared memory, not CUDA shared "
         "memory"),
        (SharedMemoryStatusRequest("gpu"), ErrorCode.NOT_FOUND,
         "The region named 'gpu' is registered as CUDA shared memory, not system shared "
         "memory"),
    ]
    for request, code, message in cases:
        error = error_of(dataplane, request)
        assert (error.code, error.message) == (code, message), request
    assert cuda.closed == [other]  # the region too big for its allocation is closed again
    # Unregistering a name of the other kind leaves it, as Triton does.
    handle(dataplane, SharedMemoryUnregister("host", "cuda"))
    handle(dataplane, SharedMemoryUnregister("gpu", "system"))
    assert [r.name for r in registry.status(memory="cuda").regions] == ["gpu"]
    assert [r.name for r in registry.status().regions] == ["host"]


def test_inputs_are_read_and_outputs_written_on_the_device_with_one_copy_each(
        registry: SharedMemoryRegistry, cuda: FakeCuda) -> None:
    scheduler = EchoScheduler()
    dataplane = DataPlane(scheduler.router,
                          shared_memory=opener(registry, allow_client_shm=True))
    values = np.arange(16, dtype=np.float32)
    inputs, device_inputs = cuda.allocate(128)
    outputs, device_outputs = cuda.allocate(128)
    device_inputs[64:128] = values.tobytes()
    handle(dataplane, register("in", inputs, 128))
    handle(dataplane, register("out", outputs, 128))
    request = SharedMemoryInferRequest(
        InferRequest("m", (), outputs=("OUT0",)),
        (SharedMemoryInput("IN0", "FP32", (16,), SharedMemoryRef("in", 64, 64)),),
        {"OUT0": SharedMemoryRef("out", 64, 32)},
    )
    reply = handle(dataplane, request)
    assert isinstance(reply, SharedMemoryInferResponse)
    assert reply.outputs == (SharedMemoryOutput("OUT0", "FP32", (16,),
                                                SharedMemoryRef("out", 64, 32)),)
    sent = scheduler.seen[0].inputs[0]
    assert isinstance(sent, Tensor) and sent.data.tolist() == values.tolist()
    assert not sent.data.flags.writeable
    assert bytes(device_outputs[32:96]) == values.tobytes()
    assert cuda.copies == ["to host", "to device"]

    outside = SharedMemoryInferRequest(
        InferRequest("m", ()),
        (SharedMemoryInput("IN0", "FP32", (16,), SharedMemoryRef("in", 64, 65)),),
    )
    error = error_of(dataplane, outside)
    assert (error.code, error.message) == (
        ErrorCode.INVALID_ARGUMENT, "Invalid offset + byte size for shared memory region: 'in'")
    small = SharedMemoryInferRequest(
        InferRequest("m", (), outputs=("OUT0",)),
        (SharedMemoryInput("IN0", "FP32", (16,), SharedMemoryRef("in", 64, 64)),),
        {"OUT0": SharedMemoryRef("out", 32)},
    )
    error = error_of(dataplane, small)
    assert error.message == ("shared memory size specified with the request for output 'OUT0' "
                             "(32 bytes) should be at least 64 bytes to hold the results")
    assert len(scheduler.seen) == 2  # a bad window is refused before the model runs
    cuda.opened.clear()  # the memory went away under the server: CUDA refuses the copy
    error = error_of(dataplane, request)
    assert (error.code, error.message) == (
        ErrorCode.INTERNAL, "failed to read CUDA shared memory region 'in': invalid argument")


def test_an_unregister_during_a_request_closes_the_handle_after_it(
        registry: SharedMemoryRegistry, cuda: FakeCuda) -> None:
    scheduler = EchoScheduler()
    scheduler.gate = anyio.Event()
    dataplane = DataPlane(scheduler.router,
                          shared_memory=opener(registry, allow_client_shm=True))
    allocation, memory = cuda.allocate(64)
    handle(dataplane, register("out", allocation, 64))
    request = SharedMemoryInferRequest(
        InferRequest("m", (), outputs=("OUT0",)),
        (Tensor("IN0", "INT32", (16,), np.full(16, 7, np.int32)),),
        {"OUT0": SharedMemoryRef("out", 64)},
    )
    replies: list[Message] = []

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            async def infer() -> None:
                replies.append(await dataplane.handle(request))

            group.start_soon(infer)
            await scheduler.arrived.wait()
            await dataplane.handle(SharedMemoryUnregister("out", "cuda"))
            assert registry.status(memory="cuda").regions == ()
            assert cuda.closed == []  # the request in flight still writes there
            assert scheduler.gate is not None
            scheduler.gate.set()

    anyio.run(scenario)
    gc.collect()
    assert isinstance(replies[0], SharedMemoryInferResponse)
    assert bytes(memory) == np.full(16, 7, np.int32).tobytes()
    assert cuda.closed == [allocation]


def test_without_a_gpu_every_register_is_refused_with_tritons_message(tmp_path: Path) -> None:
    looked: list[bool] = []

    def no_gpu() -> None:
        looked.append(True)

    registry = SharedMemoryRegistry(tmp_path, CudaRegistry(no_gpu))
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=True))
    assert looked == []  # nothing is looked up (no CUDA context) before a CUDA request
    refused = error_of(dataplane, register("g", os.urandom(64), 64))
    assert (refused.code, refused.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "failed to register CUDA shared memory region: 'g', GPUs not supported")
    assert handle(dataplane, SharedMemoryStatusRequest(memory="cuda")) == SharedMemoryStatus(())
    assert isinstance(handle(dataplane, SharedMemoryUnregister(memory="cuda")), Ack)
    missing = error_of(dataplane, SharedMemoryStatusRequest("g", "cuda"))
    assert (missing.code, missing.message) == (
        ErrorCode.NOT_FOUND, "Unable to find cuda shared memory region: 'g'")
    assert looked == [True]


@pytest.mark.skipif(bool(visible_gpus()), reason="this machine has a GPU")
def test_a_machine_without_gpus_has_no_cuda_runtime() -> None:
    assert present_runtime() is None


def test_a_copy_onto_the_device_is_synchronized_before_it_returns() -> None:
    bindings = CudaBindings()
    runtime = bindings_runtime(bindings)
    _, device = bindings.allocate(4)
    source = bytearray(b"abcd")
    runtime.copy_to_device(address(device), address(source), 4, 1)
    to_device = CudaBindings.cudaMemcpyKind.cudaMemcpyHostToDevice
    # cudaMemcpy from pageable memory may return before the DMA ends; the synchronize of its
    # stream (the default one) is what makes the bytes the device's before a client is told.
    assert bindings.calls == [("cudaSetDevice", 1),
                              ("cudaMemcpy", address(device), address(source), 4, to_device),
                              ("cudaStreamSynchronize", 0)]
    assert bytes(device) == b"abcd"
    bindings.calls.clear()
    target = bytearray(4)
    runtime.copy_to_host(address(target), address(device), 4, 1)  # complete on return
    assert [call[0] for call in bindings.calls] == ["cudaSetDevice", "cudaMemcpy"]
    assert bytes(target) == b"abcd"


def test_an_output_written_on_the_device_is_there_when_the_reply_is(tmp_path: Path) -> None:
    bindings = CudaBindings()
    registry = SharedMemoryRegistry(tmp_path, CudaRegistry(lambda: bindings_runtime(bindings)))
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=True))
    allocation, memory = bindings.allocate(64)
    assert handle(dataplane, register("out", allocation, 64)) == Ack()
    request = SharedMemoryInferRequest(
        InferRequest("m", (), outputs=("OUT0",)),
        (Tensor("IN0", "INT32", (16,), np.full(16, 7, np.int32)),),
        {"OUT0": SharedMemoryRef("out", 64)},
    )
    assert isinstance(handle(dataplane, request), SharedMemoryInferResponse)
    # The client reads its region once it has the reply: the bytes have reached the device.
    assert bindings.staged == [] and bytes(memory) == np.full(16, 7, np.int32).tobytes()
    copies = [call[0] for call in bindings.calls
              if call[0] in ("cudaMemcpy", "cudaStreamSynchronize")]
    assert copies == ["cudaMemcpy", "cudaStreamSynchronize"]


def test_the_bindings_runtime_turns_every_cuda_error_into_one_exception() -> None:
    # Each call that CUDA answers with an error fails as CudaCallFailed with CUDA's text,
    # which the registry turns into Triton's message.
    runtime = bindings_runtime(CudaBindings(failing=CudaBindings.cudaError_t.cudaErrorInvalidValue))
    for call, arguments in ((runtime.open_ipc_handle, (bytes(64), 0)),
                            (runtime.allocation_size, (4096, 0)),
                            (runtime.copy_to_host, (0, 0, 1, 0)),
                            (runtime.copy_to_device, (0, 0, 1, 0)),
                            (runtime.close_ipc_handle, (4096, 0))):
        with pytest.raises(CudaCallFailed, match="^invalid argument$"):
            call(*arguments)
    registry = SharedMemoryRegistry(Path("/nonexistent"), CudaRegistry(lambda: runtime))
    with pytest.raises(InferdError) as error:
        registry.register_cuda("r", os.urandom(64), 0, 64)
    assert error.value.message == "failed to register shared memory region: invalid args"


@pytest.mark.skipif(bool(visible_gpus()), reason="this machine has a GPU")
def test_the_real_bindings_without_a_gpu_fail_as_cuda_errors() -> None:
    # With the real cuda-bindings and no GPU or driver to answer, each call fails as
    # CudaCallFailed too, with CUDA's text, and nothing else escapes.
    import_or_missing("cuda.bindings.runtime",
                      "make setup installs it: tritonclient[all] brings cuda-python")
    runtime = BindingsRuntime()
    for call, arguments in ((runtime.open_ipc_handle, (bytes(64), 0)),
                            (runtime.allocation_size, (4096, 0)),
                            (runtime.copy_to_host, (0, 0, 1, 0)),
                            (runtime.close_ipc_handle, (4096, 0))):
        with pytest.raises(CudaCallFailed) as failure:
            call(*arguments)
        assert str(failure.value), f"{call.__name__}: CUDA's error without its text"


# --------------------------------------------------------------------------------- codecs


def test_http_register_body_and_status_rows() -> None:
    import base64

    raw = os.urandom(64)
    body = json.dumps({"raw_handle": {"b64": base64.b64encode(raw).decode()},
                       "device_id": 1, "byte_size": 4096}).encode()
    assert kserve_http_admin.decode_shared_memory_register("r", body, "cuda") == (
        register("r", raw, 4096, device=1))
    for document, message in [
        ({"device_id": 0, "byte_size": 1},
         "Shared memory register request has no 'raw_handle' field"),
        ({"raw_handle": "abc", "device_id": 0, "byte_size": 1},
         "'raw_handle' must be an object with a base64 string 'b64'"),
        ({"raw_handle": {"b64": "AA=="}, "byte_size": 1},
         "Shared memory register request has no 'device_id' field"),
        ({"raw_handle": {"b64": "AA=="}, "device_id": -1, "byte_size": 1},
         "'device_id' must be a non-negative integer, got -1"),
    ]:
        with pytest.raises(InferdError) as error:
            kserve_http_admin.decode_shared_memory_register(
                "r", json.dumps(document).encode(), "cuda")
        assert (error.value.code, error.value.message) == (ErrorCode.INVALID_ARGUMENT, message)
    status = SharedMemoryStatus((SharedMemoryRegionStatus("r", "", 0, 4096, 1),))
    assert json.loads(kserve_http_admin.encode_shared_memory_status(status, "cuda")) == [
        {"name": "r", "device_id": 1, "byte_size": 4096}]


def test_grpc_register_request_and_status_response() -> None:
    raw = os.urandom(64)
    request: Any = service_pb2.CudaSharedMemoryRegisterRequest(
        name="r", raw_handle=raw, device_id=2, byte_size=64)
    assert kserve_grpc_admin.decode_shared_memory_register(request, "cuda") == (
        register("r", raw, 64, device=2))
    status = SharedMemoryStatus((SharedMemoryRegionStatus("r", "", 0, 64, 2),))
    reply = kserve_grpc_admin.encode_shared_memory_status(status, "cuda")
    assert isinstance(reply, service_pb2.CudaSharedMemoryStatusResponse)
    row = reply.regions["r"]
    assert (row.name, row.device_id, row.byte_size) == ("r", 2, 64)
