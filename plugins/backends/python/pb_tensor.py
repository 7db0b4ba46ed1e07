"""``pb_utils.Tensor``: a named numpy array, and its conversion to and from inferd tensors.

Owns the datatype a numpy array stands for (object, bytes and str arrays are BYTES), DLPack
exchange of CPU tensors, and the rules for turning a tensor a model returns into the datatype
its config declares. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.plugins.backends.python.pb_errors import TritonModelException
from inferd.protocols.errors import ErrorCode, InferdError
from inferd.protocols.messages import Tensor as InferdTensor
from inferd.protocols.tensors import datatype_of, from_numpy, numpy_dtype

# TRITONSERVER_DataType numbers, as Tensor.triton_dtype() returns them.
TRITON_TYPE_NUMBERS: dict[str, int] = {
    "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7,
    "INT32": 8, "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13, "BF16": 14,
}


class _Capsule:
    """Lets ``numpy.from_dlpack`` take a bare DLPack capsule (a CPU one)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


def _datatype_of(array: np.ndarray) -> str:
    if array.dtype.kind == "V":
        raise TritonModelException(
            "Tensor dtype used for numpy_array is not supported by the python backend. "
            "Please use np.object_ instead."
        )
    try:
        return datatype_of(array)
    except InferdError as error:
        raise TritonModelException(f"unsupported tensor dtype: {error.message}") from None


def bytes_elements(array: np.ndarray) -> np.ndarray:
    """BYTES elements as ``bytes``: str as UTF-8, anything else as the UTF-8 of ``str(item)``,
    as Triton serializes them."""
    if array.dtype.kind == "O" and all(isinstance(item, bytes) for item in array.flat):
        return array
    items = [
        item if isinstance(item, (bytes, bytearray)) else str(item).encode("utf-8")
        for item in array.flat
    ]
    converted = np.empty(len(items), dtype=object)
    converted[:] = items
    return converted.reshape(array.shape)


class Tensor:
    """A named tensor: ``Tensor(name, numpy_array)``; BYTES tensors are object arrays of
    ``bytes``. A tensor taken from a request keeps the request's tensor, so passing it on (to
    a response or a BLS request) copies nothing; ``as_numpy`` copies it once if its memory is
    read-only, because Triton hands models writable arrays."""

    __slots__ = ("_data", "_datatype", "_name", "_source")

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = numpy_array if isinstance(numpy_array, np.ndarray) else np.asarray(numpy_array)
        datatype = _datatype_of(array)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = str(name)
        self._data: np.ndarray = array
        self._datatype = datatype
        self._source: InferdTensor | None = None

    @classmethod
    def from_inferd(cls, tensor: InferdTensor) -> Tensor:
        """Wrap an inferd tensor without copying it."""
        wrapped = cls.__new__(cls)
        wrapped._name = tensor.name
        wrapped._data = tensor.data
        wrapped._datatype = tensor.datatype
        wrapped._source = tensor
        return wrapped

    def to_inferd(self, datatype: str | None = None) -> InferdTensor:
        """This tensor as an inferd tensor of ``datatype`` (its own by default). Numbers are
        cast to a declared datatype of the same kind (FP64 to FP32, INT64 to INT32); any other
        mismatch is refused."""
        datatype = datatype or self._datatype
        if self._source is not None and datatype == self._datatype:
            return self._source
        data = self._data
        if datatype != self._datatype and not self._castable(datatype):
            raise InferdError.from_code(
                ErrorCode.INTERNAL,
                f"output '{self._name}' holds {self._datatype} data but the model "
                f"configuration declares {datatype}",
            )
        if datatype == "BYTES":
            data = bytes_elements(data)
        return from_numpy(self._name, data, datatype)

    def _castable(self, datatype: str) -> bool:
        if "BYTES" in (datatype, self._datatype):
            return False
        if datatype == "BF16":
            return self._data.dtype.kind == "f"
        return bool(np.can_cast(self._data.dtype, numpy_dtype(datatype), "same_kind"))

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The tensor's array (BF16 as the uint16 of its raw bits)."""
        if not self._data.flags.writeable:
            self._data = self._data.copy()
            self._source = None
        return self._data

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType number of the tensor's datatype."""
        return TRITON_TYPE_NUMBERS[self._datatype]

    def shape(self) -> list[int]:
        return [int(dim) for dim in self._data.shape]

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        if self._datatype == "BYTES":
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self.as_numpy().__dlpack__()  # numpy exports no read-only array

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor over a CPU DLPack capsule or an object with ``__dlpack__``."""
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        source = tensor if hasattr(tensor, "__dlpack__") else _Capsule(tensor)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            raise TritonModelException(
                f"the python backend takes CPU DLPack tensors only: {error}"
            ) from None
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={self.shape()})"
