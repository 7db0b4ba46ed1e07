"""Models of a hundred mebibytes of weights, written into a repository for the tests and the
bench that load and unload them many times (``test_unload_memory``, ``bench/performance/unload_memory.py``).
Generated on demand, never committed: an ONNX graph of ``LAYERS`` MatMuls whose weights are
initializers of the model file, and a TorchScript module holding the same weights as
parameters, both taking one ``INPUT`` row of ``SIDE`` floats through every layer; and a
python model each of whose instances makes as much in ``initialize``. Layers of 2 MiB, as real
models have, rather than one large tensor: glibc serves allocations of that size from its
heaps once a larger block has been freed, and keeps them there after they are freed, unless
trimmed; one 100 MiB block would be mapped and unmapped on its own and show nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIDE = 725
LAYERS = 50
WEIGHT_BYTES = LAYERS * SIDE * SIDE * 4  # 100.3 MiB (105.1 MB) of FP32 weights

ONNX_CONFIG = f"""name: "{{name}}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [{{{{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1, {SIDE} ] }}}}]
output [{{{{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1, {SIDE} ] }}}}]
"""
TORCHSCRIPT_CONFIG = f"""name: "{{name}}"
platform: "pytorch_libtorch"
max_batch_size: 0
input [{{{{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1, {SIDE} ] }}}}]
output [{{{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1, {SIDE} ] }}}}]
"""


def _weights(layers: int) -> list[np.ndarray]:
    """Scaled so that a row of ones keeps values near 1 through every layer."""
    rng = np.random.default_rng(7)
    return [rng.standard_normal((SIDE, SIDE), dtype=np.float32) / np.float32(SIDE ** 0.5)
            for _ in range(layers)]


def write_onnx(repository: Path, name: str, layers: int = LAYERS) -> Path:
    """An ONNX model of ``layers`` layers (``WEIGHT_BYTES`` of weights for ``LAYERS``) as
    ``repository/name``."""
    names = ["INPUT", *(f"H{layer}" for layer in range(1, layers)), "OUTPUT"]
    graph = helper.make_graph(
        [helper.make_node("MatMul", [names[layer], f"W{layer}"], [names[layer + 1]])
         for layer in range(layers)], name,
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [1, SIDE])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [1, SIDE])],
        [numpy_helper.from_array(weight, f"W{layer}")
         for layer, weight in enumerate(_weights(layers))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text(ONNX_CONFIG.format(name=name))
    return folder


def write_torchscript(repository: Path, name: str, layers: int = LAYERS) -> Path:
    """A TorchScript module of ``layers`` layers (``WEIGHT_BYTES`` of weights for ``LAYERS``)
    as ``repository/name``."""
    import torch  # only the TorchScript models need it, and it takes seconds to import

    class Layers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.from_numpy(weight), requires_grad=False)
                for weight in _weights(layers))

        def forward(self, values: torch.Tensor) -> torch.Tensor:
            for weight in self.weights:
                values = values @ weight
            return values

    folder = repository / name
    (folder / "1").mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script's notice
        torch.jit.script(Layers()).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(TORCHSCRIPT_CONFIG.format(name=name))
    return folder


PYTHON_MODEL = f"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.weight = np.ones({WEIGHT_BYTES // 4}, np.float32)  # written: resident

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
                    * self.weight[0])]) for r in requests]
"""
PYTHON_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }}]
instance_group [{{ count: {count} kind: KIND_CPU }}]
"""


def write_python(repository: Path, name: str, count: int = 2) -> Path:
    """A python model whose every instance (a stub process of its own) holds
    ``WEIGHT_BYTES`` of weights, made in ``initialize``."""
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(PYTHON_MODEL)
    (folder / "config.pbtxt").write_text(PYTHON_CONFIG.format(name=name, count=count))
    return folder


WRITERS = {"onnx": write_onnx, "torchscript": write_torchscript}
INPUTS = {"onnx": "INPUT", "torchscript": "INPUT__0"}
OUTPUTS = {"onnx": "OUTPUT", "torchscript": "OUTPUT__0"}
