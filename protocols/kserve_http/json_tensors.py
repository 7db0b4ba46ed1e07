"""Tensor data as JSON, both ways: a request's ``data`` array (nested or flat, checked
against the datatype's range and the shape's element count, NaN and infinities accepted in
both spellings) into a ``Tensor``, and a ``Tensor`` into the flat list of values a response's
``data`` holds. Shared by the KServe REST infer codec and Triton's generate extension. Pure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.json_bodies import MAX_JSON_DEPTH, json_type
from inferd.protocols.messages import Tensor
from inferd.protocols.tensors import from_numpy, numpy_dtype

_INTEGER_KINDS = "iu"
_FLOAT_DATATYPES = frozenset({"FP16", "BF16", "FP32", "FP64"})
# JSON has no NaN or infinities. Triton writes them as the bare words NaN, Infinity and
# -Infinity, which strict parsers refuse; inferd writes these strings instead, which are valid
# JSON and which tritonclient's ``as_numpy`` (numpy) turns back into the same floats. Both
# forms are accepted in requests.
_NON_FINITE_TEXT = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def tensor_from_json(
    name: str, datatype: str, dims: tuple[int, ...], count: int, data: Any, max_input_size: int
) -> Tensor:
    what = f"input '{name}'"
    if not isinstance(data, list):
        data = [data]  # a lone value for a one-element tensor
    if datatype == "BYTES":
        values = _flat_strings(data, what)
        if len(values) != count:
            raise InvalidArgument(_count_mismatch(what, len(values), dims, count))
        if sum(len(v) + 4 for v in values) > max_input_size:
            raise InvalidArgument(
                f"{what} holds more than the maximum input size of {max_input_size} bytes"
            )
        array = np.empty(count, dtype=object)
        array[:] = values
        return Tensor(name, datatype, dims, array.reshape(dims))
    parsed = _json_array(what, data)
    if parsed.dtype.kind in "UO" and datatype in _FLOAT_DATATYPES:
        parsed = _json_array(what, _spelled_out_floats(data))
    if parsed.size != count:
        raise InvalidArgument(_count_mismatch(what, parsed.size, dims, count))
    if parsed.dtype.kind in "fO" and datatype in ("UINT64", "INT64"):
        # numpy turns integers past int64 mixed with others into floats or objects.
        parsed = _exact_integers(what, datatype, _flatten(data, what), parsed.shape)
    _check_json_values(what, datatype, parsed)
    flat = parsed.reshape(dims)
    if datatype == "BF16":
        return from_numpy(name, flat.astype(np.float32), "BF16")
    return Tensor(name, datatype, dims, flat.astype(numpy_dtype(datatype)))


def _json_array(what: str, data: list[Any]) -> np.ndarray:
    try:
        return np.array(data)
    except ValueError as error:
        raise InvalidArgument(
            f"{what} 'data' is not a rectangular array of values: {error}"
        ) from None


def _spelled_out_floats(data: list[Any]) -> list[Any]:
    """``data`` with the strings "NaN", "Infinity" and "-Infinity" (at any depth) as floats."""
    return [
        _NON_FINITE_TEXT.get(item, item) if isinstance(item, str)
        else _spelled_out_floats(item) if isinstance(item, list) else item
        for item in data
    ]


def _count_mismatch(what: str, got: int, dims: tuple[int, ...], count: int) -> str:
    return f"{what} has {got} elements in 'data' but its shape {list(dims)} needs {count}"


def _check_json_values(what: str, datatype: str, parsed: np.ndarray) -> None:
    if parsed.size == 0:
        return
    kind = parsed.dtype.kind
    if datatype == "BOOL":
        if kind != "b":
            raise InvalidArgument(f"{what} of datatype BOOL needs true/false values in 'data'")
        return
    if datatype in _FLOAT_DATATYPES:
        if kind not in "iuf":
            raise InvalidArgument(f"{what} of datatype {datatype} needs numbers in 'data'")
        return
    if kind not in _INTEGER_KINDS:
        raise InvalidArgument(f"{what} of datatype {datatype} needs integers in 'data'")
    limits = np.iinfo(numpy_dtype(datatype))
    low, high = int(parsed.min()), int(parsed.max())
    if low < limits.min or high > limits.max:
        bad = low if low < limits.min else high
        raise InvalidArgument(f"{what}: value {bad} is out of range for datatype {datatype}")


def _exact_integers(
    what: str, datatype: str, values: list[Any], shape: tuple[int, ...]
) -> np.ndarray:
    if not all(type(value) is int for value in values):
        raise InvalidArgument(f"{what} of datatype {datatype} needs integers in 'data'")
    limits = np.iinfo(numpy_dtype(datatype))
    for value in values:
        if not limits.min <= value <= limits.max:
            raise InvalidArgument(f"{what}: value {value} is out of range for datatype {datatype}")
    return np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)


def _flat_strings(data: list[Any], what: str) -> list[bytes]:
    """The strings of a (nested) JSON array in order, encoded as UTF-8."""
    values = []
    for item in _flatten(data, what):
        if not isinstance(item, str):
            raise InvalidArgument(
                f"{what} of datatype BYTES needs strings in 'data', found {json_type(item)}"
            )
        values.append(item.encode("utf-8", errors="surrogatepass"))
    return values


def _flatten(data: list[Any], what: str) -> list[Any]:
    """The leaves of a (nested) JSON array in order, its nesting bounded."""
    leaves: list[Any] = []
    stack = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            if len(stack) >= MAX_JSON_DEPTH:
                raise InvalidArgument(
                    f"{what} 'data' is nested deeper than {MAX_JSON_DEPTH} levels"
                )
            stack.append(iter(item))
        else:
            leaves.append(item)
    return leaves


_END = object()


def json_values(tensor: Tensor) -> list[Any]:
    data = np.asarray(tensor.data)
    if tensor.datatype == "BYTES":
        texts: list[Any] = []
        for item in data.flat:
            raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
            try:
                texts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidArgument(
                    f"output '{tensor.name}' holds bytes that are not UTF-8 text, which JSON "
                    "cannot carry; request it with binary_data: true"
                ) from None
        return texts
    if tensor.datatype == "BF16":
        bits = data.astype("<u2").astype("<u4") << np.uint32(16)
        data = bits.view("<f4")
    elif tensor.datatype == "FP16":
        data = data.astype(np.float32)
    values: list[Any] = data.ravel().tolist()
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        floats: list[float] = values
        values = [v if math.isfinite(v) else _non_finite_text(v) for v in floats]
    return values


def _non_finite_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"
