"""Strict JSON bodies for the REST codecs: parsing a client's document with every problem an
``InvalidArgument`` naming it, its nesting bounded (``check_nesting``, before the parser
recurses), the small checks of its values every codec repeats (an object, a boolean, a
non-negative integer, no unknown fields), and compact writing, ``{"error": ...}`` included.
Pure: no sockets, no HTTP framing.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument

# Arrays and objects open at once. The deepest real request is an infer request with nested
# tensor data: three levels of request around one per dimension, and real models take a
# handful of dimensions (tritonclient sends data flat); a model config sent with a load nests
# about ten. json's parser recurses once per level and would otherwise stop only at the
# interpreter's recursion limit, a thousand.
MAX_JSON_DEPTH = 64
# The bytes that make nesting: quotes (a bracket in a string is text), brackets and braces.
_STRUCTURE = frozenset(b'"[]{}')
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in _STRUCTURE)
_LEVEL_STEP = np.zeros(256, dtype=np.int8)
_LEVEL_STEP[list(b"[{")] = 1
_LEVEL_STEP[list(b"]}")] = -1
_QUOTE = ord('"')
# How much of a document's structure is measured at once: bounds the scan's own memory.
_SCAN_BLOCK = 1 << 20


def parse_json(body: bytes | memoryview, what: str) -> Any:
    """The JSON document of ``body`` (an empty body is ``None``); ``what`` names it in errors."""
    if not len(body):
        return None
    text = body if isinstance(body, bytes) else bytes(body)
    check_nesting(text, f"malformed {what}")
    try:
        return json.loads(text)
    except RecursionError:
        # Only a call stack already deep when parsing began gets here (check_nesting passed).
        raise InvalidArgument(
            f"malformed {what}: JSON nesting deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"malformed {what}: not UTF-8 text ({error.reason})") from None
    except ValueError as error:
        raise InvalidArgument(f"malformed {what}: invalid JSON ({error})") from None


def check_nesting(text: bytes, failure: str) -> None:
    """Refuse ``text`` if a JSON parser would find more than ``MAX_JSON_DEPTH`` arrays and
    objects open at once, before any parser recurses into it; ``failure`` opens the error
    message as the caller's other parse errors open theirs."""
    if nested_deeper_than(text, MAX_JSON_DEPTH):
        raise InvalidArgument(f"{failure}: JSON nesting deeper than {MAX_JSON_DEPTH} levels")


def nested_deeper_than(text: bytes, limit: int) -> bool:
    """Whether the JSON ``text`` has more than ``limit`` arrays and objects open at once.

    Linear, without recursion, and exact for a valid document; in an invalid one it counts
    as a parser nests up to its first error and may count more after it. Most bodies have
    too few brackets to need more than counting them; the rest are measured from their
    structural bytes alone, a block at a time in numpy, never a byte at a time in Python."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    encoding = json.detect_encoding(text)
    if encoding.startswith(("utf-16", "utf-32")):  # json.loads reads these too
        try:
            text = text.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        except UnicodeError:
            return False  # not text: json.loads refuses it before it nests
    if b"\\" in text:
        # In a string an escape is a backslash and the byte after it, pairing a run of
        # backslashes from its left; outside one a backslash is an error. With the escaped
        # backslashes gone, every backslash before a quote escapes it.
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Two adjacent quotes enclose no bracket: dropping them leaves every other byte in or out
    # of a string as it was, and a document whose strings hold no brackets with no quotes.
    marks = text.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    quoted = _QUOTE in marks
    depth = 0
    in_string = 0
    for start in range(0, len(marks), _SCAN_BLOCK):
        codes = np.frombuffer(marks, np.uint8, min(_SCAN_BLOCK, len(marks) - start), start)
        steps = _LEVEL_STEP[codes].astype(np.int32)
        if quoted:
            quotes = np.cumsum(codes == _QUOTE, dtype=np.int32) + in_string
            steps[(quotes & 1).astype(bool)] = 0  # a bracket in a string is text
            in_string = int(quotes[-1]) & 1
        levels = np.cumsum(steps, dtype=np.int32) + depth
        if int(levels.max()) > limit:
            return True
        depth = int(levels[-1])
    return False


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
