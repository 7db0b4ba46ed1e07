"""The system shared-memory registry and the data plane's use of it, without a server: objects
are plain files in a temporary folder standing in for ``/dev/shm``, and the scheduler is a fake
that echoes each input as an output."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from inferd.plugins.shared_memory.cuda import CudaRegistry
from inferd.plugins.shared_memory.provider import opener
from inferd.kernel.dataplane.data_plane import DataPlane
from inferd.kernel.runtime.addresses import SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.plugins.shared_memory.system import (
    SharedMemoryRegistry,
    fits,
    mapping_window,
    names_server_object,
    object_name,
)
from inferd.kernel.runtime import link_memory, run_folder
from inferd.kernel.sdk.shared_memory import CLIENT_SHM_DISABLED
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
    SharedMemoryRegister,
    SharedMemoryStatus,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    Tensor,
)
from inferd.protocols.tensors import from_numpy

OBJECT_BYTES = 3 * 4096


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "data").write_bytes(bytes(range(256)) * (OBJECT_BYTES // 256))
    return tmp_path


@pytest.fixture
def registry(root: Path) -> SharedMemoryRegistry:
    return SharedMemoryRegistry(root)


def error_of(call: Any, *arguments: Any) -> InferdError:
    with pytest.raises(InferdError) as error:
        call(*arguments)
    return error.value


# ------------------------------------------------------------------------------ pure parts


@pytest.mark.parametrize(("key", "name"), [
    ("/data", "data"), ("data", "data"), ("//data", "data"), ("/a/b", None), ("/", None),
    ("", None), ("/..", None), ("/.", None), ("/x\0y", None),
])
def test_object_name(key: str, name: str | None) -> None:
    assert object_name(key) == name


@pytest.mark.parametrize("key", [
    "inferd-1-2-3", "/inferd-1-2-3", "//inferd-1-2-3", "/./inferd-1-2-3", "/../shm/inferd-1-2-3",
    "/dev/shm/inferd-1-2-3", "/inferd-77-", "/inferd-7-abc/hub",
])
def test_keys_naming_the_servers_objects(key: str) -> None:
    assert names_server_object(key)


@pytest.mark.parametrize("key", [
    "/data", "/inferd_test_1", "/my-inferd-1-2", "/inferd", "/inferd-", "/inferd-cache-1-2",
    "/inferd-12", "", "/",
])
def test_keys_of_clients(key: str) -> None:
    assert not names_server_object(key)


def test_the_names_the_server_gives_its_objects_are_reserved(tmp_path: Path) -> None:
    folder = run_folder.create_run_folder(tmp_path)
    assert names_server_object(folder.name) and names_server_object(str(folder))
    if not link_memory.SHM_DIR.is_dir():
        pytest.skip("no /dev/shm")
    pool = link_memory.SegmentPool(os.getpid(), threshold=1, capacity=1 << 20)
    try:
        token = pool.spill("peer", b"tensor")
        assert token is not None and (link_memory.SHM_DIR / token[0]).exists()
        assert names_server_object(f"/{token[0]}")
    finally:
        pool.close()


def test_mapping_window_aligns_the_file_offset() -> None:
    assert mapping_window(0, 10, 4096) == (0, 10, 0)
    assert mapping_window(5000, 10, 4096) == (4096, 914, 904)
    assert mapping_window(8192, 1, 4096) == (8192, 1, 0)


def test_fits() -> None:
    assert fits(0, 16, 16) and fits(16, 0, 16) and fits(4, 12, 16)
    assert not fits(4, 13, 16) and not fits(-1, 1, 16) and not fits(0, -1, 16)


# -------------------------------------------------------------------------------- registry


def test_register_status_and_views(registry: SharedMemoryRegistry, root: Path) -> None:
    registry.register("whole", "/data", 0, OBJECT_BYTES)
    registry.register("tail", "data", 5000, 100)
    status = registry.status()
    assert [(r.name, r.key, r.offset, r.byte_size) for r in status.regions] == [
        ("tail", "data", 5000, 100), ("whole", "/data", 0, OBJECT_BYTES),  # by name
    ]
    assert [r.name for r in registry.status("tail").regions] == ["tail"]
    content = (root / "data").read_bytes()
    assert bytes(registry.view(SharedMemoryRef("tail", 10, 4))) == content[5004:5014]
    registry.view(SharedMemoryRef("whole", 4, 0))[:] = b"\xff" * 4
    assert (root / "data").read_bytes()[:4] == b"\xff" * 4  # writes reach the object


def test_registry_errors(registry: SharedMemoryRegistry) -> None:
    registry.register("r", "/data", 0, 64)
    twice = error_of(registry.register, "r", "/data", 0, 64)
    assert (twice.code, twice.message) == (
        ErrorCode.ALREADY_EXISTS, "shared memory region 'r' already in manager"
    )
    past = error_of(registry.register, "p", "/data", 4096, OBJECT_BYTES)
    assert (past.code, past.message) == (
        ErrorCode.INVALID_ARGUMENT, "failed to register shared memory region 'p': invalid args"
    )
    missing = error_of(registry.register, "m", "/missing", 0, 1)
    assert missing.message == "Unable to open shared memory region: '/missing'"
    assert error_of(registry.register, "e", "/../etc/passwd", 0, 1).code == (
        ErrorCode.INVALID_ARGUMENT
    )
    (registry._root / "link").symlink_to(registry._root / "data")  # anyone can add links
    (registry._root / "folder").mkdir()
    for key in ("/link", "/folder"):
        refused = error_of(registry.register, key, key, 0, 1)
        assert refused.message == f"Unable to open shared memory region: '{key}'"
    unknown = error_of(registry.status, "nope")
    assert (unknown.code, unknown.message) == (
        ErrorCode.NOT_FOUND, "Unable to find system shared memory region: 'nope'"
    )
    not_found = error_of(registry.view, SharedMemoryRef("nope", 1))
    assert not_found.message == "Unable to find shared memory region: 'nope'"
    outside = error_of(registry.view, SharedMemoryRef("r", 8, 60))
    assert (outside.code, outside.message) == (
        ErrorCode.INVALID_ARGUMENT, "Invalid offset + byte size for shared memory region: 'r'"
    )


def test_a_key_naming_a_server_object_is_refused_without_its_name(
    registry: SharedMemoryRegistry, root: Path
) -> None:
    segment = "inferd-4242-4243-0"  # as the process link names its segments
    (root / segment).write_bytes(bytes(OBJECT_BYTES))
    for key in (segment, f"/{segment}", f"//{segment}", f"/./{segment}", f"/../x/{segment}"):
        refused = error_of(registry.register, "mine", key, 0, 64)
        assert (refused.code, refused.message) == (
            ErrorCode.INVALID_ARGUMENT,
            "cannot register shared memory region 'mine': its key names one of the server's "
            "own shared memory objects (keys beginning with 'inferd-<number>-' are reserved)",
        )
        assert "4242" not in refused.message
    # The same answer whether the object exists or not: no probing for the server's names.
    absent = error_of(registry.register, "mine", "/inferd-1-1-1", 0, 64)
    assert absent.message == refused.message
    assert len(registry) == 0
    registry.register("mine", "/data", 0, 64)  # a client's own object still registers


def test_unregister_one_all_and_unknown(registry: SharedMemoryRegistry) -> None:
    for name in ("a", "b", "c"):
        registry.register(name, "/data", 0, 16)
    registry.unregister("unknown")
    registry.unregister("a")
    assert [r.name for r in registry.status().regions] == ["b", "c"]
    registry.unregister()
    assert len(registry) == 0


def test_a_view_outlives_its_unregistered_region(
    registry: SharedMemoryRegistry, root: Path
) -> None:
    registry.register("r", "/data", 0, 16)
    array = np.frombuffer(registry.view(SharedMemoryRef("r", 16)), dtype=np.uint8)
    registry.unregister("r")
    registry.register("r", "/data", 0, 16)  # the name is free again at once
    assert array.tolist() == list(range(16))  # the old mapping is still there
    array[0] = 42
    assert (root / "data").read_bytes()[0] == 42


# ------------------------------------------------------------------------------ data plane


class EchoScheduler:
    """A scheduler that answers every inference request with its inputs renamed as outputs
    (``IN`` -> ``OUT``), and keeps the requests it saw. It serves a real ``Router`` as the
    real one does: the data plane's ``Router.call`` runs its direct handler."""

    def __init__(self) -> None:
        self.seen: list[InferRequest] = []
        self.router = Router("main")
        self.router.register(SCHEDULER, self._accept, {InferRequest: self._infer})

    def _accept(self, envelope: Envelope) -> None:
        raise AssertionError(f"the data plane asked {envelope.body!r} instead of calling")

    async def _infer(self, request: InferRequest, envelope: None) -> Message:
        self.seen.append(request)
        outputs = tuple(
            Tensor(t.name.replace("IN", "OUT"), t.datatype, t.shape, t.data)
            for t in request.inputs
        )
        return InferResponse(request.model, "1", outputs)


def handle(dataplane: DataPlane, request: Message) -> Message:
    async def run() -> Message:
        return await dataplane.handle(request)

    return anyio.run(run)


def test_dataplane_reads_and_writes_regions(registry: SharedMemoryRegistry, root: Path) -> None:
    scheduler = EchoScheduler()
    dataplane = DataPlane(scheduler.router,
                          shared_memory=opener(registry, allow_client_shm=True))
    assert isinstance(handle(dataplane, SharedMemoryRegister("in", "/data", 64, 0)), Ack)
    handle(dataplane, SharedMemoryRegister("out", "/data", 64, 4096))
    status = handle(dataplane, SharedMemoryStatusRequest())
    assert isinstance(status, SharedMemoryStatus) and len(status.regions) == 2
    values = np.arange(16, dtype=np.int32)
    (root / "data").write_bytes(values.tobytes() + bytes(OBJECT_BYTES - 64))
    inline = from_numpy("IN1", np.ones(4, np.float32))
    request = SharedMemoryInferRequest(
        InferRequest("m", (), outputs=("OUT0", "OUT1")),
        (SharedMemoryInput("IN0", "INT32", (16,), SharedMemoryRef("in", 64)), inline),
        {"OUT0": SharedMemoryRef("out", 64)},
    )
    reply = handle(dataplane, request)
    assert isinstance(reply, SharedMemoryInferResponse)
    written, returned = reply.outputs
    assert written == SharedMemoryOutput("OUT0", "INT32", (16,), SharedMemoryRef("out", 64))
    assert isinstance(returned, Tensor) and returned.name == "OUT1"
    assert (root / "data").read_bytes()[4096 : 4096 + 64] == values.tobytes()
    sent = scheduler.seen[0]
    assert [type(t) for t in sent.inputs] == [Tensor, Tensor]  # never a region reference
    assert not sent.inputs[0].data.flags.writeable  # the client's memory stays the client's
    assert isinstance(handle(dataplane, SharedMemoryUnregister()), Ack)


def test_dataplane_refuses_a_small_output_region(registry: SharedMemoryRegistry) -> None:
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=True))
    registry.register("out", "/data", 0, 64)
    request = SharedMemoryInferRequest(
        InferRequest("m", (), outputs=("OUT0",)),
        (from_numpy("IN0", np.zeros(16, np.int32)),),
        {"OUT0": SharedMemoryRef("out", 32)},
    )
    error = error_of(handle, dataplane, request)
    assert (error.code, error.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "shared memory size specified with the request for output 'OUT0' (32 bytes) should be "
        "at least 64 bytes to hold the results",
    )


def test_dataplane_cuda_requests_without_a_gpu(root: Path) -> None:
    # tests/plugins/shared_memory/test_cuda.py has the CUDA regions of a server with a GPU.
    registry = SharedMemoryRegistry(root, CudaRegistry(lambda: None))
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=True))
    refused = error_of(handle, dataplane, SharedMemoryRegister("g", "", 16, memory="cuda"))
    assert refused.code == ErrorCode.INVALID_ARGUMENT
    assert refused.message == (
        "failed to register CUDA shared memory region: 'g', GPUs not supported")
    assert handle(dataplane, SharedMemoryStatusRequest(memory="cuda")) == SharedMemoryStatus(())
    assert isinstance(handle(dataplane, SharedMemoryUnregister(memory="cuda")), Ack)
    missing = error_of(handle, dataplane, SharedMemoryStatusRequest("g", "cuda"))
    assert missing.message == "Unable to find cuda shared memory region: 'g'"


def test_dataplane_refuses_client_shared_memory_unless_allowed(root: Path) -> None:
    registry = SharedMemoryRegistry(root, CudaRegistry(lambda: None))
    dataplane = DataPlane(EchoScheduler().router,
                          shared_memory=opener(registry, allow_client_shm=False))
    for request in (
        SharedMemoryRegister("in", "/data", 64),
        SharedMemoryRegister("g", "", 16, memory="cuda"),
        SharedMemoryUnregister("in"),
        SharedMemoryUnregister(),
        SharedMemoryUnregister(memory="cuda"),
    ):
        refused = error_of(handle, dataplane, request)
        assert (refused.code, refused.message) == (ErrorCode.UNSUPPORTED, CLIENT_SHM_DISABLED)
    assert CLIENT_SHM_DISABLED == ("Client shared memory is disabled. Start the server with "
                                   "'--allow-client-shm=true' to enable.")
    # Status stays open, and lists nothing: nothing could be registered.
    assert handle(dataplane, SharedMemoryStatusRequest()) == SharedMemoryStatus(())
    assert handle(dataplane, SharedMemoryStatusRequest(memory="cuda")) == SharedMemoryStatus(())
    assert len(registry) == 0
