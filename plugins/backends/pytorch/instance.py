"""Running batches of inference requests on one loaded PyTorch program.

Owns what is PyTorch's own in running a batch: the execution plan (argument and result
positions), turning a group's arrays into torch tensors (without copies: ``torch.from_numpy``
over the request's memory, copied only when the program may write to a read-only buffer),
calling the program under ``torch.inference_mode()`` on the instance's device, checking and
turning its result tensors into numpy (views of CPU tensors), and Triton's failure texts. The
batch skeleton (name checks, reshapes, grouping, concatenation, splitting outputs into one
response per request, phase timing) is ``inferd.kernel.batched_instance``'s. It is handed
torch and the program (it imports neither) and never raises out of ``execute``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.backends import BatchPlan, BatchedInstance, PreparedRequest
from inferd.plugins.backends.pytorch.programs import Program
from inferd.plugins.backends.pytorch.tensors import config_type_of, to_numpy, to_torch, type_name
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.tensors import config_type_to_datatype

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput

# Triton's prefix for a failure inside the model (Execute).
EXECUTE_FAILURE = "PyTorch execute failure: "


@dataclass(frozen=True, slots=True)
class TensorPlan:
    """One configured tensor: where it sits in the program's arguments or flattened result,
    and the shape the program sees when the config reshapes it (without the batch dim)."""

    name: str
    position: int
    data_type: int
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None
    copy_read_only: bool = False

    @property
    def datatype(self) -> str:
        return config_type_to_datatype(type_name(self.data_type))


@dataclass(frozen=True, slots=True)
class ExecutionPlan(BatchPlan[TensorPlan]):
    """What an instance needs to know of the config and the program, read once at load."""

    @classmethod
    def build(
        cls,
        config: ModelConfig,
        version: int,
        input_positions: dict[str, int],
        output_positions: dict[str, int],
        program: Program,
    ) -> ExecutionPlan:
        mutated = program.mutated_inputs

        def plan(entry: ModelInput | ModelOutput, position: int, is_input: bool) -> TensorPlan:
            reshape = tuple(entry.reshape.shape) if entry.HasField("reshape") else None
            copy = is_input and (mutated is None or position in mutated)
            return TensorPlan(entry.name, position, entry.data_type, tuple(entry.dims),
                              reshape, copy)

        return cls(
            model=config.name,
            version=str(version),
            batching=config.max_batch_size > 0,
            inputs={e.name: plan(e, input_positions[e.name], True) for e in config.input},
            outputs=tuple(plan(e, output_positions[e.name], False) for e in config.output),
        )


class PyTorchInstance(BatchedInstance[TensorPlan, list[Any], list[Any]]):
    """One program on one device, run by one executor thread at a time."""

    def __init__(self, torch: ModuleType, program: Program, device: Any, plan: ExecutionPlan
                 ) -> None:
        super().__init__(plan)
        self._torch = torch
        self._program: Program | None = program
        self._device = device
        self._ordered_inputs = sorted(plan.inputs.values(), key=lambda p: p.position)
        self._input_names = [tensor_plan.name for tensor_plan in self._ordered_inputs]

    def close(self) -> None:
        self._program = None

    def _inputs(self, group: list[PreparedRequest]) -> list[Any]:
        torch, tensors = self._torch, []
        arrays = self._concatenated(group)
        for tensor_plan in self._ordered_inputs:
            array = arrays[tensor_plan.name]
            # A concatenation is a fresh, writable array torch may take as it is.
            copy = tensor_plan.copy_read_only and not array.flags.writeable
            bfloat16 = tensor_plan.data_type == model_config_pb2.TYPE_BF16
            value = to_torch(torch, array, bfloat16, copy)
            if self._device.type != "cpu":
                value = value.to(self._device, non_blocking=True)
            tensors.append(value)
        return tensors

    def _infer(self, inputs: list[Any], output_plans: list[TensorPlan]) -> list[Any]:
        program = self._program
        if program is None:
            raise RuntimeError("the instance is closed")
        with self._torch.inference_mode():
            return program.call(inputs, self._input_names)

    def _output_arrays(self, result: list[Any], output_plans: list[TensorPlan]
                       ) -> Iterator[np.ndarray]:
        return (self._array(output, result) for output in output_plans)

    def _run_failure(self, error: Exception) -> InferdError:
        if isinstance(error, InferdError):
            return Internal(EXECUTE_FAILURE + error.message)
        return Internal(EXECUTE_FAILURE + _message(error))

    def _output_failure(self, error: Exception) -> InferdError:
        if isinstance(error, InferdError):
            return Internal(EXECUTE_FAILURE + error.message)
        return Internal(f"model '{self._plan.model}' returned unusable outputs: {_message(error)}")

    def _array(self, output: TensorPlan, leaves: list[Any]) -> np.ndarray:
        if output.position >= len(leaves):
            raise InvalidArgument(
                f"output '{output.name}' refers to element {output.position} of the model's "
                f"result, which has {len(leaves)}"
            )
        value = leaves[output.position]
        if not isinstance(value, self._torch.Tensor):
            raise InvalidArgument(
                f"output '{output.name}' is a {type(value).__name__}, not a tensor"
            )
        if config_type_of(value.dtype) != output.data_type:
            raise InvalidArgument(
                f"output '{output.name}' of model '{self._plan.model}' is {value.dtype} but the "
                f"configuration says {type_name(output.data_type)}"
            )
        return to_numpy(self._torch, value)


def _message(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__
