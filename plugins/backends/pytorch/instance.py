"""Running batches of inference requests on one loaded PyTorch program.

Owns turning requests into torch tensors (without copies: ``torch.from_numpy`` over the
request's memory, copied only when the program may write to a read-only buffer), running
compatible requests as one batch under ``torch.inference_mode()`` on the instance's device,
and turning the result back into one response per request (numpy views of CPU tensors). It
trusts the scheduler's validation of inputs, shapes and datatypes, is handed torch and the
program (it imports neither) and never raises out of ``execute``.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.kernel.backend import Instance, split_batch
from inferd.plugins.backends.pytorch.programs import Program
from inferd.plugins.backends.pytorch.tensors import config_type_of, to_numpy, to_torch, type_name
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import config_type_to_datatype, from_numpy

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
class ExecutionPlan:
    model: str
    version: str
    batching: bool
    inputs: dict[str, TensorPlan]
    outputs: tuple[TensorPlan, ...]

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


@dataclass(frozen=True, slots=True)
class _Prepared:
    index: int
    request: InferRequest
    arrays: dict[str, np.ndarray]
    batch_size: int
    outputs: tuple[str, ...]


class PyTorchInstance(Instance):
    """One program on one device, run by one executor thread at a time."""

    def __init__(self, torch: ModuleType, program: Program, device: Any, plan: ExecutionPlan
                 ) -> None:
        self._torch = torch
        self._program: Program | None = program
        self._device = device
        self._plan = plan
        self._ordered_inputs = sorted(plan.inputs.values(), key=lambda p: p.position)
        self._phases = [0, 0, 0]

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self._phases = [0, 0, 0]
        started = time.perf_counter_ns()
        results: list[InferResponse | InferdError | None] = [None] * len(requests)
        groups: dict[Hashable, list[_Prepared]] = {}
        for index, request in enumerate(requests):
            try:
                prepared = self._prepare(index, request)
            except InferdError as error:
                results[index] = error
                continue
            except (IndexError, TypeError, ValueError) as error:
                results[index] = InvalidArgument(
                    f"request for model '{self._plan.model}' cannot be run: {error}"
                )
                continue
            groups.setdefault(self._batch_key(prepared), []).append(prepared)
        self._phases[0] += time.perf_counter_ns() - started
        for group in groups.values():
            for prepared, result in zip(group, self._run(group), strict=True):
                results[prepared.index] = result
        self.phase_ns = (self._phases[0], self._phases[1], self._phases[2])
        return [result for result in results if result is not None]

    def close(self) -> None:
        self._program = None

    def _prepare(self, index: int, request: InferRequest) -> _Prepared:
        plan = self._plan
        arrays = {}
        for tensor in request.inputs:
            tensor_plan = plan.inputs.get(tensor.name)
            if tensor_plan is None:
                raise InvalidArgument(
                    f"unexpected inference input '{tensor.name}' for model '{plan.model}'"
                )
            arrays[tensor.name] = self._reshaped(tensor, tensor_plan)
        configured = [output.name for output in plan.outputs]
        for name in request.outputs:
            if name not in configured:
                raise InvalidArgument(
                    f"unexpected inference output '{name}' for model '{plan.model}'"
                )
        batch_size = 1
        if plan.batching and arrays:
            batch_size = int(next(iter(arrays.values())).shape[0])
        return _Prepared(index, request, arrays, batch_size, request.outputs or tuple(configured))

    def _reshaped(self, tensor: Tensor, tensor_plan: TensorPlan) -> np.ndarray:
        data = tensor.data
        if tensor_plan.reshape is not None:
            shape = tensor_plan.reshape
            if self._plan.batching:
                shape = (data.shape[0], *shape)
            try:
                data = data.reshape(shape)
            except ValueError:
                raise InvalidArgument(
                    f"input '{tensor.name}' of shape {list(tensor.shape)} cannot be reshaped "
                    f"to {list(shape)} for model '{self._plan.model}'"
                ) from None
        return data

    def _batch_key(self, prepared: _Prepared) -> Hashable:
        if not self._plan.batching:
            return prepared.index
        # Requests batch together only when every input agrees past the batch dimension.
        return tuple(
            (name, array.shape[1:], array.dtype.str)
            for name, array in sorted(prepared.arrays.items())
        )

    def _inputs(self, group: list[_Prepared]) -> list[Any]:
        torch, tensors = self._torch, []
        for tensor_plan in self._ordered_inputs:
            if len(group) == 1:
                array = group[0].arrays[tensor_plan.name]
            else:
                # One concatenation: a fresh, writable array torch may take as it is.
                array = np.concatenate([p.arrays[tensor_plan.name] for p in group], axis=0)
            copy = tensor_plan.copy_read_only and not array.flags.writeable
            bfloat16 = tensor_plan.data_type == model_config_pb2.TYPE_BF16
            value = to_torch(torch, array, bfloat16, copy)
            if self._device.type != "cpu":
                value = value.to(self._device, non_blocking=True)
            tensors.append(value)
        return tensors

    def _run(self, group: list[_Prepared]) -> list[InferResponse | InferdError]:
        started = time.perf_counter_ns()
        wanted = {name for prepared in group for name in prepared.outputs}
        output_plans = [output for output in self._plan.outputs if output.name in wanted]
        program = self._program
        try:
            if program is None:
                raise RuntimeError("the instance is closed")
            inputs = self._inputs(group)
            infer_started = time.perf_counter_ns()
            self._phases[0] += infer_started - started
            with self._torch.inference_mode():
                leaves = program.call(inputs, [p.name for p in self._ordered_inputs])
        except InferdError as error:
            return [Internal(EXECUTE_FAILURE + error.message) for _ in group]
        except Exception as error:
            return [Internal(EXECUTE_FAILURE + _message(error)) for _ in group]
        output_started = time.perf_counter_ns()
        self._phases[1] += output_started - infer_started
        sizes = [prepared.batch_size for prepared in group]
        try:
            pieces = {
                output.name: [
                    self._tensor(output, piece)
                    for piece in split_batch(self._array(output, leaves), sizes)
                ]
                for output in output_plans
            }
        except InferdError as error:
            return [Internal(EXECUTE_FAILURE + error.message) for _ in group]
        except Exception as error:
            message = f"model '{self._plan.model}' returned unusable outputs: {_message(error)}"
            return [Internal(message) for _ in group]
        finally:
            self._phases[2] += time.perf_counter_ns() - output_started
        return [
            InferResponse(
                model=self._plan.model,
                version=self._plan.version,
                id=prepared.request.id,
                outputs=tuple(pieces[name][position] for name in prepared.outputs),
            )
            for position, prepared in enumerate(group)
        ]

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

    def _tensor(self, output: TensorPlan, array: np.ndarray) -> Tensor:
        if output.reshape is not None:
            shape = output.dims
            if self._plan.batching:
                shape = (array.shape[0], *shape)
            array = array.reshape(shape)
        return from_numpy(output.name, array, output.datatype)


def _message(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__
