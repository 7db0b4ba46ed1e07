"""What a backend does with its model's config: completion, JSON, text, the fork parameter.

Complete a config from the model file's signature and check it against it (Triton's rules
shared by every framework), print it as Triton's JSON, read ``config.pbtxt`` text, and the
python backend's fork parameter.

Owns Triton's rules that do not depend on the framework: filling a tensor entry's datatype
and dims from the model (dropping the batch dimension, and the dims ``[1]`` reshaped to
``[]`` convention for a scalar), the shape a config entry gives the model, and when that
shape agrees with the model's (``-1`` matches anything). Pure functions on protobuf entries;
the error texts name the framework by what each backend passes.

``config_to_json`` and ``parse_config_text`` are ``inferd.kernel.sdk.config_text``'s; the
repository reads and validates every config with these and the fork parameter too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.config_text import config_to_json, parse_config_text
from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE", "DYNAMIC", "SignatureTensor", "batchable", "check_shape",
    "complete_declared", "configured_shape", "default_max_batch_size", "fill_tensor_entry",
    "shapes_agree",
    "config_to_json", "parse_config_text", "FORK_PARAMETER", "forks_after_initialize",
]

# A dimension the model leaves open.
DYNAMIC = -1

# Triton's --backend-config=default-max-batch-size: what a batchable model gets when its config
# says nothing about batching.
DEFAULT_MAX_BATCH_SIZE = 4


class SignatureTensor(Protocol):
    """One input or output as a model file describes it: ``shape`` has ``DYNAMIC`` for every
    open dimension, the batch dimension included."""

    @property
    def name(self) -> str: ...

    @property
    def data_type(self) -> int: ...

    @property
    def shape(self) -> tuple[int, ...]: ...


def default_max_batch_size(options: dict[str, Any], backend: str) -> int:
    """The ``max_batch_size`` a batchable model's auto-complete gives: ``--backend-config``'s
    ``default-max-batch-size`` for ``backend`` (or for every backend), else Triton's 4."""
    chosen = DEFAULT_MAX_BATCH_SIZE
    for scope, setting, value in options.get("backend_config", ()):
        if setting == "default-max-batch-size" and scope in ("", backend):
            if not (value.isascii() and value.isdigit()):
                raise InvalidArgument(f"--backend-config default-max-batch-size must be a "
                                      f"non-negative integer, got {value!r}")
            chosen = int(value)
            if scope:  # a backend's own setting wins over the global one
                break
    return chosen


def batchable(tensors: Sequence[SignatureTensor]) -> bool:
    """Whether a model batches: every tensor's first dimension is open."""
    return bool(tensors) and all(t.shape and t.shape[0] == DYNAMIC for t in tensors)


def complete_declared(entries: Any, model_tensors: Sequence[SignatureTensor], batching: bool
                      ) -> None:
    """Triton's rule for a config's input (or output) list: empty, it gets every tensor of
    the model; otherwise only the entries it declares are filled in."""
    if not entries:
        for tensor in model_tensors:
            fill_tensor_entry(entries.add(name=tensor.name), tensor.data_type, tensor.shape,
                              batching)
        return
    by_name = {t.name: t for t in model_tensors}
    for entry in entries:
        if entry.name in by_name:
            tensor = by_name[entry.name]
            fill_tensor_entry(entry, tensor.data_type, tensor.shape, batching)


def fill_tensor_entry(
    entry: ModelInput | ModelOutput, data_type: int, shape: Sequence[int], batching: bool
) -> None:
    """Fill what ``entry`` leaves out from a model tensor of ``data_type`` and ``shape``
    (``shape`` includes the batch dimension when ``batching``)."""
    if entry.data_type == model_config_pb2.TYPE_INVALID:
        entry.data_type = data_type
    if entry.dims:
        return
    dims = shape[1:] if batching and shape else shape
    if dims:
        entry.dims.extend(dims)
    else:
        # A config cannot say "scalar"; Triton's convention is dims [1] reshaped to [].
        entry.dims.append(1)
        entry.reshape.SetInParent()


def configured_shape(entry: ModelInput | ModelOutput) -> tuple[int, ...]:
    """The shape ``entry`` gives the model, without the batch dimension."""
    return tuple(entry.reshape.shape) if entry.HasField("reshape") else tuple(entry.dims)


def shapes_agree(expected: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether a configured shape and a model's shape (both without the batch dimension)
    agree, ``DYNAMIC`` on either side matching any size."""
    return len(expected) == len(shape) and all(
        want == DYNAMIC or have == DYNAMIC or want == have
        for want, have in zip(expected, shape, strict=True)
    )


def check_shape(
    entry: ModelInput | ModelOutput, model_shape: Sequence[int], *, max_batch_size: int,
    where: str, source: str, batch_hint: str = "",
) -> None:
    """Raise ``InvalidArgument`` unless ``entry``'s shape agrees with ``model_shape`` (the
    model's, batch dimension included when ``max_batch_size`` batches, which it must then
    leave dynamic). ``where`` names the tensor, ``source`` the model ("the ONNX model"),
    ``batch_hint`` how to give it a dynamic batch dimension."""
    shape = tuple(model_shape)
    if max_batch_size > 0:
        if not shape or shape[0] != DYNAMIC:
            raise InvalidArgument(
                f"{where}: max_batch_size is {max_batch_size} but {source}'s shape "
                f"{list(shape)} has no dynamic first dimension to batch along{batch_hint}"
            )
        shape = shape[1:]
    expected = configured_shape(entry)
    if not shapes_agree(expected, shape):
        note = " (without the batch dimension)" if max_batch_size > 0 else ""
        raise InvalidArgument(
            f"{where}: the configuration's shape {list(expected)} does not match {source}'s "
            f"shape {list(shape)}{note}"
        )


FORK_PARAMETER = "INFERD_FORK_AFTER_INITIALIZE"
"""The config parameter of a python model (``"true"``/``"false"``) whose instances share the
first one's memory: it runs ``initialize``, the others are forked from it
(``inferd.plugins.backends.python.forked``), all in one executor process tree of the model's
own."""


def forks_after_initialize(config: ModelConfig) -> bool:
    """Whether ``config`` (validated) asks for forked instances."""
    parameter = config.parameters.get(FORK_PARAMETER)
    return parameter is not None and parameter.string_value.lower() == "true"
