"""The one error hierarchy of inferd, its one mapping to HTTP status and gRPC code, and the
one place an exception becomes a wire ``Failure``.

Every failure that crosses an actor, process or network boundary is an ``InferdError`` with an
``ErrorCode``; frontends turn the code into a status with ``http_status``/``grpc_status_name``
and nothing else. ``to_failure`` turns any exception into the ``Failure`` reply a peer
receives, ``InferdError.from_code`` turns a received one back. Owns no I/O.
"""

from __future__ import annotations

import enum

from inferd.protocols.messages import Failure

SHUTTING_DOWN = "server is shutting down"
"""What every frontend and actor answers (``Unavailable``: HTTP 503, gRPC UNAVAILABLE) to a
new request once the server has begun to stop."""


class ErrorCode(str, enum.Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    INTERNAL = "INTERNAL"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    ALREADY_EXISTS = "ALREADY_EXISTS"


# code -> (HTTP status, gRPC status code name); SPEC 3.4.
_STATUS: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.INVALID_ARGUMENT: (400, "INVALID_ARGUMENT"),
    ErrorCode.NOT_FOUND: (404, "NOT_FOUND"),
    ErrorCode.UNAVAILABLE: (503, "UNAVAILABLE"),
    ErrorCode.UNSUPPORTED: (501, "UNIMPLEMENTED"),
    ErrorCode.INTERNAL: (500, "INTERNAL"),
    ErrorCode.DEADLINE_EXCEEDED: (503, "UNAVAILABLE"),
    ErrorCode.ALREADY_EXISTS: (400, "ALREADY_EXISTS"),
}


def http_status(code: ErrorCode) -> int:
    return _STATUS[code][0]


def grpc_status_name(code: ErrorCode) -> str:
    return _STATUS[code][1]


class InferdError(Exception):
    """Base of every error inferd reports; ``code`` decides the status a client sees."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @staticmethod
    def from_code(code: ErrorCode | str, message: str) -> InferdError:
        """Rebuild the most specific error class for a code received over the wire."""
        code = ErrorCode(code)
        error_class = _BY_CODE.get(code)
        if error_class is not None:
            return error_class(message)
        error = InferdError(message)
        error.code = code
        return error


class InvalidArgument(InferdError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(InferdError):
    code = ErrorCode.NOT_FOUND


class Unavailable(InferdError):
    code = ErrorCode.UNAVAILABLE


class Unsupported(InferdError):
    code = ErrorCode.UNSUPPORTED


class DecoupledNotStreamed(Unsupported):
    """A call that expects one response, to a decoupled model; a frontend says which of its
    endpoints cannot serve it (``endpoint_message``), in Triton's words."""

    def __init__(self, model: str) -> None:
        super().__init__(f"model '{model}' is decoupled: it can only be called through a "
                         "streaming endpoint")
        self.model = model

    @staticmethod
    def endpoint_message(endpoint: str) -> str:
        return f"{endpoint} doesn't support models with decoupled transaction policy"


class Internal(InferdError):
    code = ErrorCode.INTERNAL


class DeadlineExceeded(InferdError):
    """An ask got no reply before its deadline."""

    code = ErrorCode.DEADLINE_EXCEEDED


class ActorGone(Unavailable):
    """The peer of an ask went away (its process died or it stopped) before replying."""


class ExecutorCrashed(ActorGone):
    """An executor process died with this request in flight; the executor is restarted."""


def as_inferd_error(error: BaseException) -> InferdError:
    """An ``InferdError`` as it is; anything else (a bug, or a backend's own exception) an
    ``Internal`` error naming its type: ``"ValueError: ..."``."""
    if isinstance(error, InferdError):
        return error
    return Internal(f"{type(error).__name__}: {error}")


def to_failure(error: BaseException) -> Failure:
    """The wire reply for ``error``: its code and message (``as_inferd_error``)."""
    known = as_inferd_error(error)
    return Failure(known.code.value, known.message)


_BY_CODE: dict[ErrorCode, type[InferdError]] = {
    ErrorCode.INVALID_ARGUMENT: InvalidArgument,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.UNAVAILABLE: Unavailable,
    ErrorCode.UNSUPPORTED: Unsupported,
    ErrorCode.INTERNAL: Internal,
    ErrorCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}
