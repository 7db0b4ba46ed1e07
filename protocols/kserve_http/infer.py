"""The KServe v2 (Open Inference Protocol) REST infer codec, with Triton's binary tensor extension.

Owns the translation between an infer call's HTTP bodies and inferd's messages: a request body
(all JSON, or a JSON header of ``Inference-Header-Content-Length`` bytes followed by the binary
inputs in input order, each sized by its ``binary_data_size``) into an ``InferRequest`` plus how
each output must travel back, and an ``InferResponse`` into headers and body parts. The system
shared-memory extension's part of it: an input or requested output naming a region in its
``shared_memory_*`` parameters makes a ``SharedMemoryInferRequest``, and an output written into
a region is answered without data, as Triton does. Every malformed body is refused with an
``InvalidArgument`` naming the problem, before anything is allocated from the client's numbers.
This module reads the request as a whole (its header, its parameters, the plain-header fast
path of ``scan``); its ``inputs`` and ``outputs`` arrays are
``inferd.protocols.kserve_http.inputs``' and the response ``inferd.protocols.kserve_http.response``'
(re-exported here: callers import this one module). JSON tensor data is
``inferd.protocols.kserve_http.json_tensors``; every other REST body (repository, metadata,
statistics, catalog, shared-memory registration) is ``inferd.protocols.kserve_http.admin``. Pure: no
sockets, no HTTP framing, no compression (``inferd.protocols.kserve_http.content_coding``).
"""

from __future__ import annotations

from typing import Any, Final

from inferd.protocols import build
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.json_bodies import (
    check_sequence_parameters,
    json_boolean,
    json_object,
    json_type,
    no_unknown_fields,
    non_negative_int,
    parse_json,
)
from inferd.protocols.kserve_http.inputs import request_inputs, requested_outputs
from inferd.protocols.kserve_http.response import (
    HEADER_LENGTH_HEADER as HEADER_LENGTH_HEADER,
    EncodedResponse as EncodedResponse,
    OutputEncoding as OutputEncoding,
    encode_infer_response as encode_infer_response,
)
from inferd.protocols.kserve_http.scan import PlainInferHeader, scan_plain_infer_request
from inferd.protocols.messages import (
    InferRequest,
    SharedMemoryInferRequest,
    SharedMemoryInput,
    Tensor,
)
from inferd.protocols.tensors import (
    DEFAULT_MAX_INPUT_SIZE,
    checked_shape,
    element_size,
    tensor_from_buffer,
)

# The plain header's scan pays only compiled: interpreted, it is slower than json.loads (C)
# and the walk over its dicts together.
SCAN_PLAIN: Final = "inferd.protocols.kserve_http.scan" in build.install().compiled
RESERVED_PREFIX = "triton_"

_REQUEST_FIELDS = frozenset({"id", "parameters", "inputs", "outputs"})


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
    Compiled, the header every binary-tensor client sends is read by ``scan``;
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
    """``decode_infer_request``'s answer for a plain header (``scan``), exactly
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
    inputs = request_inputs(document.get("inputs"), binary, max_input_size)
    outputs = requested_outputs(document.get("outputs", []))
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
    """The request of a plain header (``scan``), exactly as the full parser
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
