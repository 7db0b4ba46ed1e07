"""The tensorflow backend end to end: one real ``inferd serve`` serving TensorFlow models
(a SavedModel with no config, auto-completed from its signature; the same SavedModel through
a second signature named by ``TF_SIGNATURE_DEF``; a SavedModel of strings; a GraphDef) beside
the ONNX ``simple`` model, a TorchScript model and a python model, called through
tritonclient's HTTP and gRPC clients. TensorFlow runs in an executor process of its own,
which never maps torch (and the CPU executor never maps TensorFlow); killing it under load
fails none of the other models' requests, and it comes back with its models.

The TensorFlow models are written by ``write_tensorflow_models.py`` in a process of its own,
so TensorFlow is never imported beside torch in this one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.protocols.client import AsyncClient
from inferd.protocols.errors import Unavailable
from tests.e2e.inferd_harness import InferdHarness, ServerHandle
from tests.services import import_or_missing, missing

# Looked up, not imported: TensorFlow must stay out of this process.
if importlib.util.find_spec("tensorflow") is None:
    missing("tensorflow-cpu", "make setup installs it unless WITH_TF=0")
torch = import_or_missing("torch", "make setup installs it unless WITH_TORCH=0")

PROTOCOLS = ("http", "grpc")
PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
WRITER = Path(__file__).with_name("write_tensorflow_models.py")
WAIT_SECS = 60.0

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

SIGNATURE_CONFIG = """
platform: "tensorflow_savedmodel"
parameters { key: "TF_SIGNATURE_DEF" value { string_value: "scaled" } }
parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "1" } }
"""
SCRIPTED_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
       { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }]
"""
BAD_SIGNATURE_CONFIG = """
platform: "tensorflow_savedmodel"
parameters { key: "TF_SIGNATURE_DEF" value { string_value: "nope" } }
"""
INIT_OPS_CONFIG = """
platform: "tensorflow_graphdef"
parameters { key: "TF_INIT_OPS_FILE" value { string_value: "init_ops.json" } }
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] }]
"""


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


def tensorflow_repository(harness: InferdHarness) -> Path:
    root: Path = harness.repository("simple")
    subprocess.run([sys.executable, str(WRITER), str(root)], check=True, timeout=120,
                   capture_output=True)
    saved = root / "tf_savedmodel" / "1" / "model.savedmodel"
    for name, config, model in (("tf_signature", SIGNATURE_CONFIG, saved),
                                ("tf_bad_signature", BAD_SIGNATURE_CONFIG, saved)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config, encoding="utf-8")
        (root / name / "1" / "model.savedmodel").symlink_to(model, target_is_directory=True)
    (root / "tf_init_ops" / "1").mkdir(parents=True)
    (root / "tf_init_ops" / "config.pbtxt").write_text(INIT_OPS_CONFIG, encoding="utf-8")
    (root / "tf_init_ops" / "1" / "model.graphdef").write_bytes(
        (root / "tf_graphdef" / "1" / "model.graphdef").read_bytes())
    (root / "scripted" / "1").mkdir(parents=True)
    (root / "scripted" / "config.pbtxt").write_text(SCRIPTED_CONFIG, encoding="utf-8")
    torch.jit.script(AddSub()).save(str(root / "scripted" / "1" / "model.pt"))
    harness.copy_models(root, PYTHON_MODELS, "add_sub")
    return root


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    # The models that fail their load are part of what is tested.
    return module_inferd.start(tensorflow_repository(module_inferd), "--exit-on-error", "false")


def connect(server: ServerHandle, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def infer(client: Any, protocol: str, model: str, inputs: dict[str, np.ndarray]
          ) -> Any:
    module: Any = httpclient if protocol == "http" else grpcclient
    datatypes = {np.dtype(np.int32): "INT32", np.dtype(np.float32): "FP32",
                 np.dtype(object): "BYTES"}
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), datatypes[array.dtype])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return client.infer(model, tensors)


def executor_pids(server: ServerHandle) -> dict[str, int]:
    """The pid each executor last started with, from the server's log."""
    pids = {}
    for line in server.log().splitlines():
        if " started executor/" in line and "(pid " in line:
            name = line.split(" started ", 1)[1].split(" ", 1)[0]
            pids[name] = int(line.rsplit("(pid ", 1)[1].rstrip(")"))
    return pids


def mapped_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tensorflow_models_serve_beside_onnx_torchscript_and_python(
    server: ServerHandle, protocol: str
) -> None:
    client = connect(server, protocol)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    y = rng.standard_normal((3, 16)).astype(np.float32)
    saved = infer(client, protocol, "tf_savedmodel", {"x": x, "y": y})
    np.testing.assert_allclose(saved.as_numpy("sum"), x + y, rtol=1e-6)
    np.testing.assert_allclose(saved.as_numpy("product"), x * y, rtol=1e-6)
    scaled = infer(client, protocol, "tf_signature", {"x": x})
    np.testing.assert_allclose(scaled.as_numpy("scaled"), x * 3, rtol=1e-6)

    a = rng.integers(-100, 100, (2, 16), dtype=np.int32)
    b = rng.integers(-100, 100, (2, 16), dtype=np.int32)
    graph = infer(client, protocol, "tf_graphdef", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(graph.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(graph.as_numpy("OUTPUT1"), a - b)
    simple = infer(client, protocol, "simple", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(simple.as_numpy("OUTPUT0"), a + b)
    scripted = infer(client, protocol, "scripted", {"INPUT__0": a, "INPUT__1": b})
    np.testing.assert_array_equal(scripted.as_numpy("OUTPUT__1"), a - b)
    f = rng.standard_normal(4).astype(np.float32)
    add_sub = infer(client, protocol, "add_sub", {"INPUT0": f, "INPUT1": f})
    np.testing.assert_allclose(add_sub.as_numpy("OUTPUT0"), f + f)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_strings_travel_as_tf_string(server: ServerHandle, protocol: str) -> None:
    text = np.array([[b"tensor"], ["h\u00e9llo".encode()], [b""]], dtype=object)
    result = infer(connect(server, protocol), protocol, "tf_strings", {"text": text})
    assert result.as_numpy("upper").tolist() == [[b"TENSOR"], ["H\u00e9LLO".encode()], [b""]]
    assert result.as_numpy("length").tolist() == [[6], [6], [0]]


async def concurrent_rows(url: str, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    async with AsyncClient(url, timeout=WAIT_SECS) as client:
        async def one(index: int) -> tuple[np.ndarray, np.ndarray]:
            x = np.full((1, 16), index, np.float32)
            result = await client.infer("tf_savedmodel", {"x": x, "y": x})
            return x, result.as_numpy("product")
        return list(await asyncio.gather(*(one(index) for index in range(count))))


def test_concurrent_requests_batched_together_each_get_their_own_rows(
        server: ServerHandle) -> None:
    before = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        "tf_savedmodel")["model_stats"][0]
    for x, product in asyncio.run(concurrent_rows(server.url, 24)):
        np.testing.assert_array_equal(product, x * x)
    after = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        "tf_savedmodel")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 24
    assert after["execution_count"] - before["execution_count"] < 24  # some ran as one batch


def test_a_savedmodel_config_is_completed_from_its_signature(server: ServerHandle) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("tf_savedmodel")
    assert (config["platform"], config["backend"]) == ("tensorflow_savedmodel", "tensorflow")
    assert config["max_batch_size"] == 4  # Triton's default-max-batch-size
    assert "dynamic_batching" in config
    tensors = {t["name"]: (t["data_type"], t["dims"]) for t in config["input"] + config["output"]}
    assert tensors == {name: ("TYPE_FP32", [16]) for name in ("x", "y", "sum", "product")}
    strings = httpclient.InferenceServerClient(server.http_url).get_model_config("tf_strings")
    assert {t["name"]: t["data_type"] for t in strings["input"] + strings["output"]} == {
        "text": "TYPE_STRING", "upper": "TYPE_STRING", "length": "TYPE_INT32"}
    signature = httpclient.InferenceServerClient(server.http_url).get_model_config("tf_signature")
    assert [t["name"] for t in signature["input"]] == ["x"]
    assert [t["name"] for t in signature["output"]] == ["scaled"]


def test_loads_that_cannot_work_fail_alone_with_the_reason(server: ServerHandle) -> None:
    index = {entry["name"]: entry for entry in
             httpclient.InferenceServerClient(server.http_url).get_model_repository_index()}
    bad = index["tf_bad_signature"]
    assert bad["state"] == "UNAVAILABLE"
    assert "has no signature 'nope'; its signatures are: scaled, serving_default" in bad["reason"]
    init_ops = index["tf_init_ops"]
    assert init_ops["state"] == "UNAVAILABLE"
    assert "parameter TF_INIT_OPS_FILE is not supported" in init_ops["reason"]
    assert index["tf_graphdef"]["state"] == "READY"


def test_tensorflow_runs_in_a_process_that_never_maps_torch(server: ServerHandle) -> None:
    pids = executor_pids(server)
    assert "executor/tensorflow" in pids, server.log()
    tensorflow_maps = mapped_libraries(pids["executor/tensorflow"])
    server_maps = mapped_libraries(server.process.pid)  # pytorch runs in the server's process
    assert "libtensorflow" in tensorflow_maps and "libtorch" not in tensorflow_maps
    assert "libtorch" in server_maps and "libtensorflow" not in server_maps


def test_without_tensorflow_only_its_models_are_unavailable(
        inferd: InferdHarness, tmp_path: Path) -> None:
    # A package that shadows the installed tensorflow and fails to import, as a machine
    # without it would.
    shadow = tmp_path / "no_tensorflow" / "tensorflow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorflow'\")\n", encoding="utf-8")
    root = inferd.repository("simple")
    subprocess.run([sys.executable, str(WRITER), str(root)], check=True, timeout=120,
                   capture_output=True)
    pythonpath = os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH")]))
    server = inferd.start(root, "--exit-on-error", "false", env={"PYTHONPATH": pythonpath})
    client = httpclient.InferenceServerClient(server.http_url)
    index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    for name in ("tf_savedmodel", "tf_strings", "tf_graphdef"):
        assert index[name]["state"] == "UNAVAILABLE"
        assert index[name]["reason"].startswith(
            "tensorflow is not installed on this machine; install inferd[tensorflow]"), index[name]
    assert index["simple"]["state"] == "READY"
    ones = np.ones((1, 16), np.int32)
    result = infer(client, "http", "simple", {"INPUT0": ones, "INPUT1": ones})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ones * 2)


async def others_under_load(url: str, stop: asyncio.Event) -> list[Any]:
    """``simple`` and ``scripted`` requests back to back until ``stop``: each a result check
    or the error."""
    outcomes: list[Any] = []
    ones = np.ones((1, 16), np.int32)
    async with AsyncClient(url, timeout=WAIT_SECS) as client:
        while not stop.is_set():
            for model, inputs, output in (("simple", ("INPUT0", "INPUT1"), "OUTPUT0"),
                                          ("scripted", ("INPUT__0", "INPUT__1"), "OUTPUT__0")):
                try:
                    result = await client.infer(model, dict.fromkeys(inputs, ones))
                    outcomes.append(result.as_numpy(output).tolist() == (ones * 2).tolist())
                except Exception as error:  # noqa: BLE001 - collected, asserted on below
                    outcomes.append(error)
    return outcomes


async def tensorflow_under_load(url: str, stop: asyncio.Event) -> list[Any]:
    outcomes: list[Any] = []
    x = np.ones((1, 16), np.float32)
    async with AsyncClient(url, timeout=WAIT_SECS) as client:
        while not stop.is_set():
            try:
                result = await client.infer("tf_savedmodel", {"x": x, "y": x})
                outcomes.append(result.as_numpy("sum").tolist() == (x * 2).tolist())
            except Exception as error:  # noqa: BLE001
                outcomes.append(error)
    return outcomes


async def kill_under_load(url: str, pid: int) -> tuple[list[Any], list[Any]]:
    stop = asyncio.Event()
    others = asyncio.create_task(others_under_load(url, stop))
    tensorflow = asyncio.create_task(tensorflow_under_load(url, stop))
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(1.0)
    stop.set()
    return await others, await tensorflow


def test_killing_the_tensorflow_executor_under_load_leaves_the_others_untouched(
    server: ServerHandle,
) -> None:
    pid = executor_pids(server)["executor/tensorflow"]
    others, tensorflow = asyncio.run(kill_under_load(server.url, pid))

    assert others and all(outcome is True for outcome in others), [
        o for o in others if o is not True][:3]
    assert any(outcome is True for outcome in tensorflow)
    failures = [outcome for outcome in tensorflow if outcome is not True]
    assert failures, "the kill should have failed the requests in flight on TensorFlow"
    exited = f"executor process executor/tensorflow (pid {pid}) exited with code -9"
    assert exited in str(failures[0])
    # A request sent as the process dies fails the same way; then, until the restarted
    # executor has loaded the model again, a retryable 503 says it is being reloaded.
    reloading = f"model 'tf_savedmodel' is being reloaded: {exited.split(' with ')[0]}"
    assert all(exited in str(failure) or (
        isinstance(failure, Unavailable) and reloading in str(failure)) for failure in failures
    ), failures

    # The executor is restarted with its models, and they serve again.
    client = httpclient.InferenceServerClient(server.http_url)
    deadline = time.monotonic() + WAIT_SECS
    while not (executor_pids(server)["executor/tensorflow"] != pid
               and client.is_model_ready("tf_savedmodel") and client.is_model_ready("tf_strings")):
        if time.monotonic() > deadline:
            pytest.fail(f"TensorFlow models not back within {WAIT_SECS} s; log:\n{server.log()}")
        time.sleep(0.1)
    x = np.ones((2, 16), np.float32)
    result = infer(client, "http", "tf_savedmodel", {"x": x, "y": x})
    np.testing.assert_array_equal(result.as_numpy("sum"), x * 2)
