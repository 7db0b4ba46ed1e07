"""Triton's trace extension on the wire: ``GET/POST v2[/models/<m>]/trace/setting`` and gRPC
``TraceSetting``.

Turns the data plane's two messages (``TraceSettingRequest``, ``TraceSettingReply``, in
``inferd.protocols.messages``) to and from the wire: an update read from an HTTP JSON body or
a gRPC settings map with Triton's setting names and error messages, the settings written back
in either form (every value a string, the level a list of strings). A name that is no setting
is ignored, as Triton ignores it; a bad value of a setting refuses the update whole, before
anything changes. Pure: no I/O, no state; the settings themselves live in
``inferd.kernel.observability.tracing``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from inferd.protocols.errors import InvalidArgument, Unsupported
from inferd.protocols.json_bodies import check_nesting
from inferd.protocols.messages import TraceSettingReply, TraceSettingRequest

LEVELS = ("TIMESTAMPS", "TENSORS")
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
MIN_TRACE_COUNT = -1
SETTINGS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
FILE_NOT_UPDATABLE = "trace file location can not be updated through network protocol"


# ------------------------------------------------------------------------------ decoding


def _level(values: Sequence[str]) -> tuple[str, ...]:
    if "OFF" in values:
        if len(values) != 1:
            raise InvalidArgument("Expect only one trace level 'OFF' is specified")
        return ()
    unknown = [value for value in values if value not in LEVELS]
    if unknown:
        # Triton ignores a level it does not know; a typo would then change nothing silently.
        raise InvalidArgument(
            f"unknown trace level '{unknown[0]}': expected OFF, TIMESTAMPS or TENSORS")
    return tuple(level for level in LEVELS if level in values)


def _number(name: str, text: str, low: int, high: int, grpc: bool) -> int:
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits.isascii() or not digits.isdigit():
        raise InvalidArgument(f"Unable to parse '{name}', got: {text}")
    value = int(stripped)
    if name == "trace_count" and value < low:
        space = " " if grpc else ""
        raise InvalidArgument(
            f"Unable to parse 'trace_count'. Expecting value >= {low}, got:{space}{text}")
    if not low <= value <= high:
        raise InvalidArgument(
            f"Unable to parse '{name}', value is out of range [ {low}, {high} ], got: {text}")
    return value


_BOUNDS = {"trace_rate": (0, UINT32_MAX), "trace_count": (MIN_TRACE_COUNT, INT32_MAX),
           "log_frequency": (0, UINT32_MAX)}
_FIELDS = {"trace_level": "level", "trace_rate": "rate", "trace_count": "count",
           "log_frequency": "log_frequency"}


def _request(model: str, values: Mapping[str, Sequence[str] | None], grpc: bool
             ) -> TraceSettingRequest:
    if "trace_file" in values:
        raise Unsupported(FILE_NOT_UPDATABLE)
    fields: dict[str, Any] = {}
    clear = []
    for name, value in values.items():
        if name not in _FIELDS:
            continue
        if value is None:
            clear.append(name)
        elif name == "trace_level":
            fields["level"] = _level(value)
        elif len(value) != 1:
            raise InvalidArgument(f"expect only 1 value for '{name}'")
        else:
            low, high = _BOUNDS[name]
            fields[_FIELDS[name]] = _number(name, value[0], low, high, grpc)
    return TraceSettingRequest(model, True, clear=tuple(clear), **fields)


def decode_http_update(model: str, body: bytes | memoryview) -> TraceSettingRequest:
    """A ``POST`` body: a JSON object (or nothing) of setting names to strings, the level a
    list of strings, ``null`` clearing a setting."""
    text = bytes(body).strip()
    if not text:
        return TraceSettingRequest(model, True)
    failure = "failed to parse the trace setting request"
    check_nesting(text, failure)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InvalidArgument(f"{failure}: {error}") from None
    if not isinstance(document, dict):
        raise InvalidArgument("the trace setting request must be a JSON object")
    values: dict[str, Sequence[str] | None] = {}
    for name, value in document.items():
        if name not in _FIELDS and name != "trace_file":
            continue
        if value is None or name == "trace_file":
            values[name] = None
        elif name == "trace_level":
            if not isinstance(value, list) or not value or not all(
                    isinstance(item, str) for item in value):
                raise InvalidArgument(
                    "'trace_level' must be a non-empty array of strings (null clears it)")
            values[name] = value
        elif isinstance(value, str):
            values[name] = [value]
        else:
            raise InvalidArgument(
                f"'{name}' must be a string (null clears it), got {json.dumps(value)}")
    return _request(model, values, grpc=False)


def decode_grpc_request(request: Any) -> TraceSettingRequest:
    """A ``TraceSettingRequest`` protobuf: no settings reads, an empty value clears."""
    settings = request.settings
    if not settings:
        return TraceSettingRequest(request.model_name)
    values = {name: (list(entry.value) or None) for name, entry in settings.items()}
    return _request(request.model_name, values, grpc=True)


# ------------------------------------------------------------------------------ encoding


def encode_http_reply(reply: TraceSettingReply) -> bytes:
    document: dict[str, str | list[str]] = {}
    for name, values in reply.settings:
        document[name] = list(values) if name == "trace_level" or len(values) != 1 else values[0]
    return json.dumps(document, separators=(",", ":")).encode()


def encode_grpc_reply(reply: TraceSettingReply, response_class: Any) -> Any:
    response = response_class()
    for name, values in reply.settings:
        response.settings[name].value.extend(values)
    return response
