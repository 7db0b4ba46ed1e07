"""The KServe/Triton system shared-memory extension end to end, as tritonclient uses it: regions
made with ``tritonclient.utils.shared_memory``, registered, listed and unregistered over HTTP
and gRPC, inputs read from and outputs written into them (alone and mixed with inline
tensors), Triton's errors with the server serving on, and no ``/dev/shm`` object left by the
server. One server serves the module; each test destroys the regions it creates.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, started_batches, wait_started

from inferd.kernel.sdk.devices import visible_gpus
SHM_ROOT = Path("/dev/shm")
_KEYS = count()


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root = module_inferd.repository(
        "simple",
        "identity_fp32",
        # Held until slow.release exists, so a test acts while a request is in it.
        configs={"slow": module_inferd.testing_config(
            "slow", "slow", delay_ms="30000",
            started_file=str(module_inferd.folder / "slow.started"),
            release_file=str(module_inferd.folder / "slow.release"))},
    )
    return module_inferd.start(root, "--model-control-mode=explicit", "--load-model=*",
                               "--allow-client-shm=true")


class Regions:
    """The test's regions: created here, destroyed (and so unlinked) at teardown."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def create(self, name: str, byte_size: int) -> tuple[Any, str]:
        key = f"/inferd_test_{os.getpid()}_{next(_KEYS)}_{name}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self.handles.append(handle)
        return handle, key

    def destroy(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions() -> Iterator[Regions]:
    made = Regions()
    yield made
    made.destroy()


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: ServerHandle) -> Iterator[Any]:
    if request.param == "http":
        with httpclient.InferenceServerClient(server.http_url) as http:
            yield http
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            yield grpc
    # Every test leaves the server with no region, whatever it did.
    with httpclient.InferenceServerClient(server.http_url) as cleaner:
        cleaner.unregister_system_shared_memory()


def module_of(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def statuses(client: Any, name: str = "") -> dict[str, tuple[str, int, int]]:
    """Region name -> (key, offset, byte_size), from either protocol's status."""
    if isinstance(client, httpclient.InferenceServerClient):
        rows = client.get_system_shared_memory_status(name)
        return {r["name"]: (r["key"], int(r["offset"]), int(r["byte_size"])) for r in rows}
    reply = client.get_system_shared_memory_status(name)
    return {n: (r.key, r.offset, r.byte_size) for n, r in reply.regions.items()}


def status_code(error: InferenceServerException) -> str:
    """HTTP status as text ("400") or gRPC code ("StatusCode.NOT_FOUND")."""
    return str(error.status())


def assert_refused(client: Any, call: Any, http: str, grpc: str, message: str) -> None:
    with pytest.raises(InferenceServerException) as error:
        call()
    expected = http if isinstance(client, httpclient.InferenceServerClient) else grpc
    assert status_code(error.value) == expected
    assert message in error.value.message()


def simple_values() -> tuple[np.ndarray, np.ndarray]:
    return np.arange(16, dtype=np.int32).reshape(1, 16), np.ones((1, 16), dtype=np.int32)


def shm_input(client: Any, name: str, shape: list[int], datatype: str, region: str,
              byte_size: int, offset: int = 0) -> Any:
    tensor = module_of(client).InferInput(name, shape, datatype)
    tensor.set_shared_memory(region, byte_size, offset)
    return tensor


def shm_output(client: Any, name: str, region: str, byte_size: int, offset: int = 0) -> Any:
    output = module_of(client).InferRequestedOutput(name)
    output.set_shared_memory(region, byte_size, offset)
    return output


# ------------------------------------------------------------------------------ inference


def test_simple_inputs_and_outputs_in_shared_memory(client: Any, regions: Regions) -> None:
    first, second = simple_values()
    inputs, input_key = regions.create("simple_in", 128)
    outputs, output_key = regions.create("simple_out", 128)
    shm.set_shared_memory_region(inputs, [first, second])
    client.register_system_shared_memory("simple_in", input_key, 128)
    client.register_system_shared_memory("simple_out", output_key, 128)
    result = client.infer("simple", [
        shm_input(client, "INPUT0", [1, 16], "INT32", "simple_in", 64),
        shm_input(client, "INPUT1", [1, 16], "INT32", "simple_in", 64, offset=64),
    ], outputs=[
        shm_output(client, "OUTPUT0", "simple_out", 64),
        shm_output(client, "OUTPUT1", "simple_out", 64, offset=64),
    ])
    total = shm.get_contents_as_numpy(outputs, np.int32, [1, 16])
    difference = shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=64)
    np.testing.assert_array_equal(total, first + second)
    np.testing.assert_array_equal(difference, first - second)
    answered = result.get_output("OUTPUT0")
    if isinstance(client, httpclient.InferenceServerClient):
        assert answered == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    else:
        assert (answered.datatype, list(answered.shape)) == ("INT32", [1, 16])
        assert result.get_response().raw_output_contents == [b"", b""]


def test_identity_fp32_round_trip(client: Any, regions: Regions) -> None:
    values = np.linspace(-1, 1, 1000, dtype=np.float32)
    region, key = regions.create("identity", values.nbytes * 2)
    shm.set_shared_memory_region(region, [values])
    client.register_system_shared_memory("identity", key, values.nbytes * 2)
    client.infer("identity_fp32", [
        shm_input(client, "INPUT0", [1000], "FP32", "identity", values.nbytes),
    ], outputs=[shm_output(client, "OUTPUT0", "identity", values.nbytes, values.nbytes)])
    written = shm.get_contents_as_numpy(region, np.float32, [1000], offset=values.nbytes)
    np.testing.assert_array_equal(written, values)


def test_mixed_inline_and_shared_memory(client: Any, regions: Regions) -> None:
    first, second = simple_values()
    region, key = regions.create("mixed", 128)
    shm.set_shared_memory_region(region, [second])
    client.register_system_shared_memory("mixed", key, 128)
    inline = module_of(client).InferInput("INPUT0", [1, 16], "INT32")
    inline.set_data_from_numpy(first)
    result = client.infer("simple", [
        inline, shm_input(client, "INPUT1", [1, 16], "INT32", "mixed", 64),
    ], outputs=[
        shm_output(client, "OUTPUT0", "mixed", 64, offset=64),
        module_of(client).InferRequestedOutput("OUTPUT1"),
    ])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    total = shm.get_contents_as_numpy(region, np.int32, [1, 16], offset=64)
    np.testing.assert_array_equal(total, first + second)


# ------------------------------------------------------------------------- registration


def test_status_and_unregister(client: Any, regions: Regions) -> None:
    _, key_a = regions.create("a", 64)
    _, key_b = regions.create("b", 8192)
    client.register_system_shared_memory("a", key_a, 64)
    client.register_system_shared_memory("b", key_b, 100, offset=5000)
    assert statuses(client) == {"a": (key_a, 0, 64), "b": (key_b, 5000, 100)}
    assert statuses(client, "b") == {"b": (key_b, 5000, 100)}
    client.unregister_system_shared_memory("a")
    client.unregister_system_shared_memory("never-registered")  # 200 / OK, nothing changes
    assert list(statuses(client)) == ["b"]
    client.register_system_shared_memory("a", key_a, 64)
    client.unregister_system_shared_memory()
    assert statuses(client) == {}


def test_errors_keep_the_server_serving(client: Any, regions: Regions) -> None:
    region, key = regions.create("err", 64)
    client.register_system_shared_memory("err", key, 64)
    assert_refused(client, lambda: client.register_system_shared_memory("err", key, 64),
                   "400", "StatusCode.ALREADY_EXISTS",
                   "shared memory region 'err' already in manager")
    assert_refused(client, lambda: client.register_system_shared_memory("big", key, 65),
                   "400", "StatusCode.INVALID_ARGUMENT",
                   "failed to register shared memory region 'big': invalid args")
    assert_refused(client, lambda: client.get_system_shared_memory_status("nope"),
                   "404", "StatusCode.NOT_FOUND",
                   "Unable to find system shared memory region: 'nope'")
    assert_refused(client, lambda: client.register_system_shared_memory("k", "/inferd_nokey", 8),
                   "400", "StatusCode.INVALID_ARGUMENT",
                   "Unable to open shared memory region: '/inferd_nokey'")
    first, _ = simple_values()
    inline = module_of(client).InferInput("INPUT1", [1, 16], "INT32")
    inline.set_data_from_numpy(first)

    def infer(input_region: str, size: int, offset: int, output_size: int = 64) -> Any:
        return client.infer("simple", [
            shm_input(client, "INPUT0", [1, 16], "INT32", input_region, size, offset), inline,
        ], outputs=[shm_output(client, "OUTPUT0", "err", output_size)])

    assert_refused(client, lambda: infer("nope", 64, 0), "404", "StatusCode.NOT_FOUND",
                   "Unable to find shared memory region: 'nope'")
    assert_refused(client, lambda: infer("err", 64, 8), "400", "StatusCode.INVALID_ARGUMENT",
                   "Invalid offset + byte size for shared memory region: 'err'")
    assert_refused(client, lambda: infer("err", 64, 0, output_size=32),
                   "400", "StatusCode.INVALID_ARGUMENT",
                   "shared memory size specified with the request for output 'OUTPUT0' "
                   "(32 bytes) should be at least 64 bytes to hold the results")
    assert_refused(client, lambda: infer("err", 32, 0), "400", "StatusCode.INVALID_ARGUMENT",
                   "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for "
                   "model 'simple'. Expected 64, got 32")
    shm.set_shared_memory_region(region, [first])
    infer("err", 64, 0)  # still serving, and the region still works
    np.testing.assert_array_equal(shm.get_contents_as_numpy(region, np.int32, [1, 16]),
                                  first + first)


def test_a_region_smaller_than_its_tensor_gets_tritons_message(client: Any,
                                                               regions: Regions) -> None:
    first, second = simple_values()
    region, key = regions.create("small", 128)
    shm.set_shared_memory_region(region, [first, second])
    client.register_system_shared_memory("small", key, 128)
    both = module_of(client).InferInput("INPUT0", [2, 16], "INT32")  # 128 bytes, 64 given
    both.set_shared_memory("small", 64)
    other = module_of(client).InferInput("INPUT1", [2, 16], "INT32")
    other.set_data_from_numpy(np.ones((2, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", [both, other], request_id="small-1")
    expected = "400" if module_of(client) is httpclient else "StatusCode.INVALID_ARGUMENT"
    assert (status_code(error.value), error.value.message()) == (expected, (
        "[request id: small-1] input byte size mismatch for input 'INPUT0' for model "
        "'simple'. Expected 128, got 64"))
    both.set_shared_memory("small", 128)
    result = client.infer("simple", [both, other])  # the same region, sized right
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"),
                                  np.concatenate([first, second]) + 1)


def test_status_lists_regions_by_name(server: ServerHandle, regions: Regions) -> None:
    with httpclient.InferenceServerClient(server.http_url) as http:
        for name in ("zeta", "alpha", "mid"):
            _, key = regions.create(name, 64)
            http.register_system_shared_memory(name, key, 64)
        try:
            assert [row["name"] for row in http.get_system_shared_memory_status()] == [
                "alpha", "mid", "zeta"]
        finally:
            http.unregister_system_shared_memory()


def test_an_input_given_two_ways_gets_tritons_message(server: ServerHandle,
                                                      regions: Regions) -> None:
    _, key = regions.create("twice", 64)
    with httpclient.InferenceServerClient(server.http_url) as http:
        http.register_system_shared_memory("twice", key, 64)
    prefix = ("Input must set only one of the following fields: 'data', 'binary_data_size' in "
              "'parameters', 'shared_memory_region' in 'parameters'. But ")
    region = {"shared_memory_region": "twice", "shared_memory_byte_size": 64}
    data = list(range(16))
    try:
        for given, parameters, told in [
            ({"data": data}, region, "set 'data' 'shared_memory_region'"),
            ({}, {**region, "binary_data_size": 64}, "set 'binary_data_size' "
             "'shared_memory_region'"),
            ({"data": data}, {"binary_data_size": 64}, "set 'data' 'binary_data_size'"),
            ({}, {}, "no field is set"),
        ]:
            first = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], **given,
                     "parameters": parameters}
            second = {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": data}
            body = json.dumps({"inputs": [first, second]}).encode()
            request = urllib.request.Request(
                f"http://{server.http_url}/v2/models/simple/infer", body, method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 400
            assert json.loads(refused.value.read()) == {"error": prefix + told}
        # gRPC's form of it: typed contents beside a region.
        request = service_pb2.ModelInferRequest(model_name="simple", id="both")
        tensor = request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
        tensor.parameters["shared_memory_region"].string_param = "twice"
        tensor.parameters["shared_memory_byte_size"].int64_param = 64
        tensor.contents.int_contents.extend(data)
        request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16]).contents.int_contents[
            :] = data
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as error:
                stub.ModelInfer(request)
        assert (error.value.code(), error.value.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT, "unexpected 'content' provided when using shared "
            "memory for input tensor 'INPUT0' for model 'simple'")
    finally:
        with httpclient.InferenceServerClient(server.http_url) as http:
            http.unregister_system_shared_memory()


@pytest.mark.skipif(bool(visible_gpus()), reason="this machine has a GPU (bench/gpu_check.sh)")
def test_cuda_shared_memory_is_refused_without_a_gpu(client: Any) -> None:
    assert_refused(client, lambda: client.register_cuda_shared_memory("g", b"\0" * 64, 0, 64),
                   "400", "StatusCode.INVALID_ARGUMENT",
                   "failed to register CUDA shared memory region: 'g', GPUs not supported")
    client.unregister_cuda_shared_memory()  # as Triton without GPUs: nothing to unregister
    status = client.get_cuda_shared_memory_status()
    assert (status == []) if isinstance(status, list) else (len(status.regions) == 0)


def test_server_metadata_lists_both_extensions(server: ServerHandle) -> None:
    with httpclient.InferenceServerClient(server.http_url) as http:
        extensions = http.get_server_metadata()["extensions"]
    # Triton lists cuda_shared_memory with or without GPUs (a register says whether it can).
    assert {"system_shared_memory", "cuda_shared_memory"} <= set(extensions)


def test_raw_http_bodies(server: ServerHandle) -> None:
    def post(path: str, body: bytes) -> tuple[int, Any]:
        request = urllib.request.Request(f"http://{server.http_url}{path}", body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())["error"]

    region = "/v2/systemsharedmemory/region/r/register"
    assert post(region, b'{"byte_size": 4}') == (
        400, "Shared memory register request has no 'key' field")
    assert post(region, b'{"key": "/x"}') == (
        400, "Shared memory register request has no 'byte_size' field")
    assert post("/v2/systemsharedmemory/register", b'{"key": "/x", "byte_size": 4}') == (
        400, "'region name' is necessary to register system shared memory region")
    status, _ = post("/v2/systemsharedmemory/status", b"")
    assert status == 405


def test_unregister_during_inference(server: ServerHandle, regions: Regions) -> None:
    """The mapping stays until the request finishes: the request succeeds and writes its
    output, the name is gone at once, and the server keeps serving."""
    values = np.arange(4, dtype=np.float32)
    region, key = regions.create("inflight", 32)
    shm.set_shared_memory_region(region, [values])
    results: list[Any] = []
    with httpclient.InferenceServerClient(server.http_url) as http:
        http.register_system_shared_memory("inflight", key, 32)
        tensor = httpclient.InferInput("INPUT0", [4], "FP32").set_shared_memory("inflight", 16)
        output = httpclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("inflight", 16, 16)
        worker = threading.Thread(target=lambda: results.append(
            http_call(server, "slow", [tensor], [output])))
        folder = server.log_path.parents[1]
        (folder / "slow.release").unlink(missing_ok=True)
        batches = len(started_batches(folder / "slow.started"))
        worker.start()
        wait_started(folder / "slow.started", batches + 1, server)  # in the model, held there
        http.unregister_system_shared_memory()
        assert http.get_system_shared_memory_status() == []
        (folder / "slow.release").touch()
        worker.join(timeout=30)
        assert results and not isinstance(results[0], Exception), results
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(region, np.float32, [4], offset=16), values)
        assert http.is_server_live()


def http_call(server: ServerHandle, model: str, inputs: list[Any], outputs: list[Any]) -> Any:
    try:
        with httpclient.InferenceServerClient(server.http_url) as http:
            return http.infer(model, inputs, outputs=outputs)
    except Exception as error:  # reported by the test, not lost in the thread
        return error


def test_the_server_leaves_no_shared_memory_objects(inferd: InferdHarness,
                                                    regions: Regions) -> None:
    before = set(os.listdir(SHM_ROOT))
    server = inferd.start(inferd.repository("simple"), "--allow-client-shm=true")
    first, second = simple_values()
    region, key = regions.create("leftover", 128)
    shm.set_shared_memory_region(region, [first, second])
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        grpc.register_system_shared_memory("leftover", key, 128)
        grpc.infer("simple", [
            shm_input(grpc, "INPUT0", [1, 16], "INT32", "leftover", 64),
            shm_input(grpc, "INPUT1", [1, 16], "INT32", "leftover", 64, offset=64),
        ], outputs=[shm_output(grpc, "OUTPUT0", "leftover", 64)])
    assert server.terminate() == 0
    regions.destroy()
    regions.handles.clear()
    ours = key.lstrip("/")
    assert ours not in os.listdir(SHM_ROOT)  # the server never unlinks, the client did
    left = {name for name in set(os.listdir(SHM_ROOT)) - before if "inferd" in name}
    assert left == set()
