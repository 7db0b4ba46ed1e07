"""A server with every optional built-in plugin disabled (``INFERD_DISABLE_PLUGINS``) still
serves ONNX and python models over HTTP and gRPC: caches, tracing, remote storage, the
control-state record and its stores, models on demand and the memory budget, client shared
memory, repository agents, the client commands and the other frameworks' backends are
features, not parts of the kernel. Without the shared-memory plugin the extension's endpoints
answer as Triton does with client shared memory off, and a request naming a region is a
client error. What stays: the two backends served here, the two KServe frontends, and the zmq
and metrics frontends the test harness starts every server with."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import INFERD_ARGUMENTS, InferdHarness, ServerHandle

ESSENTIAL = {"onnxruntime", "python", "kserve_http", "kserve_grpc", "zmq", "metrics"}
OPTIONAL = sorted({entry.name for entry in importlib.metadata.entry_points(group="inferd")}
                  - ESSENTIAL)
DISABLED = {"INFERD_DISABLE_PLUGINS": ",".join(OPTIONAL)}
PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"


def test_every_optional_feature_is_a_plugin_that_can_be_disabled() -> None:
    assert {"local_cache", "redis_cache", "triton_trace", "opentelemetry_trace",
            "fsspec_storage", "control_state", "path_control_state", "s3_control_state",
            "on_demand", "checksum_agent", "client_commands", "tensorflow", "pytorch",
            "tensorrt", "response_cache", "tracing", "shared_memory"} <= set(OPTIONAL)


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root = module_inferd.repository("simple")
    module_inferd.copy_models(root, PYTHON_MODELS, "add_sub")
    return module_inferd.start(root, env=DISABLED)


@pytest.fixture(params=("http", "grpc"))
def client(request: pytest.FixtureRequest, server: ServerHandle) -> Iterator[Any]:
    if request.param == "http":
        with httpclient.InferenceServerClient(server.http_url) as http:
            yield http
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            yield grpc


def inputs(client: Any, arrays: dict[str, np.ndarray], datatype: str) -> list[Any]:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def test_an_onnx_model_is_served(client: Any) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    result = client.infer("simple", inputs(client, {"INPUT0": a, "INPUT1": b}, "INT32"))
    assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    assert result.as_numpy("OUTPUT1").tolist() == (a - b).tolist()


def test_a_python_model_is_served(client: Any) -> None:
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([4, 3, 2, 1], dtype=np.float32)
    result = client.infer("add_sub", inputs(client, {"INPUT0": a, "INPUT1": b}, "FP32"))
    assert result.as_numpy("OUTPUT0").tolist() == [5, 5, 5, 5]
    assert result.as_numpy("OUTPUT1").tolist() == [-3, -1, 1, 3]


SHM_DISABLED = ("Client shared memory is disabled. Start the server with "
                "'--allow-client-shm=true' to enable.")


def refusal(call: Any) -> tuple[str, str]:
    """(HTTP status or gRPC code, message) of a call that must fail."""
    with pytest.raises(InferenceServerException) as error:
        call()
    return str(error.value.status()), error.value.message()


def test_the_shared_memory_endpoints_answer_as_with_client_shared_memory_off(
        client: Any) -> None:
    http = isinstance(client, httpclient.InferenceServerClient)
    expected = ("501" if http else "StatusCode.UNIMPLEMENTED", SHM_DISABLED)
    for call in (
        lambda: client.get_system_shared_memory_status(),
        lambda: client.register_system_shared_memory("own", "/inferd_no_plugin", 64),
        lambda: client.unregister_system_shared_memory(),
        lambda: client.get_cuda_shared_memory_status(),
        lambda: client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64),
        lambda: client.unregister_cuda_shared_memory("gpu"),
    ):
        assert refusal(call) == expected
    metadata = client.get_server_metadata()
    extensions = metadata["extensions"] if http else list(metadata.extensions)
    assert "model_repository" in extensions
    assert not {"system_shared_memory", "cuda_shared_memory"} & set(extensions)


def test_a_request_naming_a_region_is_a_client_error(client: Any) -> None:
    http = isinstance(client, httpclient.InferenceServerClient)
    module = httpclient if http else grpcclient
    tensor = module.InferInput("INPUT0", [1, 16], "INT32")
    tensor.set_shared_memory("own", 64)
    other = module.InferInput("INPUT1", [1, 16], "INT32")
    other.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    status, message = refusal(lambda: client.infer("simple", [tensor, other]))
    assert status == ("400" if http else "StatusCode.INVALID_ARGUMENT")
    assert message == ("tensor 'INPUT0' names shared memory region 'own', but this server has "
                       "no client shared memory (its shared_memory plugin is not installed)")
    # Nothing else changed: the model still serves.
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer("simple", inputs(client, {"INPUT0": a, "INPUT1": a}, "INT32"))
    assert result.as_numpy("OUTPUT0").tolist() == (a + a).tolist()


FEATURE_FLAGS = ["--model-load-on-demand", "--model-control-state=x.json",
                 "--model-memory-budget=cpu=1GiB", "--cache-config=local,size=1048576",
                 "--response-cache-byte-size=1048576", "--cache-directory=/tmp",
                 "--trace-config=level=TIMESTAMPS", "--trace-file=/tmp/trace.json",
                 "--trace-level=TIMESTAMPS", "--trace-rate=1", "--trace-count=1",
                 "--trace-log-frequency=1", "--allow-client-shm=true"]


@pytest.mark.parametrize("flag", FEATURE_FLAGS)
def test_a_disabled_features_flag_is_not_there(tmp_path: Path, flag: str) -> None:
    finished = subprocess.run(
        [sys.executable, *INFERD_ARGUMENTS, "serve", "--model-repository", str(tmp_path), flag],
        env={**os.environ, **DISABLED}, capture_output=True, text=True,
        timeout=120, check=False)
    assert finished.returncode == 2 and "unrecognized arguments" in finished.stderr


def test_serve_help_lists_no_disabled_features_flag() -> None:
    def help_text(env: dict[str, str]) -> str:
        return subprocess.run([sys.executable, *INFERD_ARGUMENTS, "serve", "--help"],
                              env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=120, check=True).stdout

    names = {flag.split("=")[0] for flag in FEATURE_FLAGS}
    assert names <= set(help_text({}).split())  # each is there with its plugin
    assert not names & set(help_text(DISABLED).split())
