"""Running batches of inference requests on one loaded PyTorch program.

Owns what is PyTorch's own in running a batch: the execution plan (argument and result
positions), turning a group's arrays into torch tensors (without copies: ``torch.from_numpy``
over the request's memory, or on a GPU a client's CUDA shared memory wrapped in place,
copied only when the program may write to a read-only buffer), calling the program under
``torch.inference_mode()`` on the instance's device, checking and turning its result tensors
into numpy (views of CPU tensors), or, for an output a request asks in CUDA shared memory on
a GPU, copying it there device-to-device, and Triton's failure texts. The
batch skeleton (name checks, reshapes, grouping, concatenation, splitting outputs into one
response per request, phase timing) is ``inferd.kernel.sdk.batching``'s. It is
handed torch and the program (it imports neither) and never raises out of ``execute``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.batching import BatchedInstance, BatchPlan, PreparedRequest
from inferd.kernel.sdk.cuda_memory import written_window
from inferd.plugins.backends.pytorch.programs import Program
from inferd.plugins.backends.pytorch.tensors import (
    config_type_of,
    device_view,
    to_numpy,
    to_torch,
    type_name,
    write_on_device,
)
from inferd.protocols.device_tensors import DeviceArray, device_tensor
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.messages import Tensor
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
        # On a GPU it reads CUDA shared memory in place and writes its outputs there itself.
        self.takes_device_memory = getattr(device, "type", "cpu") == "cuda"

    def close(self) -> None:
        self._program = None

    def _inputs(self, group: list[PreparedRequest]) -> list[Any]:
        if len(group) > 1 and any(type(array) is DeviceArray
                                  for prepared in group for array in prepared.arrays.values()):
            # Device memory cannot join numpy's concatenation: each request's input becomes a
            # tensor on the device first, and the device joins them (a fresh tensor).
            cat = self._torch.cat
            return [cat([self._tensor_input(prepared.arrays[tensor_plan.name], tensor_plan, False)
                         for prepared in group])
                    for tensor_plan in self._ordered_inputs]
        arrays = self._concatenated(group)
        return [self._tensor_input(arrays[tensor_plan.name], tensor_plan, True)
                for tensor_plan in self._ordered_inputs]

    def _tensor_input(self, array: np.ndarray, tensor_plan: TensorPlan, program_sees: bool
                      ) -> Any:
        """``array`` as a tensor on the instance's device; ``program_sees`` it as it is (not
        joined to others), so memory the program may not write is copied first."""
        torch = self._torch
        if type(array) is DeviceArray:  # a client's CUDA shared memory, wrapped in place
            value = device_view(torch, array.pointer, array.shape, array.dtype, self._device,
                                array.owner)
            return value.clone() if program_sees and tensor_plan.copy_read_only else value
        # A concatenation is a fresh, writable array torch may take as it is.
        copy = program_sees and tensor_plan.copy_read_only and not array.flags.writeable
        bfloat16 = tensor_plan.data_type == model_config_pb2.TYPE_BF16
        value = to_torch(torch, array, bfloat16, copy)
        if self._device.type != "cpu":
            value = value.to(self._device, non_blocking=True)
        return value

    def _infer(self, inputs: list[Any], output_plans: list[TensorPlan]) -> list[Any]:
        program = self._program
        if program is None:
            raise RuntimeError("the instance is closed")
        with self._torch.inference_mode():
            return program.call(inputs, self._input_names)

    def _output_arrays(self, result: list[Any], output_plans: list[TensorPlan]
                       ) -> Iterator[np.ndarray]:
        return (self._array(output, result) for output in output_plans)

    def _output_values(self, result: list[Any], output_plans: list[TensorPlan],
                       group: list[PreparedRequest]) -> Iterator[Any]:
        """An output some request asks in CUDA shared memory stays a device tensor (each
        request's piece is written there or brought to the host by ``_output_piece``)."""
        if not self.takes_device_memory or not any(p.request.output_windows for p in group):
            return self._output_arrays(result, output_plans)
        on_device = {name for prepared in group for name in prepared.request.output_windows}
        return (self._checked(output, result).detach() if output.name in on_device
                else self._array(output, result) for output in output_plans)

    def _output_piece(self, output: TensorPlan, piece: Any, prepared: PreparedRequest
                      ) -> Tensor:
        if isinstance(piece, np.ndarray):
            return self._tensor(output, piece)
        window = prepared.request.output_windows.get(output.name)
        shape = tuple(piece.shape)
        if output.reshape is not None:
            shape = (*shape[:1], *output.dims) if self._plan.batching else output.dims
        byte_size = piece.numel() * piece.element_size()
        address = self.window_addresses.get(window) if window is not None else None
        if window is None or address is None or byte_size > window.byte_size:
            # On the host: the executor writes it (or refuses a window too small for it).
            return self._tensor(output, to_numpy(self._torch, piece))
        write_on_device(self._torch, piece.reshape(shape), address, self._device)
        return device_tensor(output.name, output.datatype, shape,
                             written_window(window, byte_size))

    def _run_failure(self, error: Exception) -> InferdError:
        if isinstance(error, InferdError):
            return Internal(EXECUTE_FAILURE + error.message)
        return Internal(EXECUTE_FAILURE + _message(error))

    def _output_failure(self, error: Exception) -> InferdError:
        if isinstance(error, InferdError):
            return Internal(EXECUTE_FAILURE + error.message)
        return Internal(f"model '{self._plan.model}' returned unusable outputs: {_message(error)}")

    def _array(self, output: TensorPlan, leaves: list[Any]) -> np.ndarray:
        return to_numpy(self._torch, self._checked(output, leaves))

    def _checked(self, output: TensorPlan, leaves: list[Any]) -> Any:
        """The tensor the result holds for ``output``, checked against the config."""
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
        return value


def _message(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__
