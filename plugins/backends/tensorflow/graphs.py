"""The TensorFlow backend's boundary with TensorFlow: loading a model file into a program,
what the program says of its tensors, and running it on one device.

Owns every call into ``tensorflow`` (2.x): a SavedModel's signature (``tf.saved_model.load``
with the graph's tags, ``loaded.signatures[key]``; its tensors are the signature's keys), a
GraphDef imported into a function (``tf.compat.v1.wrap_function`` and ``prune``; its tensors
are the graph's, ``name`` meaning ``name:0``), the data types a config can name, BYTES as
``tf.string`` and BF16 as raw bits, and the process-wide setup (thread pools, GPU memory
growth). The rest of the backend, and its unit tests, see ``Program`` and ``GraphTensor``.
TensorFlow is imported here, lazily, inside the TensorFlow executor only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.modelconfig import DYNAMIC
from inferd.kernel.sdk.process_threads import Pools
from inferd.protocols.errors import InvalidArgument, Unavailable

MISSING_TENSORFLOW = (
    "tensorflow is not installed on this machine; install inferd[tensorflow] "
    "(tensorflow-cpu), or tensorflow itself on a machine with an NVIDIA GPU"
)

# TensorFlow's dtype names -> config types (the types both can say).
CONFIG_TYPES = {
    "bool": model_config_pb2.TYPE_BOOL, "uint8": model_config_pb2.TYPE_UINT8,
    "uint16": model_config_pb2.TYPE_UINT16, "uint32": model_config_pb2.TYPE_UINT32,
    "uint64": model_config_pb2.TYPE_UINT64, "int8": model_config_pb2.TYPE_INT8,
    "int16": model_config_pb2.TYPE_INT16, "int32": model_config_pb2.TYPE_INT32,
    "int64": model_config_pb2.TYPE_INT64, "float16": model_config_pb2.TYPE_FP16,
    "float32": model_config_pb2.TYPE_FP32, "float64": model_config_pb2.TYPE_FP64,
    "bfloat16": model_config_pb2.TYPE_BF16, "string": model_config_pb2.TYPE_STRING,
}


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """One input or output of a program: ``shape`` with ``DYNAMIC`` for open dimensions,
    ``None`` when even the rank is unknown; ``data_type`` is ``TYPE_INVALID`` for a dtype a
    config cannot name."""

    name: str
    data_type: int
    shape: tuple[int, ...] | None
    dtype_name: str


def import_tensorflow() -> ModuleType:
    """``tensorflow``, or ``Unavailable`` saying what to install. TensorFlow's own C++ logging
    is kept to warnings and errors unless ``TF_CPP_MIN_LOG_LEVEL`` says otherwise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        tf = importlib.import_module("tensorflow")
    except ImportError as error:
        raise Unavailable(f"{MISSING_TENSORFLOW} ({error})") from None
    _grow_gpu_memory(tf)
    return tf


def _grow_gpu_memory(tf: ModuleType) -> None:
    # TensorFlow takes all of a GPU's memory when it first uses it; growing as needed lets
    # TensorFlow share the device with the executors of other frameworks.
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass  # the device is already initialized: it keeps what it has


def thread_pools(tf: ModuleType) -> Pools:
    threading = tf.config.threading
    return Pools(set_intra=threading.set_intra_op_parallelism_threads,
                 set_inter=threading.set_inter_op_parallelism_threads,
                 intra=threading.get_intra_op_parallelism_threads,
                 inter=threading.get_inter_op_parallelism_threads)


def gpu_count(tf: ModuleType) -> int:
    return len(tf.config.list_physical_devices("GPU"))


def graph_tensor(name: str, dtype: Any, shape: Any) -> GraphTensor:
    """A ``GraphTensor`` from a TensorFlow dtype and ``TensorShape``."""
    dims = None if shape.rank is None else tuple(
        DYNAMIC if size is None else int(size) for size in shape.as_list())
    data_type = CONFIG_TYPES.get(dtype.name, model_config_pb2.TYPE_INVALID)
    return GraphTensor(name, data_type, dims, dtype.name)


class Program:
    """One loaded model, callable from any thread: ``inputs`` and ``outputs`` are what it
    says of its tensors, in its own order; ``required`` the inputs every call must feed."""

    def __init__(self, tf: ModuleType, inputs: tuple[GraphTensor, ...],
                 outputs: tuple[GraphTensor, ...], required: frozenset[str]) -> None:
        self._tf = tf
        self.inputs = inputs
        self.outputs = outputs
        self.required = required
        self._dtype_names = {tensor.name: tensor.dtype_name for tensor in inputs}

    def run(self, arrays: dict[str, np.ndarray], outputs: Sequence[str], device: str
            ) -> list[np.ndarray]:
        """Run on ``device`` (``/CPU:0``, ``/GPU:0``) with ``arrays`` by input name; the
        arrays of ``outputs``, in that order."""
        tf = self._tf
        with tf.device(device):
            feeds = {name: self._tensor(name, array) for name, array in arrays.items()}
            results = self._call(feeds)
        return [self._array(results[name]) for name in outputs]

    def _call(self, feeds: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _tensor(self, name: str, array: np.ndarray) -> Any:
        tf = self._tf
        dtype_name = self._dtype_names[name]
        if dtype_name == "string":
            return tf.constant(array, dtype=tf.string)
        if dtype_name == "bfloat16":  # inferd carries BF16 as its raw bits in uint16
            return tf.bitcast(tf.constant(array.view(np.uint16)), tf.bfloat16)
        return tf.convert_to_tensor(array)

    def _array(self, value: Any) -> np.ndarray:
        if value.dtype == self._tf.bfloat16:
            value = self._tf.bitcast(value, self._tf.uint16)
        array: np.ndarray = value.numpy()
        return array


class SavedModelProgram(Program):
    """A SavedModel's signature function, called with the signature's input keys."""

    def __init__(self, tf: ModuleType, loaded: Any, function: Any) -> None:
        _, specs = function.structured_input_signature
        inputs = tuple(graph_tensor(key, spec.dtype, spec.shape)
                       for key, spec in sorted(specs.items()))
        outputs = tuple(graph_tensor(key, spec.dtype, spec.shape)
                        for key, spec in sorted(function.structured_outputs.items()))
        super().__init__(tf, inputs, outputs, frozenset(specs))
        self._loaded = loaded  # owns the variables the function reads
        self._function = function

    def _call(self, feeds: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._function(**feeds)
        return result


class GraphDefProgram(Program):
    """A GraphDef imported into a function fed and fetched by the config's tensor names."""

    def __init__(self, tf: ModuleType, wrapped: Any, inputs: Sequence[str],
                 outputs: Sequence[str]) -> None:
        graph = wrapped.graph
        feeds = [_graph_tensor(graph, name, "input") for name in inputs]
        fetches = [_graph_tensor(graph, name, "output") for name in outputs]
        super().__init__(
            tf,
            tuple(graph_tensor(name, t.dtype, t.shape)
                  for name, t in zip(inputs, feeds, strict=True)),
            tuple(graph_tensor(name, t.dtype, t.shape)
                  for name, t in zip(outputs, fetches, strict=True)),
            frozenset(op.name for op in graph.get_operations() if op.type == "Placeholder"),
        )
        self._input_names = tuple(inputs)
        self._output_names = tuple(outputs)
        self._function = wrapped.prune(feeds=feeds, fetches=fetches)

    def _call(self, feeds: dict[str, Any]) -> dict[str, Any]:
        values = self._function(*(feeds[name] for name in self._input_names))
        return dict(zip(self._output_names, values, strict=True))


def load_savedmodel(tf: ModuleType, path: Path, tag: str, signature: str, device: str
                    ) -> SavedModelProgram:
    """The ``signature`` function of the ``tag`` graph of the SavedModel folder ``path``,
    its variables placed on ``device``."""
    if not path.is_dir():
        raise InvalidArgument(f"model folder {path.name} does not exist or is not a "
                              "SavedModel folder")
    try:
        with tf.device(device):
            loaded = tf.saved_model.load(str(path), tags=[tag])
    except (ValueError, RuntimeError, OSError) as error:
        raise InvalidArgument(f"unable to load SavedModel {path.name} with tag '{tag}': "
                              f"{_first_line(error)}") from None
    signatures = dict(loaded.signatures)
    if signature not in signatures:
        raise InvalidArgument(
            f"SavedModel {path.name} has no signature '{signature}'; its signatures are: "
            f"{', '.join(sorted(signatures)) or 'none'}")
    return SavedModelProgram(tf, loaded, signatures[signature])


def load_graphdef(tf: ModuleType, path: Path, inputs: Sequence[str], outputs: Sequence[str],
                  device: str) -> GraphDefProgram:
    """The GraphDef file ``path`` as a function of the ``inputs`` tensors giving the
    ``outputs`` tensors, placed on ``device``."""
    if not path.is_file():
        raise InvalidArgument(f"model file {path.name} does not exist")
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except Exception as error:  # noqa: BLE001 - protobuf's DecodeError, or a bad file
        raise InvalidArgument(f"{path.name} is not a GraphDef: {_first_line(error)}") from None

    def import_graph() -> None:
        with tf.device(device):
            tf.compat.v1.import_graph_def(graph_def, name="")

    try:
        wrapped = tf.compat.v1.wrap_function(import_graph, [])
    except (ValueError, tf.errors.OpError) as error:
        raise InvalidArgument(f"unable to import GraphDef {path.name}: "
                              f"{_first_line(error)}") from None
    return GraphDefProgram(tf, wrapped, inputs, outputs)


def _graph_tensor(graph: Any, name: str, kind: str) -> Any:
    tensor_name = name if ":" in name else f"{name}:0"
    try:
        return graph.get_tensor_by_name(tensor_name)
    except (KeyError, ValueError):
        placeholders = [op.name for op in graph.get_operations() if op.type == "Placeholder"]
        known = f"; its placeholders are: {', '.join(placeholders)}" if kind == "input" else ""
        raise InvalidArgument(
            f"{kind} '{name}' is not a tensor of the GraphDef{known}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
