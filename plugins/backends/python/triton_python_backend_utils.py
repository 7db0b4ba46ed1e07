"""``triton_python_backend_utils``: the module Triton python models import as ``pb_utils``.

The python backend installs this module under its Triton name before it imports a
``model.py``, so ``import triton_python_backend_utils as pb_utils`` works unchanged. It offers
what model code uses from Triton's module, with Triton's names and behaviour: ``Tensor``
(``pb_tensor``), ``InferenceRequest`` (also the BLS request, whose ``exec``/``async_exec`` send
it to another model through this server's scheduler) and ``InferenceResponse``
(``pb_messages``), ``TritonError`` and ``TritonModelException`` (``pb_errors``), ``ModelConfig``
for ``auto_complete_config`` (``model_config``), and here ``Logger``, the config and type
helpers and the ``TRITONSERVER_*`` flag constants. A decoupled model's requests give it an
``InferenceResponseSender`` (``request.get_response_sender()``). Custom metrics and the
model-management calls are not offered. No I/O beyond logging.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

import numpy as np

from inferd.plugins.backends.python import scope
from inferd.plugins.backends.python.model_config import ModelConfig
from inferd.plugins.backends.python.pb_errors import TritonError, TritonModelException
from inferd.plugins.backends.python.pb_messages import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
)
from inferd.plugins.backends.python.pb_tensor import TRITON_TYPE_NUMBERS, Tensor, bytes_elements
from inferd.protocols.errors import InferdError
from inferd.protocols.tensors import datatype_of, deserialize_bytes, numpy_dtype, serialize_bytes

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "Logger",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]

log = logging.getLogger("inferd.python_model")

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_DATATYPE_BY_TRITON_NUMBER = {number: name for name, number in TRITON_TYPE_NUMBERS.items()}

TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_PYTHON_LEVELS = {
    _LogLevel.INFO: logging.INFO,
    _LogLevel.WARNING: logging.WARNING,
    _LogLevel.ERROR: logging.ERROR,
    _LogLevel.VERBOSE: logging.DEBUG,
}


class Logger:
    """Writes to the server's log: ``pb_utils.Logger.log_info("...")``."""

    LogLevel = _LogLevel
    INFO = _LogLevel.INFO
    WARNING = _LogLevel.WARNING
    ERROR = _LogLevel.ERROR
    VERBOSE = _LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = _LogLevel.INFO) -> None:
        log.log(_PYTHON_LEVELS[_LogLevel(level)], "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        log.debug("%s", message)


# ------------------------------------------------------------------------------ helpers


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(
    inference_response: InferenceResponse, name: str
) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((entry for entry in model_config.get("input", []) if entry["name"] == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next(
        (entry for entry in model_config.get("output", []) if entry["name"] == name), None
    )


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """The numpy type of a TRITONSERVER_DataType number (BF16 has none: ``None``)."""
    datatype = _DATATYPE_BY_TRITON_NUMBER.get(int(data_type))
    if datatype is None or datatype == "BF16":
        return None
    return np.object_ if datatype == "BYTES" else numpy_dtype(datatype).type


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The TRITONSERVER_DataType number of a numpy type, or ``None``."""
    try:
        return TRITON_TYPE_NUMBERS[datatype_of(np.empty(0, dtype=data_type))]
    except (InferdError, TypeError):
        return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | None:
    """BYTES elements, each after its 4-byte little-endian length, in C order."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype.kind not in "OS":
        return None
    return serialize_bytes(bytes_elements(input_tensor))


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    return deserialize_bytes(encoded_tensor)


def get_model_dir() -> str:
    """The version folder holding this model's ``model.py``."""
    current = scope.current()
    if current is None:
        raise TritonModelException("get_model_dir() is only available inside a model")
    return current.model_dir
