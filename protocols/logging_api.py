"""Triton's logging extension on the wire: ``GET/POST v2/logging`` bodies and gRPC
``LogSettings`` messages to a ``LogSettingsRequest``, and a ``LogSettingsReply`` back.

Owns the six setting names, the type each takes and Triton's words for a wrong one, so both
frontends refuse the same updates: ``log_info``, ``log_warning`` and ``log_error`` booleans,
``log_verbose_level`` a whole number from 0, ``log_format`` ``default``, ``ISO8601`` or
(inferd's) ``json``, ``log_file`` a path. A JSON ``null`` leaves a setting as it is, and an
unknown setting is ignored (both as Triton). Where Triton answers a client's mistake with a
5xx (a wrong type, an unknown format) or wraps a number silently (a ``log_verbose_level``
above int32's), the refusal is a 400 here. Whether ``log_file`` may change at all is the
server's decision, not the codec's. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.json_bodies import dumps, parse_json
from inferd.protocols.messages import LogSettingsReply, LogSettingsRequest

# Triton knows the first two; json (one object per line) is inferd's.
LOG_FORMATS = ("default", "ISO8601", "json")
SETTING_NAMES = ("log_file", "log_info", "log_warning", "log_error", "log_verbose_level",
                 "log_format")
_BOOLEANS = frozenset({"log_info", "log_warning", "log_error"})
_STRINGS = frozenset({"log_file", "log_format"})
# Triton answers a log_file update so (UNSUPPORTED: 501 / UNIMPLEMENTED).
LOG_FILE_REFUSED = "log file location can not be updated through network protocol"
# gRPC's words for log_verbose_level are Triton's, though the field is a uint32.
_EXPECTED = {"boolean": "boolean", "integer": "int32", "string": "string"}


def _kind(name: str) -> str:
    return "boolean" if name in _BOOLEANS else "string" if name in _STRINGS else "integer"


def _checked(name: str, value: bool | int | str, format_flag: str) -> bool | int | str:
    """``value`` for ``name`` if it is of the setting's type, else Triton's refusal."""
    kind = _kind(name)
    fits = {"boolean": isinstance(value, bool),
            "integer": type(value) is int and 0 <= value < 2**31,
            "string": isinstance(value, str)}[kind]
    if not fits:
        raise InvalidArgument(f"expect {_EXPECTED[kind]} for '{name}'")
    if name == "log_format" and value not in LOG_FORMATS:
        raise InvalidArgument(f"invalid argument for {format_flag}, got: {value}")
    return value


# ------------------------------------------------------------------------------------ HTTP


def decode_http_request(body: bytes | memoryview) -> LogSettingsRequest:
    """The update in a ``POST v2/logging`` body (empty, ``{}`` or all ``null``: none)."""
    document = parse_json(body, "log settings request")
    if document is None:
        return LogSettingsRequest()
    if not isinstance(document, dict):
        raise InvalidArgument("the log settings request must be a JSON object")
    updates: dict[str, bool | int | str] = {}
    for name, value in document.items():
        if name in SETTING_NAMES and value is not None:
            updates[name] = _checked(name, value, "--log_format")
    return LogSettingsRequest(updates)


def encode_http_reply(reply: LogSettingsReply) -> bytes:
    encoded: bytes = dumps({name: getattr(reply, name) for name in SETTING_NAMES})
    return encoded


# ------------------------------------------------------------------------------------ gRPC


def decode_grpc_request(request: Any) -> LogSettingsRequest:
    """The update in a ``LogSettingsRequest`` protobuf (no settings: none)."""
    updates: dict[str, bool | int | str] = {}
    for name in sorted(request.settings):
        if name not in SETTING_NAMES:
            continue  # as Triton
        setting = request.settings[name]
        choice = setting.WhichOneof("parameter_choice")
        if choice is None:
            continue  # a value with nothing set: as JSON's null
        updates[name] = _checked(name, getattr(setting, choice), "log_format")
    return LogSettingsRequest(updates)


def encode_grpc_reply(reply: LogSettingsReply) -> Any:
    response = service_pb2.LogSettingsResponse()
    for name in SETTING_NAMES:
        value = getattr(reply, name)
        setting = response.settings[name]
        if isinstance(value, bool):
            setting.bool_param = value
        elif isinstance(value, int):
            setting.uint32_param = value
        else:
            setting.string_param = value
    return response
