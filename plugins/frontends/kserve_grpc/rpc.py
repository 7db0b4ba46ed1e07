"""How one unary RPC of the KServe gRPC frontend ends: ``async with Rpc(context, name):`` sets
the request's log context and, when the RPC raised, aborts it with the gRPC status the
error's code maps to (``inferd.protocols.errors``), INTERNAL for any other exception, and
writes the request's one error line (``inferd.kernel.sdk.request_log``); with verbose
logging each call's opening line is Triton's (``log_call``). The one place this
frontend turns exceptions into statuses; a stream request's failure is a response instead
(``streams``). It knows nothing of what the RPC does.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.request_log import request_failed
from inferd.protocols.errors import InferdError, grpc_status_name, http_status

log = logging.getLogger(__name__)
# Triton's handler names where they are not the RPC's own, for its verbose line per call.
_HANDLER_NAMES = {"ModelInfer": "ModelInferHandler", "ModelStreamInfer": "ModelStreamInferHandler",
                  "LogSettings": "Logging", "TraceSetting": "Trace"}
_call_ids = itertools.count()


def log_call(name: str) -> None:
    """With ``log_verbose_level`` 1 and up, the line Triton logs as each call starts."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("Process for %s, rpc_ok=1, %d step START", _HANDLER_NAMES.get(name, name),
                  next(_call_ids))


class Rpc:
    """``async with Rpc(context, name):`` ends the RPC with the status an error's code maps
    to, and writes the request's one error line."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any], name: str) -> None:
        self._context = context
        self._name = name
        self._token: contextvars.Token[log_context.RequestContext | None] | None = None

    async def __aenter__(self) -> None:
        log_call(self._name)
        self._token = log_context.CURRENT.set(log_context.RequestContext("gRPC", self._name))

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if error is None or isinstance(error, grpc.aio.AbortError):
                return
            if isinstance(error, InferdError):
                name = grpc_status_name(error.code)
                request_failed(http_status(error.code), error.message, wire_status=name)
                code = grpc.StatusCode[name]
                await self._context.abort(code, error.message)
            if isinstance(error, Exception):
                message = f"{type(error).__name__}: {error}"
                request_failed(500, message, wire_status="INTERNAL", exc_info=error)
                await self._context.abort(grpc.StatusCode.INTERNAL, message)
        finally:
            if self._token is not None:
                log_context.CURRENT.reset(self._token)
