"""Running batches of inference requests on one onnxruntime session.

Owns what is onnxruntime's own in running a batch: the execution plan read from the config,
BYTES inputs fed as text, one ``session.run`` per group of compatible requests, and mapping
onnxruntime's failures to errors. The batch skeleton (name checks, reshapes, grouping,
concatenation, splitting outputs into one response per request, phase timing) is
``inferd.kernel.sdk.batching``'s. It imports no onnxruntime itself (it is handed
a session) and never raises out of ``execute``: every failure becomes that request's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.kernel.sdk.batching import BatchPlan, ConfiguredTensor, NamedTensorInstance
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.messages import Tensor

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


# The configured tensors, by name, as the batch skeleton reads them.
TensorPlan = ConfiguredTensor


@dataclass(frozen=True, slots=True)
class ExecutionPlan(BatchPlan[TensorPlan]):
    """What an instance needs to know of the config, read once at load."""

    @classmethod
    def from_config(cls, config: ModelConfig, model: str, version: int) -> ExecutionPlan:
        return cls(
            model=model,
            version=str(version),
            batching=config.max_batch_size > 0,
            inputs={entry.name: ConfiguredTensor.of(entry) for entry in config.input},
            outputs=tuple(ConfiguredTensor.of(entry) for entry in config.output),
        )


class OnnxRuntimeInstance(NamedTensorInstance):
    """One session, run by one executor thread at a time."""

    def __init__(self, session: Any, plan: ExecutionPlan) -> None:
        super().__init__(plan)
        self._session = session
        self._binding = _binding_of(session)
        self._required = _required_inputs(session) if self._binding is not None else frozenset()

    def close(self) -> None:
        self._session = self._binding = None

    def _bytes_input(self, tensor: Tensor) -> np.ndarray:
        return _as_text(tensor)

    def _infer(self, inputs: dict[str, np.ndarray], output_plans: list[TensorPlan]
               ) -> list[np.ndarray]:
        names = [output.name for output in output_plans]
        arrays: list[np.ndarray]
        if self._binding is not None and self._required <= inputs.keys():
            arrays = self._binding.run(names, inputs, None)
        else:
            arrays = self._session.run(names, inputs)
        return arrays

    def _run_failure(self, error: Exception) -> InferdError:
        return _failure_from_onnxruntime(error)


def _binding_of(session: Any) -> Any:
    """The C++ session under an ``onnxruntime.InferenceSession`` that runs on the CPU alone,
    to be run directly; None for a GPU session or anything else with a ``run``. The Python
    wrapper's ``run`` adds only a check that the feed holds every required input (``_infer``
    makes it too, leaving a feed that fails it to the wrapper and its message) and a fallback
    from a failing accelerator to the CPU, which a CPU session has no use for."""
    binding = getattr(session, "_sess", None)
    if binding is None or session.get_providers() != ["CPUExecutionProvider"]:
        return None
    return binding


def _required_inputs(session: Any) -> frozenset[str]:
    """The inputs onnxruntime's wrapper insists on: all but those of an optional type."""
    return frozenset(entry.name for entry in session.get_inputs()
                     if not entry.type.startswith("optional"))


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
