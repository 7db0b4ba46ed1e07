"""What a log line knows about the work it was written for: the model, version and request id
of the request (or batch) being handled, carried in a context variable.

A frontend opens a ``RequestContext`` for each request it takes (``request_context``); the data
plane fills in the model, version and request id once it has the decoded request (``note``),
so a frontend's error line written after the data plane answered still names them, and every
line written meanwhile in the same task (or a worker thread started from it: anyio copies the
context) carries them in the json log format. An executor binds the model and version of the
batch it runs (``bound``), so a model's own lines name it. Holds only names and ids, never
tensor data. No I/O.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass

__all__ = ["CURRENT", "RequestContext", "current", "note", "request_context"]


@dataclass(slots=True)
class RequestContext:
    """Mutable on purpose: the data plane fills in what the frontend could not know yet."""

    protocol: str = ""  # HTTP, gRPC, zmq; "" outside a frontend
    endpoint: str = ""  # the handler, RPC or message kind
    model: str = ""
    version: str = ""
    request_id: str = ""

    def fields(self) -> dict[str, str]:
        """The non-empty ones, as a json log line names them."""
        found = {"model": self.model, "version": self.version, "request_id": self.request_id}
        return {name: value for name, value in found.items() if value}


CURRENT: ContextVar[RequestContext | None] = ContextVar("inferd_request", default=None)


def current() -> RequestContext | None:
    return CURRENT.get()


class _Current:
    """Makes a context current for a ``with`` block. A class, not a generator: it runs once
    per request and per batch."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: RequestContext) -> None:
        self._context = context
        self._token: Token[RequestContext | None] | None = None

    def __enter__(self) -> RequestContext:
        self._token = CURRENT.set(self._context)
        return self._context

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            CURRENT.reset(self._token)


def request_context(protocol: str, endpoint: str) -> _Current:
    """``with request_context(...)``: a fresh context for one request a frontend took."""
    return _Current(RequestContext(protocol, endpoint))


def bound(model: str, version: str | int) -> _Current:
    """``with bound(model, version)``: lines written in the block name ``model`` and
    ``version`` (an executor's batch)."""
    return _Current(RequestContext(model=model, version=str(version)))


def note(model: str, version: str | int = "", request_id: str = "") -> None:
    """The data plane's word on the request being handled (its name already checked)."""
    context = CURRENT.get()
    if context is not None:
        context.model = model
        context.version = str(version) if version != "" else ""
        context.request_id = request_id
