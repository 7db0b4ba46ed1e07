"""Completing and checking a model config against the signature of its ONNX model.

Owns the rules Triton's onnxruntime backend applies at load: filling missing inputs, outputs
and ``max_batch_size`` from the model (auto-complete), and refusing a config whose tensors,
data types, shapes or batching the model cannot honour. Pure: it works on ``ModelTensor``
values built from a session's metadata, imports no onnxruntime and never mutates the config
it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.modelconfig import (
    DEFAULT_MAX_BATCH_SIZE,
    DYNAMIC,
    batchable,
    check_shape,
    complete_declared,
)
from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

PLATFORM = "onnxruntime_onnx"
BACKEND = "onnxruntime"

_ORT_TYPE_TO_CONFIG_TYPE: dict[str, int] = {
    "tensor(bool)": model_config_pb2.TYPE_BOOL,
    "tensor(uint8)": model_config_pb2.TYPE_UINT8,
    "tensor(uint16)": model_config_pb2.TYPE_UINT16,
    "tensor(uint32)": model_config_pb2.TYPE_UINT32,
    "tensor(uint64)": model_config_pb2.TYPE_UINT64,
    "tensor(int8)": model_config_pb2.TYPE_INT8,
    "tensor(int16)": model_config_pb2.TYPE_INT16,
    "tensor(int32)": model_config_pb2.TYPE_INT32,
    "tensor(int64)": model_config_pb2.TYPE_INT64,
    "tensor(float16)": model_config_pb2.TYPE_FP16,
    "tensor(float)": model_config_pb2.TYPE_FP32,
    "tensor(double)": model_config_pb2.TYPE_FP64,
    "tensor(string)": model_config_pb2.TYPE_STRING,
    "tensor(bfloat16)": model_config_pb2.TYPE_BF16,
}


@dataclass(frozen=True, slots=True)
class ModelTensor:
    """One input or output of the ONNX model: ``shape`` has ``-1`` for every dynamic dimension
    (the batch dimension included); ``data_type`` is ``TYPE_INVALID`` for types a config cannot
    express (sequences, maps)."""

    name: str
    data_type: int
    shape: tuple[int, ...]
    onnx_type: str


def model_tensor(name: str, onnx_type: str, onnx_shape: Sequence[Any] | None) -> ModelTensor:
    """Build a ``ModelTensor`` from what an onnxruntime ``NodeArg`` reports: symbolic names,
    ``None`` and non-positive sizes are all dynamic."""
    shape = tuple(
        dim if isinstance(dim, int) and dim > 0 else DYNAMIC for dim in (onnx_shape or ())
    )
    data_type = _ORT_TYPE_TO_CONFIG_TYPE.get(onnx_type, model_config_pb2.TYPE_INVALID)
    return ModelTensor(name=name, data_type=data_type, shape=shape, onnx_type=onnx_type)


def complete_config(
    config: ModelConfig, inputs: Sequence[ModelTensor], outputs: Sequence[ModelTensor],
    default_batch: int = DEFAULT_MAX_BATCH_SIZE,
) -> ModelConfig:
    """A copy of ``config`` with what it leaves out filled from the model, as Triton does
    (``default_batch``: what a batchable model gets, ``--backend-config``'s
    ``default-max-batch-size``)."""
    completed = model_config_pb2.ModelConfig()
    completed.CopyFrom(config)
    if not completed.platform and completed.backend in ("", BACKEND):
        completed.platform = PLATFORM
    if not completed.backend and completed.platform == PLATFORM:
        completed.backend = BACKEND

    # Like Triton, batching is inferred only when the config says nothing about the tensors:
    # declared dims would otherwise be ambiguous about whether they include the batch dim.
    declares_tensors = bool(completed.input) or bool(completed.output)
    if (completed.max_batch_size == 0 and not declares_tensors and default_batch > 0
            and batchable([*inputs, *outputs])):
        completed.max_batch_size = default_batch
        if completed.WhichOneof("scheduling_choice") is None:
            completed.dynamic_batching.SetInParent()

    batching = completed.max_batch_size > 0
    complete_declared(completed.input, inputs, batching)
    complete_declared(completed.output, outputs, batching)
    return completed


def validate_config(
    config: ModelConfig, inputs: Sequence[ModelTensor], outputs: Sequence[ModelTensor]
) -> None:
    """Raise ``InvalidArgument`` naming the tensor when the model cannot run ``config``."""
    _validate_tensors(config, "input", config.input, inputs)
    _validate_tensors(config, "output", config.output, outputs)
    declared = {entry.name for entry in config.input}
    for tensor in inputs:
        if tensor.name not in declared:
            raise InvalidArgument(
                f"model '{config.name}': the ONNX model's input '{tensor.name}' is missing from "
                f"the configuration (onnxruntime needs every input; configured: "
                f"{_names(config.input)})"
            )


def _validate_tensors(
    config: ModelConfig, kind: str, declared: Any, model_tensors: Sequence[ModelTensor]
) -> None:
    by_name = {t.name: t for t in model_tensors}
    for entry in declared:
        tensor = by_name.get(entry.name)
        if tensor is None:
            raise InvalidArgument(
                f"model '{config.name}': configuration {kind} '{entry.name}' is not an {kind} "
                f"of the ONNX model; its {kind}s are {_names(model_tensors)}"
            )
        where = f"model '{config.name}', {kind} '{entry.name}'"
        if tensor.data_type == model_config_pb2.TYPE_INVALID:
            raise InvalidArgument(f"{where}: ONNX type {tensor.onnx_type} is not supported")
        if entry.data_type != tensor.data_type:
            raise InvalidArgument(
                f"{where}: the configuration says {_type_name(entry.data_type)} but the ONNX "
                f"model has {_type_name(tensor.data_type)} ({tensor.onnx_type})"
            )
        check_shape(entry, tensor.shape, max_batch_size=config.max_batch_size, where=where,
                    source="the ONNX model")


def _names(tensors: Any) -> str:
    return "[" + ", ".join(t.name for t in tensors) + "]"


def _type_name(data_type: int) -> str:
    return str(model_config_pb2.DataType.Name(data_type))
