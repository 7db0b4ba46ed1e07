"""The protocol-agnostic data plane every frontend adapts: one entry point, ``handle``.

It maps each request kind to the actor that owns the answer (inference and model information
to the scheduler, the repository API and readiness to control) and asks it; server metadata it
answers itself. A model name that breaks the rule of ``inferd.protocols.names`` is refused here,
before any actor (and so any disk, index or log line) sees it. Frontends stay thin: decode,
``await dataplane.handle(request)``, encode. Errors arrive as ``InferdError`` with the code
that decides the status.
"""

from __future__ import annotations

from inferd.kernel.router import Router
from inferd.protocols.errors import Unsupported
from inferd.protocols.names import check_model_name
from inferd.protocols.messages import (
    HealthRequest,
    IndexRequest,
    InferRequest,
    LoadRequest,
    Message,
    Metrics,
    MetricsRequest,
    ModelConfigRequest,
    ModelMetadataRequest,
    ModelReadyRequest,
    PollRequest,
    ServerMetadata,
    ServerMetadataRequest,
    StatisticsRequest,
    UnloadRequest,
)

SERVER_NAME = "inferd"
SERVER_VERSION = "0.1.0"

_OWNER: dict[type[Message], str] = {
    InferRequest: "scheduler",
    ModelMetadataRequest: "scheduler",
    ModelReadyRequest: "scheduler",
    ModelConfigRequest: "scheduler",
    StatisticsRequest: "scheduler",
    HealthRequest: "control",
    IndexRequest: "control",
    LoadRequest: "control",
    UnloadRequest: "control",
    PollRequest: "control",
}

# Requests whose model name may not be empty (statistics without a name mean every model).
_NAMES_A_MODEL = (
    InferRequest, ModelMetadataRequest, ModelReadyRequest, ModelConfigRequest, LoadRequest,
    UnloadRequest,
)


class DataPlane:
    def __init__(self, router: Router, extensions: tuple[str, ...] = ()) -> None:
        self._router = router
        self.extensions = extensions

    async def handle(self, request: Message) -> Message:
        if isinstance(request, ServerMetadataRequest):
            return ServerMetadata(SERVER_NAME, SERVER_VERSION, self.extensions)
        if isinstance(request, MetricsRequest):
            return await self._metrics()
        owner = _OWNER.get(type(request))
        if owner is None:
            raise Unsupported(f"{type(request).__name__} is not a request inferd serves")
        model = getattr(request, "model", "")
        if model or isinstance(request, _NAMES_A_MODEL):
            # Before any actor sees it: a bad name never reaches the disk, the index or a log.
            check_model_name(model)
        return await self._router.ask(owner, request)

    async def _metrics(self) -> Metrics:
        """Inference metrics come from the scheduler, load metrics from control."""
        samples: list[tuple[str, dict[str, str], float]] = []
        for owner in ("scheduler", "control"):
            reply = await self._router.ask(owner, MetricsRequest())
            assert isinstance(reply, Metrics)
            samples += reply.samples
        return Metrics(tuple(samples))
