"""Writes the TensorFlow models the end-to-end tests serve, into a model repository.

Run as a script (``python write_tensorflow_models.py ROOT``) so that TensorFlow is imported
in a process of its own, never beside torch in the test process:

- ``tf_savedmodel``: a SavedModel without a config (auto-completed): ``x``, ``y`` FP32
  ``[-1, 16]`` to ``sum`` and ``product``, plus a second signature ``scaled`` (``x`` to
  ``scaled``, ``x * 3``);
- ``tf_strings``: a SavedModel of strings: ``text`` BYTES ``[-1, 1]`` to ``upper`` (BYTES)
  and ``length`` (INT32, the byte length);
- ``tf_graphdef``: a GraphDef (``model.graphdef``) of Triton's usual shape: INT32 ``INPUT0``,
  ``INPUT1`` ``[-1, 16]`` to ``OUTPUT0`` (the sum) and ``OUTPUT1`` (the difference), with
  the config it needs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402 - after the log level

GRAPHDEF_CONFIG = """
platform: "tensorflow_graphdef"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
       { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]
"""


class Arithmetic(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.factor = tf.Variable(3.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x"),
                                  tf.TensorSpec([None, 16], tf.float32, name="y")])
    def sum_product(self, x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"sum": x + y, "product": x * y}

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def scaled(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scaled": x * self.factor}


class Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string, name="text")])
    def serve(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"upper": tf.strings.upper(text), "length": tf.strings.length(text)}


def version_folder(root: Path, model: str) -> Path:
    folder = root / model / "1"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write(root: Path) -> None:
    arithmetic = Arithmetic()
    tf.saved_model.save(arithmetic, str(version_folder(root, "tf_savedmodel") / "model.savedmodel"),
                        signatures={
                            "serving_default": arithmetic.sum_product.get_concrete_function(),
                            "scaled": arithmetic.scaled.get_concrete_function(),
                        })
    strings = Strings()
    tf.saved_model.save(strings, str(version_folder(root, "tf_strings") / "model.savedmodel"),
                        signatures={"serving_default": strings.serve.get_concrete_function()})
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.int32, [None, 16], name="INPUT0")
        b = tf.compat.v1.placeholder(tf.int32, [None, 16], name="INPUT1")
        tf.identity(a + b, name="OUTPUT0")
        tf.identity(a - b, name="OUTPUT1")
    graphdef = version_folder(root, "tf_graphdef") / "model.graphdef"
    graphdef.write_bytes(graph.as_graph_def().SerializeToString())
    (root / "tf_graphdef" / "config.pbtxt").write_text(GRAPHDEF_CONFIG, encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
