"""Tensor datatypes and the raw byte form of tensors.

Owns the KServe datatype names and their numpy forms, the Triton config type names, the BYTES
element encoding (a 4-byte little-endian length before each element) and the conversion of a
``Tensor`` to and from one contiguous little-endian buffer, without copying where the layout
allows it. Every rejection is an ``InvalidArgument`` whose message names what was wrong.
Pure: no I/O, no sockets, no knowledge of where the bytes travel.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import Tensor

_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    # numpy has no bfloat16: the raw bits travel in a uint16 array.
    "BF16": np.dtype("<u2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}

DATATYPES: tuple[str, ...] = tuple(_NUMPY_DTYPES)
"""Every KServe datatype name inferd accepts."""

_ELEMENT_SIZES: dict[str, int | None] = {
    name: (None if name == "BYTES" else dtype.itemsize) for name, dtype in _NUMPY_DTYPES.items()
}

# (numpy kind, itemsize) -> datatype; BF16 is never inferred from uint16.
_DATATYPE_BY_KIND: dict[tuple[str, int], str] = {
    (dtype.kind, dtype.itemsize): name
    for name, dtype in _NUMPY_DTYPES.items()
    if name not in ("BF16", "BYTES")
}

_CONFIG_TYPE_BY_DATATYPE: dict[str, str] = {
    name: ("TYPE_STRING" if name == "BYTES" else f"TYPE_{name}") for name in _NUMPY_DTYPES
}
_DATATYPE_BY_CONFIG_TYPE: dict[str, str] = {
    config_type: name for name, config_type in _CONFIG_TYPE_BY_DATATYPE.items()
}

DEFAULT_MAX_INPUT_SIZE = 64 * 2**20
"""The default largest request of every frontend (``--<protocol>-max-input-size``), and so of
every input tensor decoded from one."""
_LENGTH_PREFIX = struct.Struct("<I")
_MAX_ELEMENT_BYTES = 2**32 - 1
# numpy refuses arrays whose byte size does not fit a signed 64-bit index.
_MAX_ARRAY_BYTES = 2**63 - 1


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The little-endian numpy dtype a datatype's values are held in."""
    try:
        return _NUMPY_DTYPES[datatype]
    except (KeyError, TypeError):
        raise InvalidArgument(f"unknown datatype {datatype!r}") from None


def element_size(datatype: str) -> int | None:
    """Bytes per element, or ``None`` for BYTES, whose elements vary in size."""
    try:
        return _ELEMENT_SIZES[datatype]
    except (KeyError, TypeError):
        raise InvalidArgument(f"unknown datatype {datatype!r}") from None


def datatype_of(array: np.ndarray) -> str:
    """The datatype matching a numpy array; object, bytes and str arrays are BYTES."""
    dtype = array.dtype
    if dtype.kind in "OSU":
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    datatype = _DATATYPE_BY_KIND.get((dtype.kind, dtype.itemsize))
    if datatype is None:
        raise InvalidArgument(f"numpy dtype {dtype} has no KServe datatype")
    return datatype


def config_type_to_datatype(config_type: str) -> str:
    """``TYPE_INT32`` -> ``INT32``; ``TYPE_STRING`` -> ``BYTES``."""
    try:
        return _DATATYPE_BY_CONFIG_TYPE[config_type]
    except (KeyError, TypeError):
        raise InvalidArgument(f"unknown config data type {config_type!r}") from None


def datatype_to_config_type(datatype: str) -> str:
    """``INT32`` -> ``TYPE_INT32``; ``BYTES`` -> ``TYPE_STRING``."""
    try:
        return _CONFIG_TYPE_BY_DATATYPE[datatype]
    except (KeyError, TypeError):
        raise InvalidArgument(f"unknown datatype {datatype!r}") from None


def _element_bytes(item: object) -> bytes | bytearray:
    if isinstance(item, (bytes, bytearray)):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    raise InvalidArgument(f"a BYTES element must be bytes or str, not {type(item).__name__}")


def serialize_bytes(array: np.ndarray | Sequence[Any]) -> bytes:
    """Each element, in C order, as a 4-byte little-endian length then its bytes; ``str``
    elements are encoded as UTF-8."""
    if not isinstance(array, np.ndarray):
        array = np.array(array, dtype=object)
    pack_length = _LENGTH_PREFIX.pack
    parts: list[bytes | bytearray] = []
    for item in array.flat:
        element = _element_bytes(item)
        if len(element) > _MAX_ELEMENT_BYTES:
            raise InvalidArgument(f"a BYTES element of {len(element)} bytes exceeds 4 GiB")
        parts.append(pack_length(len(element)))
        parts.append(element)
    return b"".join(parts)


def _byte_view(buffer: Any) -> memoryview:
    view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    if view.ndim != 1 or view.format not in ("B", "b", "c"):
        view = view.cast("B")
    return view


def deserialize_bytes(buffer: Any, count: int | None = None) -> np.ndarray:
    """The elements of a serialized BYTES buffer as a 1-D object array of ``bytes``.

    With ``count``, exactly that many elements must fill the buffer exactly; without, the
    buffer is read to its end.
    """
    try:
        view = _byte_view(buffer)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"BYTES data is not a contiguous buffer: {error}") from None
    total = view.nbytes
    if count is not None:
        if count < 0:
            raise InvalidArgument(f"BYTES element count {count} is negative")
        # Every element needs its length prefix, so a huge count is refused before any work.
        if count * _LENGTH_PREFIX.size > total:
            raise InvalidArgument(f"BYTES data of {total} bytes is too short for {count} elements")
    unpack_length = _LENGTH_PREFIX.unpack_from
    items: list[bytes] = []
    offset = 0
    while offset < total and (count is None or len(items) < count):
        if offset + _LENGTH_PREFIX.size > total:
            raise InvalidArgument(
                f"BYTES data is truncated: element {len(items)} has an incomplete length prefix"
            )
        (length,) = unpack_length(view, offset)
        offset += _LENGTH_PREFIX.size
        end = offset + length
        if end > total:
            raise InvalidArgument(
                f"BYTES data is truncated: element {len(items)} declares {length} bytes "
                f"but only {total - offset} remain"
            )
        items.append(bytes(view[offset:end]))
        offset = end
    if count is not None and len(items) != count:
        raise InvalidArgument(f"BYTES data holds {len(items)} elements, expected {count}")
    if offset != total:
        raise InvalidArgument(
            f"BYTES data has {total - offset} trailing bytes after {len(items)} elements"
        )
    result = np.empty(len(items), dtype=object)
    result[:] = items
    return result


def tensor_to_buffer(tensor: Tensor) -> memoryview | bytes:
    """The tensor's values as raw little-endian bytes in C order.

    A C-contiguous array already in the datatype's dtype is returned as a view of its own
    memory, so the array must not change until the bytes have been sent. Any other layout
    or byte order is copied once.
    """
    datatype = tensor.datatype
    data = tensor.data
    if data.shape != tuple(tensor.shape):
        raise InvalidArgument(
            f"tensor '{tensor.name}' has shape {list(tensor.shape)} "
            f"but its data has shape {list(data.shape)}"
        )
    if datatype == "BYTES":
        return serialize_bytes(data)
    expected = numpy_dtype(datatype)
    if data.dtype != expected:
        if data.dtype.itemsize != expected.itemsize or (
            data.dtype.kind != expected.kind and data.dtype.name != "bfloat16"
        ):
            raise InvalidArgument(
                f"tensor '{tensor.name}' has datatype {datatype} but its data is {data.dtype}"
            )
        # Same kind and width: only the byte order (or bfloat16's type object) differs.
        data = data.astype(expected) if data.dtype.kind == expected.kind else data.view(expected)
    if data.size == 0:
        return b""
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return data.data.cast("B")


def checked_shape(name: str, shape: Sequence[Any]) -> tuple[tuple[int, ...], int]:
    """``shape`` as a tuple of non-negative ints and its element count, refused when an
    array of that shape could not exist (checked before anything is allocated)."""
    dims = tuple(shape)
    count = 1
    for dim in dims:
        if type(dim) is not int or dim < 0:
            return _checked_unusual_shape(name, dims)
        count *= dim
    if count == 0:
        return _checked_unusual_shape(name, dims)
    # Checked with the widest element (8 bytes) so no datatype can overflow numpy's index.
    if count * 8 > _MAX_ARRAY_BYTES:
        raise InvalidArgument(f"tensor '{name}' shape {list(dims)} has too many elements")
    return dims, count


def _checked_unusual_shape(name: str, dims: tuple[Any, ...]) -> tuple[tuple[int, ...], int]:
    """The slow path of ``checked_shape``: numpy integers, bad dimensions, zero sizes."""
    nonzero_count = 1
    for dim in dims:
        if type(dim) is not int and (isinstance(dim, bool) or not isinstance(dim, np.integer)):
            raise InvalidArgument(f"tensor '{name}' has a non-integer dimension {dim!r}")
        if dim < 0:
            raise InvalidArgument(f"tensor '{name}' has a negative dimension in {list(dims)}")
        if dim:
            nonzero_count *= int(dim)
    # numpy refuses even an empty array whose other dimensions are too large.
    if nonzero_count * 8 > _MAX_ARRAY_BYTES:
        raise InvalidArgument(f"tensor '{name}' shape {list(dims)} has too many elements")
    int_dims = tuple(int(dim) for dim in dims)
    return int_dims, nonzero_count if 0 not in int_dims else 0


def tensor_from_buffer(name: str, datatype: str, shape: Sequence[Any], buffer: Any) -> Tensor:
    """A tensor over ``buffer``'s memory (no copy; read-only when the buffer is), after
    checking that its byte size is exactly what ``datatype`` and ``shape`` need. BYTES
    elements are parsed into a new object array."""
    dims, count = checked_shape(name, shape)
    if datatype == "BYTES":
        try:
            values = deserialize_bytes(buffer, count)
        except InvalidArgument as error:
            raise InvalidArgument(f"tensor '{name}': {error.message}") from None
        return Tensor(name, datatype, dims, values.reshape(dims))
    dtype = numpy_dtype(datatype)
    try:
        view = _byte_view(buffer)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"tensor '{name}' data is not a contiguous buffer: {error}") from None
    expected_bytes = count * dtype.itemsize
    if view.nbytes != expected_bytes:
        raise InvalidArgument(
            f"tensor '{name}' of datatype {datatype} and shape {list(dims)} needs "
            f"{expected_bytes} bytes, received {view.nbytes}"
        )
    data = np.frombuffer(view, dtype=dtype)
    return Tensor(name, datatype, dims, data if len(dims) == 1 else data.reshape(dims))


def _to_bfloat16_bits(array: np.ndarray) -> np.ndarray:
    """Round float values to the nearest bfloat16 (ties to even), keeping NaN a NaN."""
    bits = np.asarray(array, dtype="<f4").view("<u4")
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    is_nan = np.isnan(np.asarray(array, dtype="<f4"))
    quiet_nan = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(is_nan, quiet_nan, rounded).astype("<u2")


def _as_bytes_array(array: np.ndarray) -> np.ndarray:
    items = [bytes(_element_bytes(item)) for item in array.flat]
    result = np.empty(len(items), dtype=object)
    result[:] = items
    return result.reshape(array.shape)


def _looks_like_bytes(values: Any) -> bool:
    candidate = np.array(values, dtype=object)
    return candidate.size > 0 and all(
        isinstance(item, (bytes, bytearray, str)) for item in candidate.flat
    )


def from_numpy(name: str, array: Any, datatype: str | None = None) -> Tensor:
    """A tensor from an array, a (nested) list or a scalar.

    Without ``datatype`` it is inferred (``datatype_of``; lists of bytes or str are BYTES).
    BYTES data becomes an object array of ``bytes`` (str encoded as UTF-8). For BF16, a
    uint16 array is taken as raw bits and any other numbers are rounded to bfloat16.
    """
    if not isinstance(array, np.ndarray):
        if datatype == "BYTES" or (datatype is None and _looks_like_bytes(array)):
            array = np.array(array, dtype=object)
        elif datatype is None or datatype == "BF16":
            array = np.asarray(array)
        else:
            array = np.asarray(array, dtype=numpy_dtype(datatype))
    if datatype is None:
        datatype = datatype_of(array)
    if datatype == "BYTES":
        data = _as_bytes_array(array)
    elif datatype == "BF16":
        if array.dtype.name == "bfloat16":
            data = array.view("<u2")
        elif array.dtype.kind == "u" and array.dtype.itemsize == 2:
            data = array.astype("<u2", copy=False)
        else:
            data = _to_bfloat16_bits(array)
    else:
        data = array.astype(numpy_dtype(datatype), copy=False)
    return Tensor(name, datatype, tuple(int(dim) for dim in data.shape), data)
