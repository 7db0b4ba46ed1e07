"""What a batched instance reads of its config: the plans of its tensors.

``ConfiguredTensor`` is one configured tensor's plan and ``BatchPlan`` the one a backend
subclasses; ``inferd.kernel.sdk.batching`` runs the batches.

Kept out of the compiled batch path on purpose: backends subclass ``BatchPlan[...]``, and a
generic dataclass compiled by mypyc neither imports as a native class nor stays subscriptable
as a plain one. Read once per load, so nothing here is on the per-request path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from tritonclient.grpc import model_config_pb2

from inferd.protocols.tensors import config_type_to_datatype

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelInput, ModelOutput

__all__ = ["BatchPlan", "ConfiguredTensor", "PlannedTensor"]


class PlannedTensor(Protocol):
    """One configured tensor as the skeleton reads it: ``reshape`` is the shape the framework
    sees when the config reshapes the tensor (without the batch dimension), ``dims`` the shape
    clients see."""

    @property
    def name(self) -> str: ...

    @property
    def datatype(self) -> str: ...

    @property
    def dims(self) -> tuple[int, ...]: ...

    @property
    def reshape(self) -> tuple[int, ...] | None: ...


@dataclass(frozen=True, slots=True)
class ConfiguredTensor:
    """A ``PlannedTensor`` read straight from a config entry: what a backend that binds
    tensors by name needs (onnxruntime, TensorRT)."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None

    @classmethod
    def of(cls, entry: ModelInput | ModelOutput) -> ConfiguredTensor:
        reshape = tuple(entry.reshape.shape) if entry.HasField("reshape") else None
        datatype = config_type_to_datatype(model_config_pb2.DataType.Name(entry.data_type))
        return cls(entry.name, datatype, tuple(entry.dims), reshape)


PlanT = TypeVar("PlanT", bound=PlannedTensor)


@dataclass(frozen=True, slots=True)
class BatchPlan(Generic[PlanT]):
    """What an instance needs to know of the config, read once at load. A backend subclasses
    it (with ``@dataclass(frozen=True, slots=True)``) to add how it is built from a config."""

    model: str
    version: str
    batching: bool
    inputs: dict[str, PlanT]
    outputs: tuple[PlanT, ...]
