"""``pb_utils.TritonError`` and ``pb_utils.TritonModelException``, and how Triton's error codes
map to inferd's.

A ``TritonError`` in a response fails that one request with its message and the status
Triton's frontends give its code; inferd errors coming back from a BLS call become
``TritonError``s the same way round. An exception out of model code is worded as Triton's
python backend words it (``exception_text``). Pure: no I/O.
"""

from __future__ import annotations

import asyncio
import enum
import traceback
from itertools import dropwhile
from pathlib import Path

from inferd.protocols.errors import ErrorCode, InferdError


class TritonModelException(Exception):
    """Raised by ``pb_utils`` when model code misuses it; a model may raise it too."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code numbers."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """The error of one response: ``InferenceResponse(error=TritonError("why", code))``."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = _ErrorCode.INTERNAL) -> None:
        if message is None or code is None:
            raise TypeError("TritonError needs a message and a code, not None")
        self._message = str(message)
        self._code = _ErrorCode(code)

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"

    def to_inferd(self) -> InferdError:
        """The inferd error a client sees: the message as given, and the HTTP status and gRPC
        code Triton gives this error code (UNKNOWN and CANCELLED are 400s, as in Triton's
        HTTP frontend)."""
        return InferdError.from_code(_INFERD_CODES[self._code], self._message)

    @classmethod
    def from_inferd(cls, error: InferdError) -> TritonError:
        return cls(error.message, _TRITON_CODES.get(error.code, _ErrorCode.INTERNAL))


_INFERD_CODES: dict[_ErrorCode, ErrorCode] = {
    _ErrorCode.UNKNOWN: ErrorCode.INVALID_ARGUMENT,
    _ErrorCode.INTERNAL: ErrorCode.INTERNAL,
    _ErrorCode.NOT_FOUND: ErrorCode.NOT_FOUND,
    _ErrorCode.INVALID_ARG: ErrorCode.INVALID_ARGUMENT,
    _ErrorCode.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    _ErrorCode.UNSUPPORTED: ErrorCode.UNSUPPORTED,
    _ErrorCode.ALREADY_EXISTS: ErrorCode.ALREADY_EXISTS,
    _ErrorCode.CANCELLED: ErrorCode.INVALID_ARGUMENT,
}
_TRITON_CODES: dict[ErrorCode, _ErrorCode] = {
    ErrorCode.INVALID_ARGUMENT: _ErrorCode.INVALID_ARG,
    ErrorCode.NOT_FOUND: _ErrorCode.NOT_FOUND,
    ErrorCode.UNAVAILABLE: _ErrorCode.UNAVAILABLE,
    ErrorCode.UNSUPPORTED: _ErrorCode.UNSUPPORTED,
    ErrorCode.INTERNAL: _ErrorCode.INTERNAL,
    ErrorCode.DEADLINE_EXCEEDED: _ErrorCode.UNAVAILABLE,
    ErrorCode.ALREADY_EXISTS: _ErrorCode.ALREADY_EXISTS,
}


# The frames above the model's own: this backend's and the event loop's of ``async def``.
_SERVER_FOLDERS = tuple({str(Path(__file__).parent), str(Path(__file__).resolve().parent),
                         str(Path(asyncio.__file__).parent)})


def exception_text(error: BaseException) -> str:
    """``error`` as Triton's python backend reports an exception out of model code (the
    text pybind11 gives it): ``Type: message``, then "At:" and one line per frame of the
    model's code, innermost first, as ``  file(line): function``."""
    text = f"{type(error).__name__}: {error}" if str(error) else (
        f"{type(error).__name__}: <EMPTY MESSAGE>")
    frames = list(dropwhile(lambda frame: frame.filename.startswith(_SERVER_FOLDERS),
                            traceback.extract_tb(error.__traceback__)))
    if frames:
        text += "\n\nAt:\n" + "".join(
            f"  {frame.filename}({frame.lineno}): {frame.name}\n" for frame in reversed(frames))
    return text
