"""What each native-client call sends and how its reply is read, shared by both clients.

Every call of ``Client`` and ``AsyncClient`` is one ``Call`` built here: the request message
and the function that turns the reply into the call's return value (a ``Failure`` reply
raises the typed ``InferdError`` the server raised). Also the reply frames' parsing and the
client's id. Pure: no sockets; each client in ``inferd.protocols.client`` only sends the
request and waits for the reply on its own transport.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import InferdError, Internal, NotFound
from inferd.protocols.messages import (
    Ack,
    Catalog,
    CatalogEntry,
    CatalogRequest,
    Failure,
    HealthRequest,
    HealthStatus,
    Index,
    IndexEntry,
    IndexRequest,
    InferRequest,
    InferResponse,
    LabelsRequest,
    LoadRequest,
    Message,
    ModelConfigReply,
    ModelConfigRequest,
    ModelMetadata,
    ModelMetadataRequest,
    ModelReadyRequest,
    PollRequest,
    ServerMetadata,
    ServerMetadataRequest,
    Statistics,
    StatisticsRequest,
    Tensor,
    UnloadRequest,
    VersionLabelsReply,
)
from inferd.protocols.tensors import from_numpy

if TYPE_CHECKING:
    import zmq

Inputs = Mapping[str, Any] | Sequence[Tensor]
ReplyT = TypeVar("ReplyT", bound=Message)
ResultT = TypeVar("ResultT")


class InferResult:
    """One inference response: ``outputs`` maps each output name to its ``Tensor``."""

    __slots__ = ("outputs", "response")

    def __init__(self, response: InferResponse) -> None:
        self.response = response
        self.outputs: dict[str, Tensor] = {tensor.name: tensor for tensor in response.outputs}

    @property
    def model(self) -> str:
        return self.response.model

    @property
    def version(self) -> str:
        return self.response.version

    @property
    def id(self) -> str:
        return self.response.id

    @property
    def parameters(self) -> dict[str, Any]:
        return self.response.parameters

    def as_numpy(self, name: str) -> np.ndarray:
        try:
            return self.outputs[name].data
        except KeyError:
            raise KeyError(
                f"no output {name!r} in the response; outputs: {sorted(self.outputs)}"
            ) from None

    def __repr__(self) -> str:
        outputs = list(self.outputs)
        return f"InferResult(model={self.model!r}, version={self.version!r}, outputs={outputs})"


@dataclass(frozen=True, slots=True)
class Call(Generic[ResultT]):
    """One client call: the ``request`` to send and how its reply becomes the result."""

    request: Message
    answer: Callable[[Message], ResultT]


def expect(reply: Message, kind: type[ReplyT]) -> ReplyT:
    """``reply`` when it is a ``kind``; a ``Failure`` raises its typed error."""
    if isinstance(reply, kind):
        return reply
    if isinstance(reply, Failure):
        try:
            error = InferdError.from_code(reply.code, reply.message)
        except ValueError:  # a code from a newer server
            error = Internal(f"{reply.code}: {reply.message}")
        raise error
    raise Internal(f"expected a {kind.kind()} reply, got {reply.kind()}")


# ------------------------------------------------------------------------------ the calls


def infer(
    model: str,
    inputs: Inputs,
    *,
    outputs: Sequence[str],
    version: str,
    request_id: str,
    parameters: Mapping[str, Any] | None,
    priority: int,
    timeout_us: int,
    classification: Mapping[str, int] | None,
) -> Call[InferResult]:
    if isinstance(inputs, Mapping):
        tensors = tuple(from_numpy(name, value) for name, value in inputs.items())
    else:
        tensors = tuple(inputs)
    request = InferRequest(
        model=model,
        inputs=tensors,
        version=version,
        id=request_id,
        outputs=tuple(outputs),
        parameters=dict(parameters or {}),
        priority=priority,
        timeout_us=timeout_us,
        classification=dict(classification or {}),
    )
    return Call(request, lambda reply: InferResult(expect(reply, InferResponse)))


def _health(reply: Message) -> bool:
    ok: bool = expect(reply, HealthStatus).ok
    return ok


def is_live() -> Call[bool]:
    return Call(HealthRequest("live"), _health)


def is_ready() -> Call[bool]:
    return Call(HealthRequest("ready"), _health)


def _model_health(reply: Message) -> bool:
    """False for a model the server does not know, as for one that is not READY."""
    try:
        return _health(reply)
    except NotFound:
        return False


def is_model_ready(model: str, version: str) -> Call[bool]:
    return Call(ModelReadyRequest(model, version), _model_health)


def server_metadata() -> Call[ServerMetadata]:
    return Call(ServerMetadataRequest(), lambda reply: expect(reply, ServerMetadata))


def model_metadata(model: str, version: str) -> Call[ModelMetadata]:
    return Call(ModelMetadataRequest(model, version), lambda reply: expect(reply, ModelMetadata))


def _config(reply: Message) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(expect(reply, ModelConfigReply).config_json)
    return config


def model_config(model: str, version: str) -> Call[dict[str, Any]]:
    return Call(ModelConfigRequest(model, version), _config)


def _statistics(reply: Message) -> list[dict[str, Any]]:
    return list(expect(reply, Statistics).model_stats)


def statistics(model: str, version: str) -> Call[list[dict[str, Any]]]:
    return Call(StatisticsRequest(model, version), _statistics)


def _acknowledged(reply: Message) -> None:
    expect(reply, Ack)


def poll() -> Call[None]:
    return Call(PollRequest(), _acknowledged)


def _index(reply: Message) -> list[IndexEntry]:
    return list(expect(reply, Index).entries)


def index(ready_only: bool) -> Call[list[IndexEntry]]:
    return Call(IndexRequest(ready_only), _index)


def _catalog(reply: Message) -> list[CatalogEntry]:
    return list(expect(reply, Catalog).entries)


def catalog(labels: Mapping[str, str] | None, task: str) -> Call[list[CatalogEntry]]:
    request = CatalogRequest(tuple((str(k), str(v)) for k, v in (labels or {}).items()), task)
    return Call(request, _catalog)


def load(
    model: str, config: str | Mapping[str, Any] | None, files: Mapping[str, bytes] | None,
    versions: Sequence[int] = (),
) -> Call[None]:
    if config is None:
        config_json = ""
    elif isinstance(config, str):
        config_json = config
    else:
        config_json = json.dumps(config)
    return Call(LoadRequest(model=model, config=config_json, files=dict(files or {}),
                            versions=tuple(versions)), _acknowledged)


def unload(model: str, unload_dependents: bool, versions: Sequence[int] = ()) -> Call[None]:
    return Call(UnloadRequest(model, unload_dependents, tuple(versions)), _acknowledged)


def labels(model: str, labels: Mapping[str, int] | None, remove: Sequence[str],
           canary_percent: float | None) -> Call[VersionLabelsReply]:
    """Read (nothing to change) or move ``model``'s version labels (an inferd extension)."""
    request = LabelsRequest(model, dict(labels or {}), tuple(remove),
                            -1.0 if canary_percent is None else float(canary_percent))
    return Call(request, lambda reply: expect(reply, VersionLabelsReply))


# ------------------------------------------------------------------------------ the frames


def reply_of(frames: list[zmq.Frame]) -> tuple[int, Message] | None:
    """The ``(reply_to, body)`` of a received frame list, or ``None`` when it is not a reply
    (a stray or malformed message must not break a client that is waiting for others)."""
    if len(frames) < 2 or len(frames[0]) != 0:
        return None
    try:
        envelope = wire.decode(frames[1:])
    except Exception:  # one unreadable message must not end the receive loop
        return None
    if envelope.reply_to is None:
        return None
    return envelope.reply_to, envelope.body


def client_id() -> str:
    return f"client/{os.getpid()}/{secrets.token_hex(6)}"
