"""Writes the example models of inferd's default model repository into this folder.

Owns the example ONNX models (``simple``, ``mlp``, ``identity_fp32``, the stateful
``accumulate``, and the OCR pipeline's detector ``craft`` and refiner ``refinenet``): their graphs, built with the ``onnx`` helper
API, and their ``config.pbtxt``. The OCR pipeline's python steps and its ensemble are plain
files in their folders. Deterministic and idempotent:
a file whose content is already right is not rewritten, so its modification time, which the
POLL control mode watches, does not change. Run it with ``python model_repository/generate.py``.
It needs ``numpy`` and ``onnx``, never onnxruntime or inferd.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPOSITORY = Path(__file__).resolve().parent

# opset 13 and IR version 8 load in every onnxruntime inferd supports (1.17 and later).
OPSET = 13
IR_VERSION = 8
PRODUCER = "inferd model_repository/generate.py"

SIMPLE_CONFIG = """\
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
"""

# Inputs and outputs are left to auto-complete, which reads them from model.onnx.
MLP_CONFIG = """\
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 64
dynamic_batching {}
"""

IDENTITY_FP32_CONFIG = """\
name: "identity_fp32"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
"""


ACCUMULATE_CONFIG = """\
name: "accumulate"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
# A stateful model: the running sum of a sequence's INPUTs. The server keeps the sum between
# the requests of a sequence (implicit state ACC_IN -> ACC_OUT, zero at START) and tells the
# model where a sequence starts (START, 1 on its first request).
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_FP32
      dims: [ 1 ]
      initial_state { name: "zero" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }
    }
  ]
}
"""


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name=PRODUCER,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def simple_model() -> onnx.ModelProto:
    """Triton's classic ``simple``: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""

    def tensor(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "simple",
        [tensor("INPUT0"), tensor("INPUT1")],
        [tensor("OUTPUT0"), tensor("OUTPUT1")],
    )
    return _model(graph)


def accumulate_model() -> onnx.ModelProto:
    """A running sum kept as implicit state: OUTPUT = ACC_OUT = INPUT at START, else
    ACC_IN + INPUT."""

    def tensor(name: str, element: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, element, ["batch", 1])

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["START"], ["starting"], to=TensorProto.BOOL),
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["continued"]),
            helper.make_node("Where", ["starting", "INPUT", "continued"], ["ACC_OUT"]),
            helper.make_node("Identity", ["ACC_OUT"], ["OUTPUT"]),
        ],
        "accumulate",
        [tensor("INPUT"), tensor("START", TensorProto.INT32), tensor("ACC_IN")],
        [tensor("OUTPUT"), tensor("ACC_OUT")],
    )
    return _model(graph)


def mlp_model() -> onnx.ModelProto:
    """x [batch, 64] -> Gemm 64x128 -> Relu -> Gemm 128x10 -> y [batch, 10]."""
    rng = np.random.default_rng(0)
    # Scaled like a fan-in initialisation so the outputs stay in a readable range.
    w1 = (rng.standard_normal((64, 128)) / 8.0).astype(np.float32)
    b1 = (rng.standard_normal(128) / 8.0).astype(np.float32)
    w2 = (rng.standard_normal((128, 10)) / np.sqrt(128.0)).astype(np.float32)
    b2 = (rng.standard_normal(10) / np.sqrt(128.0)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w1", "b1"], ["hidden"]),
            helper.make_node("Relu", ["hidden"], ["activated"]),
            helper.make_node("Gemm", ["activated", "w2", "b2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    return _model(graph)


def identity_fp32_model() -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 for a 1-D FP32 tensor of any length (for wire benchmarks)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_fp32",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["n"])],
    )
    return _model(graph)


CRAFT_CONFIG = """\
name: "craft"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "images" data_type: TYPE_FP32 dims: [ -1, 1, 32, 32 ] } ]
output [
  { name: "score" data_type: TYPE_FP32 dims: [ -1, 1, 16, 16 ] },
  { name: "features" data_type: TYPE_FP32 dims: [ -1, 4, 16, 16 ] }
]
"""

REFINENET_CONFIG = """\
name: "refinenet"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  { name: "score" data_type: TYPE_FP32 dims: [ -1, 1, 16, 16 ] },
  { name: "features" data_type: TYPE_FP32 dims: [ -1, 4, 16, 16 ] }
]
output [ { name: "refined" data_type: TYPE_FP32 dims: [ -1, 1, 16, 16 ] } ]
"""


def _weights(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    fan_in = int(np.prod(shape[1:]))
    values = np.random.default_rng(seed).standard_normal(shape) / np.sqrt(fan_in)
    return numpy_helper.from_array(values.astype(np.float32), name)


def craft_model() -> onnx.ModelProto:
    """A tiny text detector in CRAFT's shape: images [n,1,32,32] -> a stride-2 convolution ->
    features [n,4,16,16] and a per-cell text score [n,1,16,16] in (0, 1)."""

    def image(name: str, channels: int, side: int) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", channels, side, side])

    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["images", "w_features"], ["convolved"], strides=[2, 2],
                             pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
            helper.make_node("Relu", ["convolved"], ["features"]),
            helper.make_node("Conv", ["features", "w_score"], ["logits"], kernel_shape=[1, 1]),
            helper.make_node("Sigmoid", ["logits"], ["score"]),
        ],
        "craft",
        [image("images", 1, 32)],
        [image("score", 1, 16), image("features", 4, 16)],
        initializer=[_weights("w_features", (4, 1, 3, 3), 1), _weights("w_score", (1, 4, 1, 1), 2)],
    )
    return _model(graph)


def refinenet_model() -> onnx.ModelProto:
    """A tiny refiner: the detector's score and features, concatenated, through a 3x3
    convolution -> refined score [n,1,16,16] in (0, 1)."""

    def image(name: str, channels: int) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", channels, 16, 16])

    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["score", "features"], ["stacked"], axis=1),
            helper.make_node("Conv", ["stacked", "w_refine"], ["logits"], pads=[1, 1, 1, 1],
                             kernel_shape=[3, 3]),
            helper.make_node("Sigmoid", ["logits"], ["refined"]),
        ],
        "refinenet",
        [image("score", 1), image("features", 4)],
        [image("refined", 1)],
        initializer=[_weights("w_refine", (1, 5, 3, 3), 3)],
    )
    return _model(graph)


def wide_mlp_model(features: int = 1024, layers: int = 4) -> onnx.ModelProto:
    """The benchmarks' ``mlp``: x [batch, 1024] -> 4 Gemm 1024x1024, a Relu between each ->
    y [batch, 1024]. Its 16 MiB of weights are too big to keep here:
    ``bench/performance/peers.py`` writes it into its own repository (``BENCH_MODELS``), under the name and config of ``mlp``."""
    rng = np.random.default_rng(1)
    nodes, initializers = [], []
    current = "x"
    for layer in range(layers):
        weights = (rng.standard_normal((features, features)) / np.sqrt(features)).astype(
            np.float32)
        bias = np.zeros(features, np.float32)
        initializers += [numpy_helper.from_array(weights, f"w{layer}"),
                         numpy_helper.from_array(bias, f"b{layer}")]
        output = "y" if layer == layers - 1 else f"h{layer}"
        nodes.append(helper.make_node("Gemm", [current, f"w{layer}", f"b{layer}"], [output]))
        if layer < layers - 1:
            nodes.append(helper.make_node("Relu", [output], [f"a{layer}"]))
            current = f"a{layer}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])],
        initializer=initializers,
    )
    return _model(graph)


MODELS: dict[str, tuple[str, Callable[[], onnx.ModelProto]]] = {
    "simple": (SIMPLE_CONFIG, simple_model),
    "mlp": (MLP_CONFIG, mlp_model),
    "identity_fp32": (IDENTITY_FP32_CONFIG, identity_fp32_model),
    "accumulate": (ACCUMULATE_CONFIG, accumulate_model),
    "craft": (CRAFT_CONFIG, craft_model),
    "refinenet": (REFINENET_CONFIG, refinenet_model),
}


def write_if_changed(path: Path, content: bytes) -> str:
    """Write ``content`` unless ``path`` already holds it; say which happened."""
    if path.is_file() and path.read_bytes() == content:
        return "unchanged"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(content)
    # A rename is atomic, so a server polling the repository never sees half a file.
    temporary.replace(path)
    return "written"


# The benchmarks' repository: the examples they measure, with the wide ``mlp``.
BENCH_MODELS: dict[str, tuple[str, Callable[[], onnx.ModelProto]]] = {
    "simple": MODELS["simple"],
    "mlp": (MLP_CONFIG, wide_mlp_model),
    "identity_fp32": MODELS["identity_fp32"],
}


def generate(
    repository: Path = REPOSITORY,
    models: dict[str, tuple[str, Callable[[], onnx.ModelProto]]] = MODELS,
) -> list[tuple[str, int, str]]:
    """Write ``models`` (every example model unless told); return (relative path, size in
    bytes, what happened) rows."""
    rows = []
    for name, (config_text, build) in models.items():
        files = {
            repository / name / "config.pbtxt": config_text.encode("utf-8"),
            repository / name / "1" / "model.onnx": build().SerializeToString(),
        }
        for path, content in files.items():
            status = write_if_changed(path, content)
            rows.append((str(path.relative_to(repository)), len(content), status))
    return rows


def main() -> None:
    rows = generate()
    width = max(len(path) for path, _, _ in rows)
    print(f"{'file':<{width}}  {'bytes':>7}  status")
    for path, size, status in rows:
        print(f"{path:<{width}}  {size:>7}  {status}")


if __name__ == "__main__":
    main()
