"""A scanner for the JSON header of the infer request every binary-tensor client sends
(tritonclient, perf_analyzer): ``scan_plain_infer_request`` reads that one shape straight
into a ``PlainInferHeader``, without building the document's dictionaries and lists and
walking them, and leaves everything else to the full parser (``kserve_http``).

The plain shape: an object with ``inputs`` (each exactly ``name``, ``shape``, ``datatype``
and ``parameters`` holding only ``binary_data_size``), optionally ``outputs`` (each
``name`` and optionally ``parameters`` holding only ``binary_data``), ``id`` and
``parameters`` holding only ``binary_data_output``; strings without escapes or control
characters, integers without sign, fraction or exponent, JSON whitespace anywhere JSON
allows it, each key at most once. Anything else, well-formed or not, is ``None``: the
full parser then gives its result or its error, so this scan never decides an error.
Compiled with mypyc (setup.py's ``COMPILED``); pure: strings in, tuples out.
"""

from __future__ import annotations

from typing import Final

# The longest digit run read here; longer ones (far past any real size) go to the full parser.
_MAX_DIGITS: Final = 18


class PlainInput:
    """An input whose bytes follow the header, ``binary_data_size`` of them."""

    __slots__ = ("binary_data_size", "datatype", "name", "shape")

    def __init__(self, name: str, shape: list[int], datatype: str,
                 binary_data_size: int) -> None:
        self.name = name
        self.shape = shape
        self.datatype = datatype
        self.binary_data_size = binary_data_size


class PlainInferHeader:
    """The plain header's fields; ``outputs`` pairs each name with its ``binary_data``."""

    __slots__ = ("binary_data_output", "id", "inputs", "outputs")

    def __init__(self, request_id: str, inputs: list[PlainInput],
                 outputs: list[tuple[str, bool]], binary_data_output: bool) -> None:
        self.id = request_id
        self.inputs = inputs
        self.outputs = outputs
        self.binary_data_output = binary_data_output


class _NotPlain(Exception):
    """The text holds something this scan leaves to the full parser."""


def scan_plain_infer_request(header: bytes) -> PlainInferHeader | None:
    """The plain header ``header`` holds, or None when it is anything else."""
    try:
        return _Scanner(header).request()
    except (_NotPlain, UnicodeDecodeError):
        return None


# The bytes the scan compares with (Final: compiled, each is a constant, not a lookup).
_SPACE: Final = 0x20
_TAB: Final = 0x09
_LF: Final = 0x0A
_CR: Final = 0x0D
_QUOTE: Final = 0x22
_BACKSLASH: Final = 0x5C
_ZERO: Final = 0x30
_NINE: Final = 0x39
_DOT: Final = 0x2E
_LOWER_E: Final = 0x65
_UPPER_E: Final = 0x45
_OPEN_OBJECT: Final = 0x7B
_CLOSE_OBJECT: Final = 0x7D
_OPEN_ARRAY: Final = 0x5B
_CLOSE_ARRAY: Final = 0x5D
_COMMA: Final = 0x2C
_COLON: Final = 0x3A


class _Scanner:
    __slots__ = ("data", "end", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0
        self.end = len(data)

    def request(self) -> PlainInferHeader:
        request_id = ""
        inputs: list[PlainInput] | None = None
        outputs: list[tuple[str, bool]] = []
        binary_data_output = False
        seen: set[str] = set()
        self.expect(_OPEN_OBJECT)
        if not self.at(_CLOSE_OBJECT):
            while True:
                key = self.key(seen)
                if key == "inputs":
                    inputs = self.inputs()
                elif key == "outputs":
                    outputs = self.outputs()
                elif key == "id":
                    request_id = self.string()
                elif key == "parameters":
                    binary_data_output = self.boolean_object("binary_data_output")
                else:
                    raise _NotPlain()
                if not self.at(_COMMA):
                    break
            self.expect(_CLOSE_OBJECT)
        self.skip()
        if inputs is None or self.position != self.end:
            raise _NotPlain()
        return PlainInferHeader(request_id, inputs, outputs, binary_data_output)

    def inputs(self) -> list[PlainInput]:
        inputs: list[PlainInput] = []
        self.expect(_OPEN_ARRAY)
        if self.at(_CLOSE_ARRAY):
            return inputs
        while True:
            inputs.append(self.input())
            if not self.at(_COMMA):
                break
        self.expect(_CLOSE_ARRAY)
        return inputs

    def input(self) -> PlainInput:
        name = datatype = ""
        shape: list[int] = []
        size = -1
        seen: set[str] = set()
        self.expect(_OPEN_OBJECT)
        while True:
            key = self.key(seen)
            if key == "name":
                name = self.string()
            elif key == "datatype":
                datatype = self.string()
            elif key == "shape":
                shape = self.integers()
            elif key == "parameters":
                self.expect(_OPEN_OBJECT)
                if self.key() != "binary_data_size":
                    raise _NotPlain()
                size = self.integer()
                self.expect(_CLOSE_OBJECT)
            else:
                raise _NotPlain()
            if not self.at(_COMMA):
                break
        self.expect(_CLOSE_OBJECT)
        if len(seen) != 4:
            raise _NotPlain()
        return PlainInput(name, shape, datatype, size)

    def outputs(self) -> list[tuple[str, bool]]:
        outputs: list[tuple[str, bool]] = []
        self.expect(_OPEN_ARRAY)
        if self.at(_CLOSE_ARRAY):
            return outputs
        while True:
            name = ""
            binary = False
            seen: set[str] = set()
            self.expect(_OPEN_OBJECT)
            while True:
                key = self.key(seen)
                if key == "name":
                    name = self.string()
                elif key == "parameters":
                    binary = self.boolean_object("binary_data")
                else:
                    raise _NotPlain()
                if not self.at(_COMMA):
                    break
            self.expect(_CLOSE_OBJECT)
            if "name" not in seen:
                raise _NotPlain()
            outputs.append((name, binary))
            if not self.at(_COMMA):
                break
        self.expect(_CLOSE_ARRAY)
        return outputs

    def boolean_object(self, only: str) -> bool:
        """``{}`` (False) or ``{"<only>": true|false}``."""
        self.expect(_OPEN_OBJECT)
        if self.at(_CLOSE_OBJECT):
            return False
        if self.key() != only:
            raise _NotPlain()
        value = self.boolean()
        self.expect(_CLOSE_OBJECT)
        return value

    # ------------------------------------------------------------------ tokens

    def skip(self) -> None:
        data = self.data
        position = self.position
        end = self.end
        while position < end:
            byte = data[position]
            if byte != _SPACE and byte != _LF and byte != _CR and byte != _TAB:
                break
            position += 1
        self.position = position

    def at(self, mark: int) -> bool:
        """Consume ``mark`` (after whitespace) if it comes next."""
        self.skip()
        if self.position < self.end and self.data[self.position] == mark:
            self.position += 1
            return True
        return False

    def expect(self, mark: int) -> None:
        if not self.at(mark):
            raise _NotPlain()

    def key(self, seen: set[str] | None = None) -> str:
        """The next key of an object; ``seen`` (the keys before it) refuses a repeated one,
        which the full parser would take the last of."""
        key = self.string()
        if seen is not None:
            if key in seen:
                raise _NotPlain()
            seen.add(key)
        self.expect(_COLON)
        return key

    def string(self) -> str:
        self.expect(_QUOTE)
        data = self.data
        start = self.position
        position = start
        end = self.end
        while True:
            if position >= end:
                raise _NotPlain()
            byte = data[position]
            if byte == _QUOTE:
                break
            if byte < _SPACE or byte == _BACKSLASH:
                raise _NotPlain()  # escapes and control characters: the full parser's
            position += 1
        self.position = position + 1
        return data[start:position].decode("utf-8")

    def integer(self) -> int:
        self.skip()
        data = self.data
        start = self.position
        position = start
        end = self.end
        value = 0
        while position < end:
            byte = data[position]
            if byte < _ZERO or byte > _NINE:
                break
            value = value * 10 + (byte - _ZERO)
            position += 1
        digits = position - start
        if digits == 0 or digits > _MAX_DIGITS or (digits > 1 and data[start] == _ZERO):
            raise _NotPlain()
        if position < end:
            byte = data[position]
            if byte == _DOT or byte == _LOWER_E or byte == _UPPER_E:
                raise _NotPlain()
        self.position = position
        return value

    def integers(self) -> list[int]:
        values: list[int] = []
        self.expect(_OPEN_ARRAY)
        if self.at(_CLOSE_ARRAY):
            return values
        while True:
            values.append(self.integer())
            if not self.at(_COMMA):
                break
        self.expect(_CLOSE_ARRAY)
        return values

    def boolean(self) -> bool:
        self.skip()
        data = self.data
        position = self.position
        if data[position : position + 4] == b"true":
            self.position = position + 4
            return True
        if data[position : position + 5] == b"false":
            self.position = position + 5
            return False
        raise _NotPlain()
