"""Loading a PyTorch model file and describing what it takes and returns.

Owns the two file kinds: TorchScript (``model.pt``, ``torch.jit.load``), whose forward()
schema gives argument names and the shape of the result but no datatypes or dims, and
``torch.export`` programs (``model.pt2``, ``torch.export.load``), whose signature and
example metadata give names, datatypes and shapes of every input and output. Each becomes a
``Program``: a call from tensors by position to the flattened result, plus what the config
is checked and completed against. Torch is handed in; this module never imports it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.plugins.backends.pytorch.naming import (
    KeyPath,
    ProgramTensor,
    program_inputs,
    program_outputs,
)
from inferd.plugins.backends.pytorch.tensors import config_type_of
from inferd.protocols.errors import InvalidArgument

DYNAMIC = -1

# torch 2.13 deprecates TorchScript, which is what Triton users bring; loading it stays quiet.
warnings.filterwarnings(
    "ignore", message="`torch.jit.load` is deprecated", category=DeprecationWarning
)

# Triton's execute-time refusal of a TorchScript result it cannot read (Execute).
UNSUPPORTED_SCRIPT_RESULT = (
    "output must be of type Tensor, List[str] or Tuple containing one of these two types. "
    "It should not be a List / Dictionary of Tensors or a Scalar"
)


@dataclass(frozen=True, slots=True)
class TensorSignature:
    """A program input or output as the file describes it: ``shape`` has ``-1`` for each
    dynamic dimension."""

    tensor: ProgramTensor
    data_type: int
    shape: tuple[int, ...]


@dataclass(slots=True)
class Program:
    """A loaded model file. ``arguments`` are TorchScript forward()'s argument names (empty
    for an exported program, whose ``inputs``/``outputs`` say more); ``output_count`` is how
    many tensors the result holds when the file says (``None``: only a run tells).
    ``mutated_inputs`` are the input positions the program may write to (``None``: any)."""

    module: Any
    exported: bool
    arguments: tuple[str, ...] = ()
    dict_input: bool = False
    output_count: int | None = None
    inputs: tuple[TensorSignature, ...] = ()
    outputs: tuple[TensorSignature, ...] = ()
    mutated_inputs: frozenset[int] | None = frozenset()
    in_spec: Any = field(default=None, repr=False)
    pytree: Any = field(default=None, repr=False)

    def call(self, tensors: Sequence[Any], names: Sequence[str]) -> list[Any]:
        """Run with ``tensors`` in argument order (``names`` are the dict keys of a
        Dict(str, Tensor) input); the result's tensors, flattened in order."""
        if self.exported:
            args, kwargs = self.pytree.tree_unflatten(list(tensors), self.in_spec)
            result = self.module(*args, **kwargs)
            leaves: list[Any] = self.pytree.tree_leaves(result)
            return leaves
        if self.dict_input:
            result = self.module.forward(dict(zip(names, tensors, strict=True)))
        else:
            result = self.module.forward(*tensors)
        if isinstance(result, (tuple, list)):
            return list(result)
        if isinstance(result, dict):
            raise InvalidArgument(UNSUPPORTED_SCRIPT_RESULT)
        return [result]


def load_program(torch: ModuleType, path: Path, device: Any, model: str) -> Program:
    if path.suffix == ".pt2":
        return _load_exported(torch, path, device, model)
    return _load_script(torch, path, device, model)


def _load_script(torch: ModuleType, path: Path, device: Any, model: str) -> Program:
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as error:
        raise InvalidArgument(
            f"model '{model}': torch.jit.load could not load {path} as TorchScript: "
            f"{_first_line(error)}"
        ) from None
    module.eval()
    schema = module.forward.schema
    arguments = list(schema.arguments)
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]  # self
    dict_input = len(arguments) == 1 and arguments[0].type.kind() == "DictType"
    if not dict_input:
        for argument in arguments:
            kind = argument.type.kind()
            if kind == "DictType":
                # Triton's message, verbatim (ValidateInputs).
                raise InvalidArgument(
                    "Multiple inputs of kind DictType were detected. Only a single input of "
                    "type Dict(str, Tensor) is supported."
                )
            if kind != "TensorType":
                raise InvalidArgument(
                    f"An input of type '{argument.type}' was detected in the model. Only a "
                    f"single input of type Dict(str, Tensor) or input(s) of type Tensor are "
                    f"supported. (model '{model}', argument '{argument.name}')"
                )
    return Program(
        module=module,
        exported=False,
        arguments=tuple(a.name for a in arguments),
        dict_input=dict_input,
        output_count=_script_output_count(schema, model),
        mutated_inputs=None if _script_mutates(torch, module) else frozenset(),
    )


def _script_output_count(schema: Any, model: str) -> int | None:
    returned: Any = schema.returns[0].type if schema.returns else None
    kind = returned.kind() if returned is not None else "NoneType"
    if kind == "TensorType":
        return 1
    if kind == "TupleType":
        elements = list(returned.elements())
        for index, element in enumerate(elements):
            if element.kind() != "TensorType":
                raise InvalidArgument(
                    f"model '{model}': output at index {index} must be of type Tensor, "
                    f"received {element}"
                )
        return len(elements)
    if kind == "ListType" and returned.getElementType().kind() == "TensorType":
        return None  # inferd reads List[Tensor] by position too; Triton refuses it
    raise InvalidArgument(
        f"model '{model}': forward() returns {returned}: {UNSUPPORTED_SCRIPT_RESULT}"
    )


def _script_mutates(torch: ModuleType, module: Any) -> bool:
    """Whether forward() (with every submodule call inlined) holds any op that writes one of
    its arguments. Only then must a read-only input be copied before torch sees it."""
    graph = module.forward.graph.copy()
    torch._C._jit_pass_inline(graph)
    for node in graph.nodes():
        if not node.kind().startswith("aten::"):
            continue
        schema = node.schema()
        if schema == "(no schema)" or torch._C.parse_schema(schema).is_mutable:
            return True
    return False


def _load_exported(torch: ModuleType, path: Path, device: Any, model: str) -> Program:
    try:
        program = torch.export.load(str(path))
    except Exception as error:
        raise InvalidArgument(
            f"model '{model}': torch.export.load could not load {path}: {_first_line(error)}"
        ) from None
    import torch.utils._pytree as pytree

    signature = program.graph_signature
    in_spec, out_spec = program.call_spec.in_spec, program.call_spec.out_spec
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    input_names = list(signature.user_inputs)
    input_paths = _leaf_paths(pytree, in_spec)
    if len(input_paths) != len(input_names):
        raise InvalidArgument(
            f"model '{model}': the exported program takes non-tensor inputs "
            f"({len(input_paths)} leaves, {len(input_names)} tensors); only tensors are supported"
        )
    named_inputs = program_inputs([str(name) for name in input_names], input_paths)
    inputs = tuple(
        _signature(model, "input", tensor, placeholders[str(name)].meta.get("val"))
        for tensor, name in zip(named_inputs, input_names, strict=True)
    )
    output_node = next(node for node in program.graph.nodes if node.op == "output")
    user_values = list(output_node.args[0])[-len(signature.user_outputs):]
    if not signature.user_outputs:
        user_values = []
    named_outputs = program_outputs(_leaf_paths(pytree, out_spec))
    if len(named_outputs) != len(user_values):
        raise InvalidArgument(
            f"model '{model}': the exported program returns non-tensor values; only tensors "
            f"(in tuples, lists and dicts) are supported"
        )
    outputs = tuple(
        _signature(model, "output", tensor, getattr(value, "meta", {}).get("val"))
        for tensor, value in zip(named_outputs, user_values, strict=True)
    )
    mutated = set(signature.user_inputs_to_mutate.values())
    module = program.module()
    if str(device) != "cpu":
        module = module.to(device)
    return Program(
        module=module,
        exported=True,
        output_count=len(outputs),
        inputs=inputs,
        outputs=outputs,
        mutated_inputs=frozenset(
            index for index, name in enumerate(input_names) if name in mutated
        ),
        in_spec=in_spec,
        pytree=pytree,
    )


def _leaf_paths(pytree: Any, spec: Any) -> list[KeyPath]:
    """The key path of every leaf of ``spec``: indexes into sequences, keys into dicts."""
    skeleton = pytree.tree_unflatten([0] * spec.num_leaves, spec)
    paths: list[KeyPath] = []
    for key_path, _ in pytree.tree_flatten_with_path(skeleton)[0]:
        path: list[int | str] = []
        for entry in key_path:
            if hasattr(entry, "idx"):
                path.append(int(entry.idx))
            elif hasattr(entry, "key"):
                path.append(str(entry.key))
            else:
                path.append(str(getattr(entry, "name", entry)))
        paths.append(tuple(path))
    return paths


def _signature(model: str, kind: str, tensor: ProgramTensor, value: Any) -> TensorSignature:
    if value is None or not hasattr(value, "dtype") or not hasattr(value, "shape"):
        raise InvalidArgument(
            f"model '{model}': {kind} '{tensor.name}' of the exported program is not a tensor "
            f"({type(value).__name__}); only tensors are supported"
        )
    shape = tuple(dim if isinstance(dim, int) else DYNAMIC for dim in value.shape)
    return TensorSignature(tensor, config_type_of(value.dtype), shape)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
