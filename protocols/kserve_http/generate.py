"""Triton's generate extension over HTTP: a JSON object in, a JSON object out, no tensor
metadata on the wire (``POST v2/models/{m}[/versions/{v}]/generate`` and
``.../generate_stream``).

Owns the mapping Triton's HTTP server applies, with the model's metadata as the schema:

- request: a top-level key (or a key of the nested ``parameters`` object) that names a model
  input becomes that input, a scalar or a flat list of its datatype, shaped to the input's
  metadata shape: its fixed dimensions take their size, the innermost open dimension the
  rest, the other open ones 1; any other key becomes a request parameter; ``id`` is the
  request id; a refusal of a nested key opens with Triton's "Converting keyword:
  'parameters': ";
- response: ``id`` (when the request had one), ``model_name``, ``model_version``, each output
  by name (a lone value for a one-element tensor, else the flat list), and the response's
  parameters;
- ``generate_stream`` sends each response as a Server-Sent Event (``data: {...}``), an error
  as ``data: {"error": ...}``.

Pure: JSON and tensors only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from inferd.protocols.errors import InferdError, InvalidArgument
from inferd.protocols.json_bodies import dumps, parse_json
from inferd.protocols.kserve_http.json_tensors import json_values, tensor_from_json
from inferd.protocols.messages import InferRequest, InferResponse, ModelMetadata, Tensor, TensorSpec

PARAMETERS = "parameters"
NOT_ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate "
                    "stream for model that generates various number of responses")
EVENT_STREAM = "text/event-stream; charset=utf-8"


def decode_generate_request(model: str, version: str, body: bytes | memoryview,
                            metadata: ModelMetadata, max_input_size: int) -> InferRequest:
    document = parse_json(body, "the generate request")
    if not isinstance(document, dict):
        raise InvalidArgument("the generate request must be a JSON object")
    inputs = {spec.name: spec for spec in metadata.inputs}
    if PARAMETERS in inputs and PARAMETERS in document:
        raise InvalidArgument(f"Keyword '{PARAMETERS}' for nested schema also given as input "
                              "tensor name")
    request_id = document.pop("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("Unable to parse 'id': expected a string")
    nested = document.pop(PARAMETERS, {})
    if not isinstance(nested, dict):
        raise InvalidArgument(f"Expected JSON object for keyword: '{PARAMETERS}': attempt to "
                              "access JSON non-object as object")
    tensors: list[Tensor] = []
    parameters: dict[str, Any] = {}
    for key, value in document.items():
        _convert(key, value, inputs, tensors, parameters, max_input_size)
    try:  # as Triton's, the nested object's refusals say where they come from
        for key, value in nested.items():
            _convert(key, value, inputs, tensors, parameters, max_input_size)
    except InferdError as error:
        raise InferdError.from_code(
            error.code, f"Converting keyword: '{PARAMETERS}': {error.message}") from None
    return InferRequest(model, tuple(tensors), version=version, id=request_id,
                        parameters=parameters)


def _convert(key: str, value: Any, inputs: dict[str, TensorSpec], tensors: list[Tensor],
             parameters: dict[str, Any], max_input_size: int) -> None:
    """One key of the request: a model input becomes a tensor (within what the tensors
    already made leave of ``max_input_size``), any other key a request parameter."""
    spec = inputs.get(key)
    if spec is None:
        parameters[key] = _parameter(key, value)
        return
    consumed = sum(tensor.data.nbytes for tensor in tensors)
    tensors.append(_input(spec, value, max_input_size - consumed))


def _parameter(key: str, value: Any) -> Any:
    if isinstance(value, (bool, str)) or (isinstance(value, (int, float))
                                          and math.isfinite(value)):
        return value
    raise InvalidArgument(f"parameter '{key}' has invalid type. It should be either 'int', "
                          "'bool', or 'string'.")


def _input(spec: TensorSpec, value: Any, max_input_size: int) -> Tensor:
    values = value if isinstance(value, list) else [value]
    if any(isinstance(item, (list, dict)) for item in values):
        raise InvalidArgument(f"input '{spec.name}' must be a value or a flat list of values")
    shape = _shape(spec, len(values))
    count = math.prod(shape)
    return tensor_from_json(spec.name, spec.datatype, shape, count, values, max_input_size)


def _shape(spec: TensorSpec, count: int) -> tuple[int, ...]:
    """The input's metadata shape with ``count`` elements spread over it (Triton's rule)."""
    shape = list(spec.shape)
    remaining = count
    for size in reversed(shape):
        if size != -1:
            if size == 0 or remaining % size:
                raise InvalidArgument(f"The schema can not convert input '{spec.name}' to "
                                      "tensor with proper shape")
            remaining //= size
    for index in reversed(range(len(shape))):
        if shape[index] == -1:
            shape[index], remaining = remaining, 1
    if remaining != 1:
        raise InvalidArgument(f"The schema can not convert input '{spec.name}' to tensor "
                              "with proper shape")
    return tuple(shape)


def encode_generate_response(response: InferResponse) -> bytes:
    document: dict[str, Any] = {}
    if response.id:
        document["id"] = response.id
    document["model_name"] = response.model
    document["model_version"] = response.version
    for tensor in response.outputs:
        values = json_values(tensor)
        document[tensor.name] = values[0] if len(values) == 1 else values
    for key, value in response.parameters.items():
        document.setdefault(key, value)
    encoded: bytes = dumps(document)
    return encoded


def server_sent_event(document: bytes) -> bytes:
    return b"data: " + document + b"\n\n"


def error_document(message: str) -> bytes:
    encoded: bytes = dumps({"error": message})
    return encoded


def event_stream_headers() -> Sequence[tuple[str, str]]:
    return (("content-type", EVENT_STREAM), ("cache-control", "no-cache"))
