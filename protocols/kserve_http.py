"""The KServe v2 (Open Inference Protocol) REST infer codec, with Triton's binary tensor extension.

Owns the translation between an infer call's HTTP bodies and inferd's messages: a request body
(all JSON, or a JSON header of ``Inference-Header-Content-Length`` bytes followed by the binary
inputs in input order, each sized by its ``binary_data_size``) into an ``InferRequest`` plus how
each output must travel back, and an ``InferResponse`` into headers and body parts. The system
shared-memory extension's part of it: an input or requested output naming a region in its
``shared_memory_*`` parameters makes a ``SharedMemoryInferRequest``, and an output written into
a region is answered without data, as Triton does. Every malformed body is refused with an
``InvalidArgument`` naming the problem, before anything is allocated from the client's numbers.
JSON tensor data is ``inferd.protocols.json_tensors``; every other REST body (repository,
metadata, statistics, catalog, shared-memory registration) is
``inferd.protocols.kserve_http_admin``. Pure: no sockets, no HTTP framing, no compression
(``inferd.protocols.content_coding``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from inferd.protocols import build
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.json_bodies import (
    check_sequence_parameters,
    dumps,
    json_boolean,
    json_object,
    json_type,
    no_unknown_fields,
    non_negative_int,
    parse_json,
)
from inferd.protocols.kserve_http_scan import PlainInferHeader, scan_plain_infer_request
from inferd.protocols.json_tensors import json_values, tensor_from_json
from inferd.protocols.messages import (
    InferRequest,
    InferResponse,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    Tensor,
)
from inferd.protocols.tensors import (
    DEFAULT_MAX_INPUT_SIZE,
    checked_shape,
    element_size,
    tensor_from_buffer,
    tensor_to_buffer,
)

HEADER_LENGTH_HEADER = "Inference-Header-Content-Length"
# The plain header's scan pays only compiled: interpreted, it is slower than json.loads (C)
# and the walk over its dicts together.
SCAN_PLAIN: Final = "inferd.protocols.kserve_http_scan" in build.install().compiled
RESERVED_PREFIX = "triton_"

_REQUEST_FIELDS = frozenset({"id", "parameters", "inputs", "outputs"})
_INPUT_FIELDS = frozenset({"name", "shape", "datatype", "parameters", "data"})
_OUTPUT_FIELDS = frozenset({"name", "parameters"})
SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY_OFFSET = "shared_memory_offset"
_SHARED_MEMORY_PARAMETERS = frozenset(
    {SHARED_MEMORY_REGION, SHARED_MEMORY_BYTE_SIZE, SHARED_MEMORY_OFFSET}
)


@dataclass(frozen=True, slots=True)
class OutputEncoding:
    """How each output of the response travels: binary (after the JSON header) or as JSON
    ``data``. Outputs the request did not name use ``default_binary``."""

    binary: dict[str, bool] = field(default_factory=dict)
    default_binary: bool = False

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response ready to send: extra headers and the body as parts, sent in order."""

    headers: tuple[tuple[str, str], ...]
    parts: tuple[bytes | memoryview, ...]

    @property
    def length(self) -> int:
        return sum(len(part) if isinstance(part, bytes) else part.nbytes for part in self.parts)

# ----------------------------------------------------------------------------- infer request


def parse_header_length(value: str | None, body_length: int) -> int | None:
    """The ``Inference-Header-Content-Length`` value, checked against the body's length."""
    if value is None:
        return None
    text = value.strip()
    # ASCII only: str.isdigit() also accepts digits such as '²' that int() then rejects.
    if not (text.isascii() and text.isdigit()):
        raise InvalidArgument(
            f"{HEADER_LENGTH_HEADER} must be a non-negative integer, got {value!r}"
        )
    length = int(text)
    if length > body_length:
        raise InvalidArgument(
            f"{HEADER_LENGTH_HEADER} is {length} but the request body has only {body_length} bytes"
        )
    return length


def decode_infer_request(
    model: str,
    version: str,
    body: bytes | memoryview,
    header_length: int | None = None,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> tuple[InferRequest | SharedMemoryInferRequest, OutputEncoding]:
    """An infer request body as an ``InferRequest`` and the encoding its outputs ask for.

    ``header_length`` (from ``parse_header_length``) splits the JSON header from the binary
    inputs; ``None`` means the whole body is JSON. Binary inputs stay views of ``body``. A
    request with an input or output in shared memory is a ``SharedMemoryInferRequest``.
    Compiled, the header every binary-tensor client sends is read by ``kserve_http_scan``;
    any other, and any the full parser would refuse, by the full parser
    (``parse_infer_request``), which reads every header when the scan runs interpreted.
    """
    if SCAN_PLAIN:
        decoded = decode_plain_infer_request(model, version, body, header_length, max_input_size)
        if decoded is not None:
            return decoded
    return parse_infer_request(model, version, body, header_length, max_input_size)


def decode_plain_infer_request(
    model: str,
    version: str,
    body: bytes | memoryview,
    header_length: int | None = None,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> tuple[InferRequest, OutputEncoding] | None:
    """``decode_infer_request``'s answer for a plain header (``kserve_http_scan``), exactly
    as the full parser gives it; None for any other body, and for any the full parser would
    refuse."""
    view = memoryview(body).cast("B")
    if header_length is None:
        header_length = view.nbytes
    header = body if header_length == view.nbytes else view[:header_length]
    plain = scan_plain_infer_request(header if isinstance(header, bytes) else bytes(header))
    if plain is None:
        return None
    return _plain_request(model, version, plain, view[header_length:], max_input_size)


def parse_infer_request(
    model: str,
    version: str,
    body: bytes | memoryview,
    header_length: int | None = None,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> tuple[InferRequest | SharedMemoryInferRequest, OutputEncoding]:
    """``decode_infer_request`` by the full parser alone: every shape, every error."""
    view = memoryview(body).cast("B")
    if header_length is None:
        header_length = view.nbytes
    header = body if header_length == view.nbytes else view[:header_length]
    document = json_object(parse_json(header, "inference request"), "the inference request")
    no_unknown_fields(document, _REQUEST_FIELDS, "the inference request")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument(f"the request 'id' must be a string, not {json_type(request_id)}")
    parameters, priority, timeout_us, default_binary = _request_parameters(
        document.get("parameters", {})
    )
    binary = view[header_length:]
    inputs = _inputs(document.get("inputs"), binary, max_input_size)
    outputs = _outputs(document.get("outputs", []))
    in_shared_memory = any(isinstance(item, SharedMemoryInput) for item in inputs)
    request = InferRequest(
        model=model,
        inputs=() if in_shared_memory else _tensors_only(inputs),
        version=version,
        id=request_id,
        outputs=outputs.names,
        parameters=parameters,
        priority=priority,
        timeout_us=timeout_us,
        classification=outputs.classification,
    )
    encoding = OutputEncoding(outputs.binary, default_binary)
    if in_shared_memory or outputs.regions:
        return SharedMemoryInferRequest(request, inputs, outputs.regions), encoding
    return request, encoding


def _plain_request(
    model: str, version: str, plain: PlainInferHeader, binary: memoryview, max_input_size: int
) -> tuple[InferRequest, OutputEncoding] | None:
    """The request of a plain header (``kserve_http_scan``), exactly as the full parser
    makes it; None for anything the full parser would refuse, which then says why."""
    tensors: list[Tensor] = []
    offset = 0
    try:
        for item in plain.inputs:
            name = item.name
            size = element_size(item.datatype)
            if not name:
                return None
            dims, count = checked_shape(name, item.shape)
            if size is not None and count * size > max_input_size:
                return None
            end = offset + item.binary_data_size
            if end > binary.nbytes:
                return None
            tensors.append(tensor_from_buffer(name, item.datatype, dims, binary[offset:end]))
            offset = end
    except InvalidArgument:
        return None
    if offset != binary.nbytes:
        return None
    names: list[str] = []
    binary_outputs: dict[str, bool] = {}
    for name, wanted in plain.outputs:
        if not name or name in binary_outputs:
            return None
        names.append(name)
        binary_outputs[name] = wanted
    request = InferRequest(model=model, inputs=tuple(tensors), version=version, id=plain.id,
                           outputs=tuple(names))
    return request, OutputEncoding(binary_outputs, plain.binary_data_output)


def _request_parameters(value: Any) -> tuple[dict[str, Any], int, int, bool]:
    parameters = dict(json_object(value, "the request 'parameters'"))
    for key, item in parameters.items():
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgument(
                f"parameter '{key}' is reserved for Triton usage and cannot be specified"
            )
        if not isinstance(item, (str, int, float, bool)):
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', "
                "'double' or 'string'."
            )
    check_sequence_parameters(parameters)
    default_binary = json_boolean(
        parameters.pop("binary_data_output", False), "parameter 'binary_data_output'"
    )
    priority = non_negative_int(parameters.pop("priority", 0), "parameter 'priority'")
    timeout_us = non_negative_int(parameters.pop("timeout", 0), "parameter 'timeout'")
    return parameters, priority, timeout_us, default_binary


def _tensors_only(inputs: tuple[Tensor | SharedMemoryInput, ...]) -> tuple[Tensor, ...]:
    """``inputs``, which hold no shared-memory input, as the tensors they are."""
    return tuple(item for item in inputs if isinstance(item, Tensor))


def _inputs(
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


def _outputs(value: Any) -> RequestedOutputs:
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


# ---------------------------------------------------------------------------- infer response


def encode_infer_response(
    response: InferResponse | SharedMemoryInferResponse, encoding: OutputEncoding
) -> EncodedResponse:
    """The response as JSON, or as a JSON header followed by the binary outputs in order (then
    ``Inference-Header-Content-Length`` gives the header's length). An output written into
    shared memory has its name, datatype and shape only (Triton's ``FinalizeResponse``)."""
    outputs = []
    buffers: list[bytes | memoryview] = []
    any_binary = False
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": [int(dim) for dim in tensor.shape],
        }
        if isinstance(tensor, SharedMemoryOutput):
            pass
        elif encoding.is_binary(tensor.name):
            any_binary = True
            buffer = tensor_to_buffer(tensor)
            size = buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
            entry["parameters"] = {"binary_data_size": size}
            if size:
                buffers.append(buffer)
        else:
            entry["data"] = json_values(tensor)
        outputs.append(entry)
    document: dict[str, Any] = {}
    if response.id:
        document["id"] = response.id
    document["model_name"] = response.model
    document["model_version"] = response.version
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    header = dumps(document)
    if not any_binary:
        return EncodedResponse((("content-type", "application/json"),), (header,))
    headers = (
        ("content-type", "application/octet-stream"),
        (HEADER_LENGTH_HEADER.lower(), str(len(header))),
    )
    return EncodedResponse(headers, (header, *buffers))

