"""The batch skeleton that array-based backend instances share.

Owns the part of ``Instance.execute`` that is the same whatever framework runs the model:
checking each request's input and output names against the plan (with the error texts
clients see), its batch size and requested outputs, grouping requests whose inputs agree past
the batch dimension, concatenating a group's inputs, splitting the framework's outputs back
into one response per request (reshaped to the configured dims), and the input/infer/output
phase clock. A backend subclass supplies only what differs: how a BYTES tensor is handed to
the framework, how a group's arrays become framework inputs and run, how the result yields
one array per output (or, for one that writes outputs in CUDA shared memory itself, a value
of its own per output and the tensor each request's piece becomes), and how a failure
becomes an error. It imports no framework, does no
I/O and never raises out of ``execute``; it trusts the scheduler's validation of inputs,
shapes and datatypes.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from inferd.kernel.sdk.backends import Instance, split_batch
from inferd.kernel.sdk._batch_plan import (
    BatchPlan,
    ConfiguredTensor,
    PlannedTensor,
    PlanT,
)
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import from_numpy

if TYPE_CHECKING:
    from _typeshed import IdentityFunction

try:  # present wherever the module can be compiled (mypy brings it)
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - an install without mypy runs this module interpreted
    def mypyc_attr(*attrs: str, **kwattrs: object) -> IdentityFunction:
        return lambda cls: cls

InputsT = TypeVar("InputsT")
ResultT = TypeVar("ResultT")

__all__ = ["BatchPlan", "BatchedInstance", "ConfiguredTensor", "NamedTensorInstance",
           "PlannedTensor", "PreparedRequest"]

# Indexes into an instance's phase clock (index 0 holds when the current phase began).
_INPUT_PHASE, _INFER_PHASE, _OUTPUT_PHASE = 1, 2, 3


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request checked against the plan: its inputs as the arrays the framework will see
    (before concatenation), its batch size and the outputs it gets."""

    index: int
    request: InferRequest
    arrays: dict[str, np.ndarray]
    batch_size: int
    outputs: tuple[str, ...]


@mypyc_attr(allow_interpreted_subclasses=True)
class BatchedInstance(Instance, Generic[PlanT, InputsT, ResultT]):
    """An instance that runs compatible requests as one batch; see the module docstring for
    what a subclass supplies. ``InputsT`` is what ``_inputs`` hands ``_infer``, ``ResultT``
    what ``_infer`` returns."""

    def __init__(self, plan: BatchPlan[PlanT]) -> None:
        self._plan = plan
        self._output_names = tuple(output.name for output in plan.outputs)
        self._clock = [0, 0, 0, 0]

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        clock = self._clock = [time.perf_counter_ns(), 0, 0, 0]
        results: list[InferResponse | InferdError | None] = [None] * len(requests)
        groups: dict[Hashable, list[PreparedRequest]] = {}
        for index, request in enumerate(requests):
            try:
                prepared = self._prepare(index, request)
            except InferdError as error:
                results[index] = error
                continue
            except (IndexError, TypeError, ValueError) as error:
                # Only a request the scheduler should have refused gets here.
                results[index] = InvalidArgument(
                    f"request for model '{self._plan.model}' cannot be run: {error}"
                )
                continue
            groups.setdefault(self._batch_key(prepared), []).append(prepared)
        self._lap(_INPUT_PHASE)
        for group in groups.values():
            for prepared, result in zip(group, self._run(group), strict=True):
                results[prepared.index] = result
            self._lap(_OUTPUT_PHASE)
        self.phase_ns = (clock[_INPUT_PHASE], clock[_INFER_PHASE], clock[_OUTPUT_PHASE])
        return [result for result in results if result is not None]

    def _lap(self, phase: int) -> None:
        """Charge the time since the last lap to ``phase``."""
        now = time.perf_counter_ns()
        self._clock[phase] += now - self._clock[0]
        self._clock[0] = now

    def _prepare(self, index: int, request: InferRequest) -> PreparedRequest:
        plan = self._plan
        arrays = {}
        for tensor in request.inputs:
            tensor_plan = plan.inputs.get(tensor.name)
            if tensor_plan is None:
                raise InvalidArgument(
                    f"unexpected inference input '{tensor.name}' for model '{plan.model}'"
                )
            arrays[tensor.name] = self._input_array(tensor, tensor_plan)
        configured = self._output_names
        for name in request.outputs:
            if name not in configured:
                raise InvalidArgument(
                    f"unexpected inference output '{name}' for model '{plan.model}'"
                )
        batch_size = 1
        if plan.batching and arrays:
            batch_size = int(next(iter(arrays.values())).shape[0])
        return PreparedRequest(index, request, arrays, batch_size, request.outputs or configured)

    def _input_array(self, tensor: Tensor, tensor_plan: PlanT) -> np.ndarray:
        data: np.ndarray = (
            tensor.data if tensor.datatype != "BYTES" else self._bytes_input(tensor)
        )
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

    def _batch_key(self, prepared: PreparedRequest) -> Hashable:
        if not self._plan.batching:
            return prepared.index
        # Requests batch together only when every input agrees past the batch dimension.
        return tuple(
            (name, array.shape[1:], array.dtype.str)
            for name, array in sorted(prepared.arrays.items())
        )

    def _run(self, group: list[PreparedRequest]) -> list[InferResponse | InferdError]:
        wanted = {name for prepared in group for name in prepared.outputs}
        output_plans = [output for output in self._plan.outputs if output.name in wanted]
        try:
            inputs = self._inputs(group)
            self._lap(_INPUT_PHASE)
            result = self._infer(inputs, output_plans)
        except Exception as error:
            return [self._run_failure(error) for _ in group]
        finally:
            self._lap(_INFER_PHASE)
        sizes = [prepared.batch_size for prepared in group]
        try:
            values = self._output_values(result, output_plans, group)
            pieces = {
                output.name: [self._output_piece(output, piece, prepared)
                              for piece, prepared in zip(split_batch(value, sizes), group,
                                                         strict=True)]
                for output, value in zip(output_plans, values, strict=True)
            }
        except Exception as error:
            return [self._output_failure(error) for _ in group]
        return [
            InferResponse(
                model=self._plan.model,
                version=self._plan.version,
                id=prepared.request.id,
                outputs=tuple(pieces[name][position] for name in prepared.outputs),
            )
            for position, prepared in enumerate(group)
        ]

    def _output_values(self, result: ResultT, output_plans: list[PlanT],
                       group: list[PreparedRequest]) -> Iterable[Any]:
        """One value per entry of ``output_plans``, batch dimension first: ``_output_arrays``'s
        arrays, unless a backend that writes outputs on the device keeps some in its own
        form for ``_output_piece``."""
        return self._output_arrays(result, output_plans)

    def _output_piece(self, output: PlanT, piece: Any, prepared: PreparedRequest) -> Tensor:
        """The tensor one request gets of an output value (its piece of the batch)."""
        return self._tensor(output, piece)

    def _tensor(self, output: PlanT, array: np.ndarray) -> Tensor:
        if output.reshape is not None:
            shape = output.dims
            if self._plan.batching:
                shape = (array.shape[0], *shape)
            array = array.reshape(shape)
        return from_numpy(output.name, array, output.datatype)

    @staticmethod
    def _concatenated(group: list[PreparedRequest]) -> dict[str, np.ndarray]:
        """The group's inputs joined along the batch dimension: a lone request's own arrays,
        otherwise one fresh (writable) array per input."""
        first = group[0].arrays
        if len(group) == 1:
            return first
        return {
            name: np.concatenate([prepared.arrays[name] for prepared in group], axis=0)
            for name in first
        }

    def _bytes_input(self, tensor: Tensor) -> np.ndarray:
        """The array a BYTES input is handed to the framework as; by default the object array
        of ``bytes`` itself."""
        data: np.ndarray = tensor.data
        return data

    @abc.abstractmethod
    def _inputs(self, group: list[PreparedRequest]) -> InputsT:
        """The framework's inputs for one group (``_concatenated`` joins the arrays)."""

    @abc.abstractmethod
    def _infer(self, inputs: InputsT, output_plans: list[PlanT]) -> ResultT:
        """Run one group, producing at least ``output_plans``."""

    @abc.abstractmethod
    def _output_arrays(self, result: ResultT, output_plans: list[PlanT]) -> Iterable[np.ndarray]:
        """One numpy array per entry of ``output_plans``, batch dimension first (a generator
        may make them one at a time, each split before the next is made)."""

    @abc.abstractmethod
    def _run_failure(self, error: Exception) -> InferdError:
        """The error each request of a group gets when making its inputs or running it fails."""

    def _output_failure(self, error: Exception) -> InferdError:
        """The error each request of a group gets when its outputs cannot be used."""
        return Internal(f"model '{self._plan.model}' returned unusable outputs: {error}")


@mypyc_attr(allow_interpreted_subclasses=True)
class NamedTensorInstance(BatchedInstance[ConfiguredTensor, dict[str, np.ndarray],
                                          list[np.ndarray]]):
    """The skeleton for a framework that takes a group's inputs by name and gives back one
    array per output asked for, in that order (onnxruntime, TensorRT, TensorFlow): a
    subclass supplies ``_infer`` and ``_run_failure``."""

    def _inputs(self, group: list[PreparedRequest]) -> dict[str, np.ndarray]:
        return self._concatenated(group)

    def _output_arrays(self, result: list[np.ndarray], output_plans: list[ConfiguredTensor]
                       ) -> list[np.ndarray]:
        return result
