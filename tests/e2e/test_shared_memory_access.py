"""Who may register shared memory, end to end with tritonclient over HTTP and gRPC: without
``--allow-client-shm`` (tritonserver's default since 2.68) a register or unregister, system or
CUDA, gets Triton's 501 / UNIMPLEMENTED while status answers; with it, a client's own region
works, but a key naming one of the server's own segments (a real one, taken from ``/dev/shm``
while the server runs) is refused with 400 / INVALID_ARGUMENT, however the path is spelled,
and no answer on the shared-memory paths ever carries a segment's name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

SHM_ROOT = Path("/dev/shm")
ELEMENTS = 262_144  # FP32, 1 MiB: past the link's threshold, so it crosses in segments
DISABLED = ("Client shared memory is disabled. Start the server with "
            "'--allow-client-shm=true' to enable.")
OWN_SEGMENT = ("cannot register shared memory region 'stolen': its key names one of the "
               "server's own shared memory objects (keys beginning with 'inferd-<number>-' are "
               "reserved)")
SERVER_OBJECT = re.compile(r"inferd-[0-9]+-")  # how the server names what it creates

pytestmark = pytest.mark.skipif(not SHM_ROOT.is_dir(), reason="no /dev/shm")


@pytest.fixture(scope="module")
def allowed(module_inferd: InferdHarness) -> ServerHandle:
    # The onnxruntime models in an executor process: tensors cross the link in segments.
    return module_inferd.start(module_inferd.repository("identity_fp32", "simple"),
                               "--allow-client-shm=true", "--cpu-executor", "process")


@pytest.fixture(scope="module")
def default(module_inferd: InferdHarness) -> ServerHandle:
    return module_inferd.start(module_inferd.repository("simple"))


@pytest.fixture
def own_region() -> Iterator[tuple[Any, str]]:
    key = f"/inferd_access_test_{os.getpid()}"
    handle = shm.create_shared_memory_region("own", key, 2 * ELEMENTS * 4)
    yield handle, key
    shm.destroy_shared_memory_region(handle)


def client_of(protocol: str, server: ServerHandle) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def module_of(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def refusal(call: Callable[[], Any]) -> tuple[str, str]:
    """(HTTP status or gRPC code, message) of a call that must fail."""
    with pytest.raises(InferenceServerException) as error:
        call()
    return str(error.value.status()), error.value.message()


def region_names(client: Any) -> list[str]:
    status = client.get_system_shared_memory_status()
    if isinstance(client, httpclient.InferenceServerClient):
        return [row["name"] for row in status]
    return list(status.regions)


def identity(client: Any, values: np.ndarray) -> None:
    tensor = module_of(client).InferInput("INPUT0", [ELEMENTS], "FP32")
    tensor.set_data_from_numpy(values)
    result = client.infer("identity_fp32", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def segments_of(server: ServerHandle) -> list[str]:
    """The server's link segments in /dev/shm now."""
    return sorted(name for name in os.listdir(SHM_ROOT)
                  if name.startswith(f"inferd-{server.process.pid}-"))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_the_flag_registering_is_refused_as_triton_refuses_it(
        default: ServerHandle, own_region: tuple[Any, str], protocol: str) -> None:
    _, key = own_region
    expected = ("501", DISABLED) if protocol == "http" else ("StatusCode.UNIMPLEMENTED", DISABLED)
    with client_of(protocol, default) as client:
        for call in (
            lambda: client.register_system_shared_memory("own", key, 64),
            lambda: client.unregister_system_shared_memory("own"),
            lambda: client.unregister_system_shared_memory(),
            lambda: client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64),
            lambda: client.unregister_cuda_shared_memory(),
        ):
            assert refusal(call) == expected
        assert region_names(client) == []  # status still answers, and nothing got in
        cuda = client.get_cuda_shared_memory_status()
        assert (cuda == []) if isinstance(cuda, list) else (len(cuda.regions) == 0)
        tensor = module_of(client).InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_shared_memory("own", 64)
        other = module_of(client).InferInput("INPUT1", [1, 16], "INT32")
        other.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        status, message = refusal(lambda: client.infer("simple", [tensor, other]))
        assert status in ("404", "StatusCode.NOT_FOUND")
        assert message == "Unable to find shared memory region: 'own'"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_key_naming_a_server_segment_is_refused_without_its_name(
        allowed: ServerHandle, own_region: tuple[Any, str], protocol: str) -> None:
    values = np.random.default_rng(5).random(ELEMENTS, dtype=np.float32)
    with client_of(protocol, allowed) as client:
        identity(client, values)  # the input and the output each crossed in a segment
        segments = segments_of(allowed)
        assert segments, "the inference left no link segment in /dev/shm"
        invalid = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
        for segment in segments:
            for key in (segment, f"/{segment}", f"//{segment}", f"/./{segment}",
                        f"/../shm/{segment}", f"/dev/shm/{segment}"):
                status, message = refusal(
                    lambda key=key: client.register_system_shared_memory("stolen", key, 64))
                assert (status, message) == (invalid, OWN_SEGMENT), key
                assert segment not in message and str(allowed.process.pid) not in message
        assert region_names(client) == []
        # The client's own region still registers and serves, in and out.
        handle, key = own_region
        shm.set_shared_memory_region(handle, [values])
        client.register_system_shared_memory("own", key, 2 * ELEMENTS * 4)
        try:
            tensor = module_of(client).InferInput("INPUT0", [ELEMENTS], "FP32")
            tensor.set_shared_memory("own", ELEMENTS * 4)
            output = module_of(client).InferRequestedOutput("OUTPUT0")
            output.set_shared_memory("own", ELEMENTS * 4, offset=ELEMENTS * 4)
            client.infer("identity_fp32", [tensor], outputs=[output])
            written = shm.get_contents_as_numpy(handle, np.float32, [ELEMENTS],
                                                offset=ELEMENTS * 4)
            np.testing.assert_array_equal(written, values)
            assert region_names(client) == ["own"]
        finally:
            client.unregister_system_shared_memory()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_no_shared_memory_error_names_a_server_object(
        allowed: ServerHandle, own_region: tuple[Any, str], protocol: str) -> None:
    handle, key = own_region
    values = np.arange(ELEMENTS, dtype=np.float32)
    shm.set_shared_memory_region(handle, [values])
    with client_of(protocol, allowed) as client:
        identity(client, values)
        assert segments_of(allowed)  # there are names to leak
        client.register_system_shared_memory("own", key, ELEMENTS * 4)

        def infer(region: str, size: int, offset: int = 0, output_size: int = 64) -> Any:
            tensor = module_of(client).InferInput("INPUT0", [ELEMENTS], "FP32")
            tensor.set_shared_memory(region, size, offset)
            output = module_of(client).InferRequestedOutput("OUTPUT0")
            output.set_shared_memory("own", output_size)
            return client.infer("identity_fp32", [tensor], outputs=[output])

        try:
            messages = [refusal(call)[1] for call in (
                lambda: client.register_system_shared_memory("own", key, 64),
                lambda: client.register_system_shared_memory("big", key, ELEMENTS * 8 + 1),
                lambda: client.register_system_shared_memory("k", "/inferd_no_such_key", 8),
                lambda: client.register_system_shared_memory("up", "/../inferd_x", 8),
                lambda: client.get_system_shared_memory_status("nope"),
                lambda: infer("nope", ELEMENTS * 4),
                lambda: infer("own", ELEMENTS * 4, offset=4),
                lambda: infer("own", 64),
                lambda: infer("own", ELEMENTS * 4, output_size=64),
            )]
        finally:
            client.unregister_system_shared_memory()
    assert len(messages) == 9 and all(messages)
    leaked = [message for message in messages if SERVER_OBJECT.search(message)]
    assert leaked == []
