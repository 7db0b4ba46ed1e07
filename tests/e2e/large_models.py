"""Models of a hundred mebibytes of weights, written into a repository for the tests and the
bench that load and unload them many times (``test_unload_memory``, ``bench/unload_memory.py``).
Generated on demand, never committed: an ONNX MatMul whose weight is an initializer of the
model file, and a TorchScript module holding the same weight as a parameter. Both take one
``INPUT`` row of ``SIDE`` floats and answer its product with the weight.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIDE = 5120
WEIGHT_BYTES = SIDE * SIDE * 4  # 100 MiB (104.9 MB) of FP32 weights

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


def _weight() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((SIDE, SIDE), dtype=np.float32)


def write_onnx(repository: Path, name: str) -> Path:
    """An ONNX model of ``WEIGHT_BYTES`` of weights as ``repository/name``."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["INPUT", "W"], ["OUTPUT"])], name,
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [1, SIDE])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [1, SIDE])],
        [numpy_helper.from_array(_weight(), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text(ONNX_CONFIG.format(name=name))
    return folder


def write_torchscript(repository: Path, name: str) -> Path:
    """A TorchScript module of ``WEIGHT_BYTES`` of weights as ``repository/name``."""
    import torch  # only the TorchScript models need it, and it takes seconds to import

    class Product(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.from_numpy(_weight()), requires_grad=False)

        def forward(self, values: torch.Tensor) -> torch.Tensor:
            return values @ self.weight

    folder = repository / name
    (folder / "1").mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script's notice
        torch.jit.script(Product()).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(TORCHSCRIPT_CONFIG.format(name=name))
    return folder


WRITERS = {"onnx": write_onnx, "torchscript": write_torchscript}
INPUTS = {"onnx": "INPUT", "torchscript": "INPUT__0"}
OUTPUTS = {"onnx": "OUTPUT", "torchscript": "OUTPUT__0"}
