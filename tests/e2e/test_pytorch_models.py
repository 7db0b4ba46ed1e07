"""The pytorch backend end to end: one real ``inferd serve`` serving the ONNX ``simple``
model, a TorchScript model (``model.pt``, Triton's ``INPUT__0`` / ``OUTPUT__0`` names) and a
``torch.export`` program (``model.pt2`` with no config: auto-completed from its signature)
side by side with a python model (``add_sub``), called through tritonclient's HTTP and gRPC
clients. A ``KIND_GPU`` pytorch model on this GPU-less machine fails its load with a clear
reason while the others serve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.kernel.sdk.devices import visible_gpus
from tests.e2e.inferd_harness import InferdHarness, ServerHandle
from tests.services import import_or_missing

torch = import_or_missing("torch", "make setup installs it unless WITH_TORCH=0")

PROTOCOLS = ("http", "grpc")
PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

SCRIPTED_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
       { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }]
dynamic_batching { }
"""
GPU_CONFIG = """
backend: "pytorch"
input [{ name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
       { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }]
instance_group [{ kind: KIND_GPU count: 1 }]
"""


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class ScaleShift(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scaled": x * 2.0, "shifted": x + y}


def torch_repository(harness: InferdHarness) -> Path:
    root: Path = harness.repository("simple")
    for name, config in (("scripted", SCRIPTED_CONFIG), ("scripted_gpu", GPU_CONFIG)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config, encoding="utf-8")
        torch.jit.script(AddSub()).save(str(root / name / "1" / "model.pt"))
    (root / "exported" / "1").mkdir(parents=True)
    program = torch.export.export(
        ScaleShift(), (torch.ones(3), torch.ones(3)),
        dynamic_shapes=({0: torch.export.Dim("n", max=4096)},) * 2,
    )
    torch.export.save(program, str(root / "exported" / "1" / "model.pt2"))
    harness.copy_models(root, PYTHON_MODELS, "add_sub")  # and a python model beside them
    return root


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    # A failed model must not stop the server: the GPU model's failure is what is tested.
    return module_inferd.start(torch_repository(module_inferd), "--exit-on-error", "false")


def connect(server: ServerHandle, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def infer(client: Any, protocol: str, model: str, inputs: dict[str, np.ndarray],
          outputs: list[str]) -> dict[str, np.ndarray]:
    module: Any = httpclient if protocol == "http" else grpcclient
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), "INT32" if array.dtype == np.int32
                                   else "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    wanted = [module.InferRequestedOutput(name) for name in outputs]
    result = client.infer(model, tensors, outputs=wanted)
    return {name: result.as_numpy(name) for name in outputs}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_onnx_torchscript_exported_and_python_models_serve_side_by_side(
    server: ServerHandle, protocol: str
) -> None:
    client = connect(server, protocol)
    rng = np.random.default_rng(7)
    a = rng.integers(-100, 100, (2, 16), dtype=np.int32)
    b = rng.integers(-100, 100, (2, 16), dtype=np.int32)
    simple = infer(client, protocol, "simple", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(simple["OUTPUT0"], a + b)
    scripted = infer(client, protocol, "scripted", {"INPUT__0": a, "INPUT__1": b},
                     ["OUTPUT__0", "OUTPUT__1"])
    np.testing.assert_array_equal(scripted["OUTPUT__0"], a + b)
    np.testing.assert_array_equal(scripted["OUTPUT__1"], a - b)
    x = np.asarray([1.5, -2.0, 4.0, 0.25, 8.0], dtype=np.float32)
    y = np.ones(5, dtype=np.float32)
    exported = infer(client, protocol, "exported", {"x": x, "y": y}, ["scaled", "shifted"])
    np.testing.assert_array_equal(exported["scaled"], x * 2)
    np.testing.assert_array_equal(exported["shifted"], x + y)
    p, q = x[:4], np.full(4, 0.5, np.float32)
    python = infer(client, protocol, "add_sub", {"INPUT0": p, "INPUT1": q},
                   ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(python["OUTPUT0"], p + q)
    np.testing.assert_array_equal(python["OUTPUT1"], p - q)


def test_the_exported_models_config_is_completed_from_its_signature(
    server: ServerHandle,
) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("exported")
    assert config["backend"] == "pytorch"
    assert config["max_batch_size"] == 0
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("x", "TYPE_FP32", [-1]), ("y", "TYPE_FP32", [-1]),
    ]
    assert [o["name"] for o in config["output"]] == ["scaled", "shifted"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU-less case needs no CUDA here")
def test_a_gpu_model_without_cuda_is_unavailable_with_the_reason(server: ServerHandle) -> None:
    index = httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    states = {entry["name"]: entry for entry in index}
    assert states["scripted"]["state"] == "READY"
    assert states["exported"]["state"] == "READY"
    gpu = states["scripted_gpu"]
    assert gpu["state"] == "UNAVAILABLE"
    if visible_gpus():  # a GPU, but (in make test) torch's CPU build: the backend refuses
        assert "sees no CUDA GPU here" in gpu["reason"]
        assert "does not fall back to the CPU" in gpu["reason"]
    else:  # no GPU at all: the kernel refuses first, as Triton does
        assert "has kind KIND_GPU but no GPUs are available" in gpu["reason"]
