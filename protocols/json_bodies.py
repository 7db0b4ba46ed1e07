"""Strict JSON bodies for the REST codecs: parsing a client's document with every problem an
``InvalidArgument`` naming it, the small checks of its values every codec repeats (an object,
a boolean, a non-negative integer, no unknown fields), and compact writing, ``{"error": ...}``
included. Pure: no sockets, no HTTP framing.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument

MAX_JSON_DEPTH = 64


def parse_json(body: bytes | memoryview, what: str) -> Any:
    """The JSON document of ``body`` (an empty body is ``None``); ``what`` names it in errors."""
    if not len(body):
        return None
    try:
        return json.loads(body if isinstance(body, bytes) else bytes(body))
    except RecursionError:
        raise InvalidArgument(
            f"malformed {what}: JSON nesting deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"malformed {what}: not UTF-8 text ({error.reason})") from None
    except ValueError as error:
        raise InvalidArgument(f"malformed {what}: invalid JSON ({error})") from None


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object, not {json_type(value)}")
    return value


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def no_unknown_fields(document: dict[str, Any], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(document) - known)
    if unknown:
        names = ", ".join(f"'{name}'" for name in unknown)
        raise InvalidArgument(f"unknown field {names} in {what}")


def json_boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a boolean, not {json_type(value)}")
    return value


def non_negative_int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {value!r}")
    return value


def check_sequence_parameters(parameters: dict[str, Any]) -> None:
    """Triton's types for the sequence extension's request parameters, in its words: a
    uint64 or a string ``sequence_id``, boolean ``sequence_start``/``sequence_end``
    (Triton answers 500 for these; a client's mistake is a 400 here)."""
    if "sequence_id" in parameters:
        value = parameters["sequence_id"]
        if not isinstance(value, str) and (type(value) is not int or not 0 <= value < 2**64):
            raise InvalidArgument(
                "Unable to parse 'sequence_id': attempt to access JSON non-string as string")
    for key in ("sequence_start", "sequence_end"):
        if key in parameters and not isinstance(parameters[key], bool):
            raise InvalidArgument(
                f"Unable to parse '{key}': attempt to access JSON non-boolean as boolean")


def dumps(document: Any) -> bytes:
    """Compact JSON; values JSON cannot hold (bytes, numpy scalars) are printed as text. A NaN
    or infinity here is a bug (tensors spell theirs out first): it raises ``ValueError``
    rather than send what strict parsers refuse."""
    return _ENCODER.encode(document).encode("utf-8")


def _printable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, tuple):
        return list(value)
    return str(value)


# One encoder for every body: json.dumps given any option builds a new one per call, a few
# microseconds of every response.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_printable, allow_nan=False)


def encode_error(message: str) -> bytes:
    return dumps({"error": message})
