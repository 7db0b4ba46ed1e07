"""The ``inputs`` and ``outputs`` arrays of a KServe v2 REST infer request: each input as a
tensor (its JSON ``data``, or its ``binary_data_size`` bytes of the binary part, in input
order) or as a region of system shared memory, and each requested output with how it travels
back (binary, a shared-memory region, a classification count), with Triton's rules and words
for every field.

Owns the checks of one array's entries, and refuses every malformed entry with an
``InvalidArgument`` before anything is allocated from the client's numbers; the request as a
whole (its JSON header, its parameters, the plain-header fast path) is
``inferd.protocols.kserve_http.infer``'s. Compiled with mypyc as part of the request path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.json_bodies import (
    json_boolean,
    json_object,
    json_type,
    no_unknown_fields,
    non_negative_int,
)
from inferd.protocols.kserve_http.json_tensors import tensor_from_json
from inferd.protocols.kserve_http.response import HEADER_LENGTH_HEADER
from inferd.protocols.messages import SharedMemoryInput, SharedMemoryRef, Tensor
from inferd.protocols.tensors import checked_shape, element_size, tensor_from_buffer

_INPUT_FIELDS = frozenset({"name", "shape", "datatype", "parameters", "data"})
_OUTPUT_FIELDS = frozenset({"name", "parameters"})
SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY_OFFSET = "shared_memory_offset"
_SHARED_MEMORY_PARAMETERS = frozenset(
    {SHARED_MEMORY_REGION, SHARED_MEMORY_BYTE_SIZE, SHARED_MEMORY_OFFSET}
)



def request_inputs(
    value: Any, binary: memoryview, max_input_size: int
) -> tuple[Tensor | SharedMemoryInput, ...]:
    if not isinstance(value, list):
        if value is None:
            raise InvalidArgument("the inference request has no 'inputs'")
        raise InvalidArgument(f"the request 'inputs' must be an array, not {json_type(value)}")
    tensors: list[Tensor | SharedMemoryInput] = []
    offset = 0
    for index, item in enumerate(value):
        entry = json_object(item, f"request input {index}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"request input {index} has no 'name' string")
        what = f"input '{name}'"
        no_unknown_fields(entry, _INPUT_FIELDS, what)
        datatype = entry.get("datatype")
        if not isinstance(datatype, str):
            raise InvalidArgument(f"{what} has no 'datatype' string")
        try:
            size = element_size(datatype)
        except InvalidArgument:
            raise InvalidArgument(f"{what} has unknown datatype '{datatype}'") from None
        shape = entry.get("shape")
        if not isinstance(shape, list):
            raise InvalidArgument(f"{what} has no 'shape' array")
        dims, count = checked_shape(name, shape)
        parameters = json_object(entry.get("parameters", {}), f"the 'parameters' of {what}")
        _check_content_fields(entry, parameters)
        location = _shared_memory_location(parameters, what)
        if location is not None:
            no_unknown_fields(parameters, _SHARED_MEMORY_PARAMETERS, f"the 'parameters' of {what}")
            tensors.append(SharedMemoryInput(name, datatype, dims, location))
            continue
        if size is not None and count * size > max_input_size:
            raise InvalidArgument(
                f"{what} of shape {list(dims)} and datatype {datatype} needs {count * size} "
                f"bytes, more than the maximum input size of {max_input_size} bytes"
            )
        binary_size = _input_parameters(parameters, what)
        if binary_size is not None:
            available = binary.nbytes - offset
            if binary_size > available:
                raise InvalidArgument(
                    f"{what} has binary_data_size {binary_size} but only {available} bytes of "
                    "binary data remain in the request body (truncated body, or wrong "
                    f"{HEADER_LENGTH_HEADER})"
                )
            tensor = tensor_from_buffer(name, datatype, dims, binary[offset : offset + binary_size])
            offset += binary_size
        else:
            tensor = tensor_from_json(name, datatype, dims, count, entry["data"], max_input_size)
        tensors.append(tensor)
    if offset != binary.nbytes:
        raise InvalidArgument(
            f"the request body has {binary.nbytes - offset} bytes after the binary data of its "
            f"inputs (binary_data_size values, or {HEADER_LENGTH_HEADER}, are wrong)"
        )
    return tuple(tensors)


def _check_content_fields(entry: dict[str, Any], parameters: dict[str, Any]) -> None:
    """Triton's rule and words: an input gives its values in exactly one way."""
    given = [field for field, found in (("data", "data" in entry),
                                        ("binary_data_size", "binary_data_size" in parameters),
                                        (SHARED_MEMORY_REGION, SHARED_MEMORY_REGION in parameters))
             if found]
    if len(given) != 1:
        which = " ".join(f"'{field}'" for field in given)
        raise InvalidArgument(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But "
            + (f"set {which}" if given else "no field is set"))


def _input_parameters(parameters: dict[str, Any], what: str) -> int | None:
    no_unknown_fields(parameters, frozenset({"binary_data_size"}), f"the 'parameters' of {what}")
    if "binary_data_size" not in parameters:
        return None
    return non_negative_int(parameters["binary_data_size"], f"'binary_data_size' of {what}")


def _shared_memory_location(parameters: dict[str, Any], what: str) -> SharedMemoryRef | None:
    """The region an input or output's parameters name, or ``None`` when they name none.
    Triton's rules: the region needs a byte size, and an offset or a byte size needs a
    region."""
    if SHARED_MEMORY_REGION not in parameters:
        for key in (SHARED_MEMORY_BYTE_SIZE, SHARED_MEMORY_OFFSET):
            if key in parameters:
                raise InvalidArgument(
                    f"'{key}' can not be specified without '{SHARED_MEMORY_REGION}' "
                    f"parameter for {what}"
                )
        return None
    region = parameters[SHARED_MEMORY_REGION]
    if not isinstance(region, str) or not region:
        raise InvalidArgument(f"'{SHARED_MEMORY_REGION}' of {what} must be a non-empty string")
    if SHARED_MEMORY_BYTE_SIZE not in parameters:
        raise InvalidArgument(
            f"'{SHARED_MEMORY_BYTE_SIZE}' must be specified along with "
            f"'{SHARED_MEMORY_REGION}' parameter for {what}"
        )
    byte_size = non_negative_int(
        parameters[SHARED_MEMORY_BYTE_SIZE], f"'{SHARED_MEMORY_BYTE_SIZE}' of {what}"
    )
    offset = non_negative_int(
        parameters.get(SHARED_MEMORY_OFFSET, 0), f"'{SHARED_MEMORY_OFFSET}' of {what}"
    )
    return SharedMemoryRef(region, byte_size, offset)


@dataclass(frozen=True, slots=True)
class RequestedOutputs:
    """A request's ``outputs``: the names, and per name whether it goes binary, the
    shared-memory region it goes to and its classification count."""

    names: tuple[str, ...]
    binary: dict[str, bool]
    regions: dict[str, SharedMemoryRef]
    classification: dict[str, int]


def requested_outputs(value: Any) -> RequestedOutputs:
    if not isinstance(value, list):
        raise InvalidArgument(f"the request 'outputs' must be an array, not {json_type(value)}")
    names: list[str] = []
    binary: dict[str, bool] = {}
    regions: dict[str, SharedMemoryRef] = {}
    classes: dict[str, int] = {}
    for index, item in enumerate(value):
        entry = json_object(item, f"requested output {index}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"requested output {index} has no 'name' string")
        what = f"requested output '{name}'"
        no_unknown_fields(entry, _OUTPUT_FIELDS, what)
        if name in binary:
            raise InvalidArgument(f"output '{name}' already exists in request")
        parameters = json_object(entry.get("parameters", {}), f"the 'parameters' of {what}")
        location = _shared_memory_location(parameters, what)
        no_unknown_fields(
            parameters, _SHARED_MEMORY_PARAMETERS | {"binary_data", "classification"},
            f"the 'parameters' of {what}"
        )
        names.append(name)
        binary[name] = json_boolean(parameters.get("binary_data", False),
                                    f"'binary_data' of {what}")
        # As Triton: 0 asks for the values themselves.
        count = non_negative_int(parameters.get("classification", 0),
                                  f"'classification' of {what}")
        if count:
            classes[name] = count
        if location is not None:
            if binary[name]:
                raise InvalidArgument(
                    "Output can't set both 'shared_memory_region' and 'binary_data'"
                )
            if count:
                raise InvalidArgument(
                    "Output can't set both 'shared_memory_region' and 'classification'"
                )
            regions[name] = location
    return RequestedOutputs(tuple(names), binary, regions, classes)
