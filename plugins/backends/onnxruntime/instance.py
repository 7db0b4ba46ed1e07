"""Running batches of inference requests on one onnxruntime session.

Owns the way between inferd tensors and onnxruntime: turning requests into session feeds
(BYTES to text, reshapes), running compatible requests as one batch, and turning the session's
outputs back into one response per request. It trusts the scheduler's validation of inputs,
shapes and datatypes, imports no onnxruntime itself (it is handed a session) and never raises
out of ``execute``: every failure becomes that request's error.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.kernel.backend import Instance, split_batch
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import config_type_to_datatype, from_numpy

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput


# Indexes into an instance's phase clock (index 0 holds when the current phase began).
INPUT_PHASE, INFER_PHASE, OUTPUT_PHASE = 1, 2, 3


@dataclass(frozen=True, slots=True)
class TensorPlan:
    """One configured tensor. ``onnx_shape`` is the shape the session sees when the config
    reshapes the tensor (without the batch dimension), and ``dims`` the shape clients see."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    onnx_shape: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    """What an instance needs to know of the config, read once at load."""

    model: str
    version: str
    batching: bool
    inputs: dict[str, TensorPlan]
    outputs: tuple[TensorPlan, ...]

    @classmethod
    def from_config(cls, config: ModelConfig, model: str, version: int) -> ExecutionPlan:
        return cls(
            model=model,
            version=str(version),
            batching=config.max_batch_size > 0,
            inputs={entry.name: _tensor_plan(entry) for entry in config.input},
            outputs=tuple(_tensor_plan(entry) for entry in config.output),
        )


def _tensor_plan(entry: ModelInput | ModelOutput) -> TensorPlan:
    reshape = tuple(entry.reshape.shape) if entry.HasField("reshape") else None
    return TensorPlan(
        name=entry.name,
        datatype=config_type_to_datatype(model_config_pb2.DataType.Name(entry.data_type)),
        dims=tuple(entry.dims),
        onnx_shape=reshape,
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    index: int
    request: InferRequest
    feeds: dict[str, np.ndarray]
    batch_size: int
    outputs: tuple[str, ...]


class OnnxRuntimeInstance(Instance):
    """One session, run by one executor thread at a time."""

    def __init__(self, session: Any, plan: ExecutionPlan) -> None:
        self._session = session
        self._plan = plan
        self._clock = [0, 0, 0, 0]

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self._clock = [time.perf_counter_ns(), 0, 0, 0]
        results: list[InferResponse | InferdError | None] = [None] * len(requests)
        groups: dict[Hashable, list[_Prepared]] = {}
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
        for group in groups.values():
            for prepared, result in zip(group, self._run(group), strict=True):
                results[prepared.index] = result
        self._lap(OUTPUT_PHASE)
        self.phase_ns = (self._clock[INPUT_PHASE], self._clock[INFER_PHASE],
                         self._clock[OUTPUT_PHASE])
        return [result for result in results if result is not None]

    def _lap(self, phase: int) -> None:
        """Charge the time since the last lap to ``phase``."""
        now = time.perf_counter_ns()
        self._clock[phase] += now - self._clock[0]
        self._clock[0] = now

    def close(self) -> None:
        self._session = None

    def _prepare(self, index: int, request: InferRequest) -> _Prepared:
        plan = self._plan
        feeds = {}
        for tensor in request.inputs:
            tensor_plan = plan.inputs.get(tensor.name)
            if tensor_plan is None:
                raise InvalidArgument(
                    f"unexpected inference input '{tensor.name}' for model '{plan.model}'"
                )
            feeds[tensor.name] = self._feed(tensor, tensor_plan)
        configured = [output.name for output in plan.outputs]
        for name in request.outputs:
            if name not in configured:
                raise InvalidArgument(
                    f"unexpected inference output '{name}' for model '{plan.model}'"
                )
        batch_size = 1
        if plan.batching and feeds:
            batch_size = int(next(iter(feeds.values())).shape[0])
        return _Prepared(index, request, feeds, batch_size, request.outputs or tuple(configured))

    def _feed(self, tensor: Tensor, tensor_plan: TensorPlan) -> np.ndarray:
        data = tensor.data
        if tensor.datatype == "BYTES":
            data = _as_text(tensor)
        if tensor_plan.onnx_shape is not None:
            shape = tensor_plan.onnx_shape
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
            for name, array in sorted(prepared.feeds.items())
        )

    def _run(self, group: list[_Prepared]) -> list[InferResponse | InferdError]:
        wanted = {name for prepared in group for name in prepared.outputs}
        output_plans = [output for output in self._plan.outputs if output.name in wanted]
        feeds = group[0].feeds
        if len(group) > 1:
            feeds = {
                name: np.concatenate([prepared.feeds[name] for prepared in group], axis=0)
                for name in feeds
            }
        self._lap(INPUT_PHASE)
        try:
            arrays = self._session.run([output.name for output in output_plans], feeds)
        except Exception as error:
            return [_failure_from_onnxruntime(error) for _ in group]
        finally:
            self._lap(INFER_PHASE)
        sizes = [prepared.batch_size for prepared in group]
        try:
            pieces = {
                output.name: [self._tensor(output, piece) for piece in split_batch(array, sizes)]
                for output, array in zip(output_plans, arrays, strict=True)
            }
        except Exception as error:
            message = f"model '{self._plan.model}' returned unusable outputs: {error}"
            return [Internal(message) for _ in group]
        return [
            InferResponse(
                model=self._plan.model,
                version=self._plan.version,
                id=prepared.request.id,
                outputs=tuple(pieces[name][position] for name in prepared.outputs),
            )
            for position, prepared in enumerate(group)
        ]

    def _tensor(self, output: TensorPlan, array: np.ndarray) -> Tensor:
        if output.onnx_shape is not None:
            shape = output.dims
            if self._plan.batching:
                shape = (array.shape[0], *shape)
            array = array.reshape(shape)
        return from_numpy(output.name, array, output.datatype)


def _as_text(tensor: Tensor) -> np.ndarray:
    """onnxruntime's Python binding takes string tensors as ``str`` objects only (``bytes``
    would be fed as their ``repr``), so BYTES elements must be UTF-8 text."""
    texts = np.empty(tensor.data.size, dtype=object)
    try:
        texts[:] = [
            item.decode("utf-8") if isinstance(item, (bytes, bytearray)) else str(item)
            for item in tensor.data.flat
        ]
    except UnicodeDecodeError as error:
        raise InvalidArgument(
            f"input '{tensor.name}' holds bytes that are not UTF-8 ({error.reason}); "
            f"onnxruntime string tensors hold text"
        ) from None
    return texts.reshape(tensor.data.shape)


def _failure_from_onnxruntime(error: Exception) -> InferdError:
    message = str(error)
    if type(error).__name__ == "InvalidArgument" or "INVALID_ARGUMENT" in message:
        return InvalidArgument(message)
    return Internal(message)
