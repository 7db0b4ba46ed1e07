"""The input tensors of a KServe v2 gRPC ``ModelInferRequest``, as inferd's ``Tensor`` or
``SharedMemoryInput``: each input's bytes come from ``raw_input_contents`` (never copied),
from the typed ``contents`` field of its datatype (bounded by the maximum input size before
they are decoded, and narrow integers checked against their range), or from the system
shared-memory region its ``shared_memory_*`` parameters name (by Triton's rules and
messages). Every malformed input is refused with an ``InvalidArgument`` naming it. The rest
of the request is ``inferd.protocols.kserve_grpc.infer``'s. Pure: no I/O, no gRPC objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import SharedMemoryInput, SharedMemoryRef, Tensor
from inferd.protocols.tensors import (
    checked_shape,
    element_size,
    numpy_dtype,
    tensor_from_buffer,
)

# The typed ``InferTensorContents`` field each datatype travels in (FP16 and BF16 have none).
_CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
# int_contents/uint_contents carry 32-bit values; narrower datatypes must fit their range.
_NARROW_INTEGERS = frozenset({"INT8", "INT16", "UINT8", "UINT16"})


def shared_memory_location(tensor: Any) -> SharedMemoryRef | None:
    """The region a tensor's parameters name, by Triton's rules and messages
    (``ParseSharedMemoryParams`` in ``src/grpc/infer_handler.cc``)."""
    parameters = tensor.parameters
    name = tensor.name
    if "shared_memory_region" not in parameters:
        for key in ("shared_memory_offset", "shared_memory_byte_size"):
            if key in parameters:
                raise InvalidArgument(
                    f"'{key}' can not be specified without 'shared_memory_region' parameter "
                    f"for tensor '{name}'"
                )
        return None
    region = _tensor_parameter(parameters, "shared_memory_region", "string_param", name)
    offset = 0
    if "shared_memory_offset" in parameters:
        offset = _tensor_parameter(parameters, "shared_memory_offset", "int64_param", name)
    if "shared_memory_byte_size" not in parameters:
        raise InvalidArgument(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor '{name}'"
        )
    byte_size = _tensor_parameter(parameters, "shared_memory_byte_size", "int64_param", name)
    if offset < 0 or byte_size < 0:
        raise InvalidArgument(
            f"'shared_memory_offset' and 'shared_memory_byte_size' of tensor '{name}' must "
            "not be negative"
        )
    return SharedMemoryRef(region, byte_size, offset)


def _tensor_parameter(parameters: Any, key: str, choice: str, tensor: str) -> Any:
    parameter = parameters[key]
    if parameter.WhichOneof("parameter_choice") != choice:
        raise InvalidArgument(
            f"invalid value type for '{key}' parameter for tensor '{tensor}', expected "
            f"{choice}."
        )
    return getattr(parameter, choice)


def decode_inputs(
    request: Any, raw_contents: Sequence[Any], max_input_size: int
) -> tuple[Tensor | SharedMemoryInput, ...]:
    """The request's inputs in request order: a ``Tensor`` from its raw or typed contents, or
    a ``SharedMemoryInput`` for one whose bytes lie in a region."""
    model = request.model_name
    inputs = request.inputs
    locations = [shared_memory_location(tensor) for tensor in inputs]
    # As tritonclient sends them: raw contents for the inputs not in shared memory only.
    inline_count = sum(location is None for location in locations)
    if raw_contents:
        # Triton checks this per input before it counts the raw entries (its client
        # examples wait for this text).
        for tensor, location in zip(inputs, locations, strict=True):
            if location is None and tensor.HasField("contents"):
                raise InvalidArgument(
                    "contents field must not be specified when using raw_input_contents "
                    f"for '{tensor.name}' for model '{model}'"
                )
    if raw_contents and len(raw_contents) != inline_count:
        note = "; inputs in shared memory have none" if inline_count < len(inputs) else ""
        raise InvalidArgument(
            f"expected {inline_count} raw_input_contents (one per input, in input order) for "
            f"model '{model}', got {len(raw_contents)}{note}"
        )
    tensors: list[Tensor | SharedMemoryInput] = []
    raw_index = 0
    for tensor, location in zip(inputs, locations, strict=True):
        name, datatype = tensor.name, tensor.datatype
        if location is not None:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    "unexpected 'content' provided when using shared memory for input "
                    f"tensor '{name}' for model '{model}'"
                )
            _element_size(model, name, datatype)
            dims, _ = checked_shape(name, tensor.shape)
            tensors.append(SharedMemoryInput(name, datatype, dims, location))
            continue
        index = raw_index
        raw_index += 1
        size = _element_size(model, name, datatype)
        if tensor.HasField("contents"):
            # Raw contents are their tensor's bytes, so the message size limit bounds them;
            # typed values can decode to several times their size in the message (an INT64
            # zero is one byte there), so they are bounded here, before decoding, as HTTP
            # bounds its JSON values.
            dims, count = checked_shape(name, tensor.shape)
            if size is not None and count * size > max_input_size:
                raise InvalidArgument(
                    f"input '{name}' of shape {list(dims)} and datatype {datatype} needs "
                    f"{count * size} bytes, more than the maximum input size of "
                    f"{max_input_size} bytes"
                )
            tensors.append(_from_contents(model, tensor, dims, count, max_input_size))
        elif raw_contents:
            tensors.append(tensor_from_buffer(name, datatype, tensor.shape, raw_contents[index]))
        else:
            raise InvalidArgument(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
    return tuple(tensors)


def raw_input(model: str, name: str, datatype: str, shape: Sequence[int], raw: Any) -> Tensor:
    """The input ``name`` of a request for ``model`` over its raw contents ``raw``."""
    _element_size(model, name, datatype)
    return tensor_from_buffer(name, datatype, shape, raw)


def _element_size(model: str, name: str, datatype: str) -> int | None:
    try:
        return element_size(datatype)
    except InvalidArgument:
        raise InvalidArgument(
            f"input '{name}' for model '{model}' has unknown datatype '{datatype}'"
        ) from None


def _from_contents(
    model: str, tensor: Any, dims: tuple[int, ...], count: int, max_input_size: int
) -> Tensor:
    name, datatype = tensor.name, tensor.datatype
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidArgument(
            f"input tensor '{name}' for model '{model}' has datatype '{datatype}', which has "
            "no typed contents field; send it in raw_input_contents"
        )
    for descriptor, _ in tensor.contents.ListFields():
        if descriptor.name != field:
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}': {descriptor.name} cannot hold datatype '{datatype}', "
                f"expected {field}"
            )
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise InvalidArgument(
            f"input tensor '{name}' for model '{model}' has {len(values)} values in {field} "
            f"but its shape {list(dims)} holds {count}"
        )
    if datatype == "BYTES":
        # Counted as their serialized form is, length prefixes included, as HTTP counts them.
        if sum(len(value) + 4 for value in values) > max_input_size:
            raise InvalidArgument(
                f"input '{name}' holds more than the maximum input size of {max_input_size} "
                "bytes"
            )
        data = np.empty(count, dtype=object)
        data[:] = list(values)
        return Tensor(name, datatype, dims, data.reshape(dims))
    dtype = numpy_dtype(datatype)
    # fromiter fills the array value by value; np.array would first build a list of them all.
    array = np.fromiter(
        values, dtype=np.int64 if datatype in _NARROW_INTEGERS else dtype, count=count
    )
    if datatype in _NARROW_INTEGERS and array.size:
        limits = np.iinfo(dtype)
        if array.min() < limits.min or array.max() > limits.max:
            raise InvalidArgument(
                f"input tensor '{name}' for model '{model}' has a value in {field} outside "
                f"the range of {datatype}"
            )
        array = array.astype(dtype)
    return Tensor(name, datatype, dims, array.reshape(dims))
