"""Checks of an inference request against the model it addresses, with Triton's messages.

``ModelSignature`` is what the scheduler keeps of a served version's config: its inputs,
outputs and batching. ``check_request`` raises ``InvalidArgument`` with the exact texts
clients and scripts match on (SPEC appendix) and returns the request's batch size. Pure: no
I/O, no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelInput, ModelOutput

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferRequest, TensorSpec
from inferd.protocols.tensors import config_type_to_datatype

BATCH_DIM_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension"
    " to be prepended to each input shape. If you want to specify the full shape including the"
    " batch dim in your input dims config, try setting max_batch_size to zero. See the model"
    " configuration docs for more info on max_batch_size."
)


@dataclass(frozen=True, slots=True)
class TensorSignature:
    name: str
    datatype: str
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False


@dataclass(frozen=True, slots=True)
class ModelSignature:
    name: str
    max_batch_size: int
    inputs: dict[str, TensorSignature]
    outputs: dict[str, TensorSignature]

    @classmethod
    def from_config(cls, config: ModelConfig) -> ModelSignature:
        def signature(tensor: ModelInput | ModelOutput, optional: bool) -> TensorSignature:
            datatype = config_type_to_datatype(DataType.Name(tensor.data_type))
            return TensorSignature(tensor.name, datatype, tuple(int(d) for d in tensor.dims),
                                   optional)

        return cls(
            name=config.name,
            max_batch_size=int(config.max_batch_size),
            inputs={t.name: signature(t, t.optional) for t in config.input},
            outputs={t.name: signature(t, False) for t in config.output},
        )

    def metadata(self, tensors: dict[str, TensorSignature]) -> tuple[TensorSpec, ...]:
        batch = (-1,) if self.max_batch_size > 0 else ()
        return tuple(TensorSpec(t.name, t.datatype, batch + t.dims) for t in tensors.values())


def _shape_matches(expected: tuple[int, ...], got: tuple[int, ...]) -> bool:
    if len(expected) != len(got):
        return False
    return all(e == -1 or e == g for e, g in zip(expected, got, strict=True))


def _listing(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"  # Triton's: no space


def check_required_inputs(request_id: str, model: ModelSignature, given: list[str]) -> None:
    """Raise Triton's ``InvalidArgument`` if ``given`` (input names, each one of ``model``'s)
    lacks a required input: its core's words, with its request-id prefix; the range form
    when some inputs are optional."""
    missing = [n for n, t in model.inputs.items() if not t.optional and n not in given]
    if not missing:
        return
    required = sum(1 for t in model.inputs.values() if not t.optional)
    count = (f"{required} inputs" if required == len(model.inputs) else
             f"number of inputs between {required} and {len(model.inputs)}")
    raise InvalidArgument(
        f"[request id: {request_id or '<id_unknown>'}] expected {count} but got "
        f"{len(given)} inputs for model '{model.name}'. Got input(s) {_listing(given)}, "
        f"but missing required input(s) {_listing(missing)}. Please provide all required "
        "input(s)."
    )


def check_request(request: InferRequest, model: ModelSignature) -> int:
    """Raise ``InvalidArgument`` if ``request`` does not fit ``model``; return its batch size
    (1 for models that do not batch)."""
    given = [t.name for t in request.inputs]
    for name in given:
        if name not in model.inputs:
            raise InvalidArgument(f"unexpected inference input '{name}' for model '{model.name}'")
    if len(set(given)) != len(given):
        twice = next(name for name in given if given.count(name) > 1)
        raise InvalidArgument(f"input '{twice}' already exists in request")
    if len(set(request.outputs)) != len(request.outputs):
        twice = next(name for name in request.outputs if request.outputs.count(name) > 1)
        raise InvalidArgument(f"output '{twice}' already exists in request")
    check_required_inputs(request.id, model, given)
    batch_size = 0
    for tensor in request.inputs:
        signature = model.inputs[tensor.name]
        if tensor.datatype != signature.datatype:
            raise InvalidArgument(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model"
                f" '{model.name}' expects '{signature.datatype}'"
            )
        shape = tuple(tensor.shape)
        expected: tuple[int, ...] = signature.dims
        if model.max_batch_size > 0:
            expected = (-1, *expected)
        if not _shape_matches(expected, shape):
            note = BATCH_DIM_NOTE if model.max_batch_size > 0 else ""
            raise InvalidArgument(
                f"unexpected shape for input '{tensor.name}' for model '{model.name}'."
                f" Expected {_dims(expected)}, got {_dims(shape)}.{note}"
            )
        if model.max_batch_size > 0:
            if batch_size and shape[0] != batch_size:
                raise InvalidArgument(
                    f"input '{tensor.name}' has batch size {shape[0]} but an earlier input of the"
                    f" same request has {batch_size}, for model '{model.name}'"
                )
            batch_size = shape[0]
    if model.max_batch_size > 0 and batch_size > model.max_batch_size:
        raise InvalidArgument(
            f"inference request batch-size must be <= {model.max_batch_size} for '{model.name}'"
        )
    for name in request.outputs:
        if name not in model.outputs:
            raise InvalidArgument(f"unexpected inference output '{name}' for model '{model.name}'")
    return batch_size if model.max_batch_size > 0 else 1


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
