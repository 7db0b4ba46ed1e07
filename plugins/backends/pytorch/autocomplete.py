"""Completing and checking a model config against a PyTorch program.

Owns the load-time rules: for an exported program (``model.pt2``) the missing inputs and
outputs, and the datatypes and dims of declared ones, are filled from the program's
signature (``max_batch_size`` stays as configured: the file cannot say whether its first
dimension is a batch), and every declared tensor is checked against it; for TorchScript
(``model.pt``), whose file says neither datatypes nor dims, the config must list every input
and output. Pure: it works on ``TensorSignature`` values, imports no torch and never mutates
the config it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.modelconfig import check_shape, fill_tensor_entry
from inferd.plugins.backends.pytorch.naming import bind_program
from inferd.plugins.backends.pytorch.programs import TensorSignature
from inferd.plugins.backends.pytorch.tensors import type_name
from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput

BACKEND = "pytorch"


def copy_config(config: ModelConfig) -> ModelConfig:
    copied = model_config_pb2.ModelConfig()
    copied.CopyFrom(config)
    if not copied.backend:
        copied.backend = BACKEND
    return copied


def require_listed_tensors(config: ModelConfig, arguments: Sequence[str], filename: str) -> None:
    """TorchScript files carry no datatypes or dims, so a config must list the tensors."""
    for kind, declared in (("input", config.input), ("output", config.output)):
        if not declared:
            listed = f"; forward() takes ({', '.join(arguments)})" if kind == "input" else ""
            raise InvalidArgument(
                f"model '{config.name}': a TorchScript file ({filename}) does not say its "
                f"{kind}s' datatypes and dims, so the configuration must list every {kind} "
                f"(name, data_type, dims){listed}"
            )


def complete_exported(
    config: ModelConfig,
    inputs: Sequence[TensorSignature],
    outputs: Sequence[TensorSignature],
    auto_complete: bool,
) -> tuple[ModelConfig, dict[str, int], dict[str, int]]:
    """The config completed (when ``auto_complete``) and checked against an exported
    program's signature, with the position of every configured input and output."""
    completed = copy_config(config)
    batching = completed.max_batch_size > 0
    positions = {}
    for kind, declared, signatures in (
        ("input", completed.input, inputs),
        ("output", completed.output, outputs),
    ):
        if auto_complete and not declared:
            for signature in signatures:
                declared.add(name=signature.tensor.name)
        bound = bind_program(
            completed.name, kind, [entry.name for entry in declared],
            [signature.tensor for signature in signatures],
        )
        for entry in declared:
            signature = signatures[bound[entry.name]]
            if auto_complete:
                fill_tensor_entry(entry, signature.data_type, signature.shape, batching)
            _check(completed, kind, entry, signature)
        positions[kind] = bound
    bound_inputs = set(positions["input"].values())
    missing = [s.tensor.name for s in inputs if s.tensor.position not in bound_inputs]
    if missing:
        raise InvalidArgument(
            f"model '{completed.name}': the exported program's input(s) {missing} are missing "
            f"from the configuration (the program needs every input)"
        )
    return completed, positions["input"], positions["output"]


def _check(
    config: ModelConfig, kind: str, entry: ModelInput | ModelOutput, signature: TensorSignature
) -> None:
    where = f"model '{config.name}', {kind} '{entry.name}'"
    if signature.data_type == model_config_pb2.TYPE_INVALID:
        raise InvalidArgument(f"{where}: the program's datatype cannot be served")
    if entry.data_type != signature.data_type:
        raise InvalidArgument(
            f"{where}: the configuration says {type_name(entry.data_type)} but the exported "
            f"program has {type_name(signature.data_type)}"
        )
    check_shape(entry, signature.shape, max_batch_size=config.max_batch_size, where=where,
                source="the exported program",
                batch_hint=" (export it with a torch.export.Dim for that dimension)")

