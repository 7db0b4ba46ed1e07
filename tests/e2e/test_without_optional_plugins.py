"""A server with every optional built-in plugin disabled (``INFERD_DISABLE_PLUGINS``) still
serves ONNX and python models over HTTP and gRPC: caches, tracing, remote storage, the
control-state record and its stores, models on demand and the memory budget, repository
agents, the client commands and the other frameworks' backends are features, not parts of
the kernel. What stays: the two backends served here, the two KServe frontends, and the zmq
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
            "tensorrt", "response_cache", "tracing"} <= set(OPTIONAL)


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


FEATURE_FLAGS = ["--model-load-on-demand", "--model-control-state=x.json",
                 "--model-memory-budget=cpu=1GiB", "--cache-config=local,size=1048576",
                 "--response-cache-byte-size=1048576", "--cache-directory=/tmp",
                 "--trace-config=level=TIMESTAMPS", "--trace-file=/tmp/trace.json",
                 "--trace-level=TIMESTAMPS", "--trace-rate=1", "--trace-count=1",
                 "--trace-log-frequency=1"]


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
