"""The frontend contract, the registry frontend plugins fill, and what a frontend is given.

A frontend adapts one protocol (KServe HTTP, KServe gRPC, native zmq, ...) to the
protocol-agnostic ``DataPlane``. It runs in the main process's event loop, binds its socket in
``serve`` and reports it with ``task_status.started()``, and stops taking new requests when
``stop_accepting`` is called, letting the ones in flight finish. A frontend that cannot
start raises ``StartupFailed``. What it is given is typed here as protocols the kernel
implements: the ``DataPlane`` (``handle`` a message, ``stream`` a request's responses, the
``tracer`` that samples requests) and the server's ``Settings`` (the options plugins declared
and the shutdown timeout), so a frontend depends on this module and not on the kernel's
classes. Owns the contract and the frontend registry (an ``inferd.kernel.sdk.registry.Registry``),
no protocol itself. A frontend's helpers are beside it: ``inferd.kernel.sdk.tls``,
``inferd.kernel.sdk.gpu_metrics``, ``inferd.kernel.sdk.request_log`` and the others
``docs/sdk.md`` lists.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio.abc

from inferd.kernel.sdk.registry import Registry, load_entry

if TYPE_CHECKING:
    from inferd.kernel.sdk.tracing import Trace
    from inferd.protocols.errors import InferdError
    from inferd.protocols.messages import InferRequest, InferResponse, Message

__all__ = [
    "DataPlane", "Frontend", "FrontendRegistry", "FrontendSpec", "RequestTracer",
    "ResponseStream", "Settings", "StartupFailed",
]


class StartupFailed(Exception):
    """The server could not start; the message says every reason."""


class RequestTracer(Protocol):
    """The server's sampler of traced requests: ``active`` is false while no setting traces
    (a frontend skips everything then); ``begin`` is the trace of a request to ``model`` when
    it is sampled (``traceparent``: a client's W3C context), which the frontend ends once it
    sent the response."""

    @property
    def active(self) -> bool: ...

    def begin(self, model: str, traceparent: str | None = None) -> Trace | None: ...


class ResponseStream(Protocol):
    """A request's responses as they come: ``(response or error, final)`` pairs, the last
    final. ``decoupled`` is false for a single answer; ``abandon`` says the reader reads no
    more (the work still owed may stop); ``map_responses`` hands each response out through
    ``change`` (an error it raises becomes that response's error)."""

    decoupled: bool

    def __aiter__(self) -> ResponseStream: ...

    async def __anext__(self) -> tuple[InferResponse | InferdError | None, bool]: ...

    def map_responses(self, change: Callable[[InferResponse], InferResponse]) -> None: ...

    def abandon(self) -> None: ...


class DataPlane(Protocol):
    """The protocol-agnostic server a frontend adapts its protocol to (the kernel's
    ``inferd.kernel.dataplane.data_plane.DataPlane``): ``handle`` answers any request message
    with its reply (an ``ErrorReply`` for a failure), ``stream`` starts an inference and
    returns its responses."""

    @property
    def tracer(self) -> RequestTracer: ...

    async def handle(self, request: Message) -> Message: ...

    async def stream(self, request: InferRequest) -> ResponseStream: ...


class Settings(Protocol):
    """What a frontend reads of the server's settings (``inferd.kernel.settings.Settings``):
    ``options``, the values of the flags plugins declared (``inferd_add_options``) by their
    ``dest``, and ``exit_timeout_secs``, how long requests in flight get at shutdown."""

    @property
    def options(self) -> dict[str, Any]: ...

    @property
    def exit_timeout_secs(self) -> float: ...


class Frontend(abc.ABC):
    name: str = ""

    def __init__(self, dataplane: DataPlane, settings: Settings) -> None:
        self.dataplane = dataplane
        self.settings = settings

    @abc.abstractmethod
    async def serve(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        """Bind, call ``task_status.started(address)`` once accepting, then serve until
        cancelled. A bind failure raises, which stops the server's start-up."""

    async def stop_accepting(self) -> None:
        """Refuse or stop reading new requests; requests already taken keep going."""


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """``entry`` is ``"package.module:FrontendClass"``, imported when the server starts.
    ``enabled_option`` names a boolean ``Settings.options`` key that can turn it off."""

    name: str
    entry: str
    enabled_option: str = ""

    def load_class(self) -> type[Frontend]:
        frontend_class: type[Frontend] = load_entry(self.entry, Frontend, "frontend")
        return frontend_class


class FrontendRegistry(Registry[FrontendSpec]):
    """Filled by ``inferd_register_frontends`` hooks: ``registry.add(FrontendSpec(...))``.
    The server starts frontends in registration order."""

    kind = "frontend"
