"""The ``reverse`` backend: output i is input i reversed along its last axis."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.kernel.sdk import Backend, Instance, Model, ModelContext
from inferd.kernel.sdk.backends import InferdError, InferRequest, InferResponse, Tensor


class ReverseInstance(Instance):
    def __init__(self, context: ModelContext) -> None:
        self._context = context
        self._outputs = [o.name for o in context.config.output]

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        responses: list[InferResponse | InferdError] = []
        for request in requests:
            outputs = tuple(
                Tensor(name, tensor.datatype, tensor.shape, tensor.data[..., ::-1].copy())
                for name, tensor in zip(self._outputs, request.inputs)
            )
            responses.append(InferResponse(self._context.name, str(self._context.version),
                                           outputs, id=request.id))
        return responses


class ReverseModel(Model):
    def __init__(self, context: ModelContext) -> None:
        self._context = context
        self.config = context.config

    def create_instance(self, index: int) -> Instance:
        return ReverseInstance(self._context)


class ReverseBackend(Backend):
    name = "reverse"

    def load_model(self, context: ModelContext) -> Model:
        return ReverseModel(context)
