"""Conversion between the KServe v2 gRPC inference messages and inferd's messages.

Owns the mapping of ``ModelInferRequest`` (a class tritonclient generates in
``tritonclient.grpc.service_pb2``; never a second copy of the protos) to an ``InferRequest``,
or to a ``SharedMemoryInferRequest`` when a tensor names a region: its request parameters
(the reserved ``priority``, ``timeout``, ``sequence_*`` and ``triton_*`` keys included) and
its requested outputs (with their ``shared_memory_*`` and ``classification`` parameters); and
of an ``InferResponse`` back to a ``ModelInferResponse`` whose outputs always travel in
``raw_output_contents`` (one written into a region with empty raw contents, as Triton's, so
the indices still match the outputs), with the streaming ``triton_final_response`` flag and
stream errors. The input tensors (typed ``contents``, ``raw_input_contents``, shared memory)
are ``inferd.protocols.kserve_grpc.inputs``'s; the other RPCs' messages (metadata, config,
statistics, the repository API, shared-memory registration) are
``inferd.protocols.kserve_grpc.admin``'s; the byte-level framing of the messages that carry
tensors is ``inferd.protocols.kserve_grpc.framing``'s. Every malformed request is refused with
an ``InvalidArgument`` naming the problem. Pure: no I/O, no gRPC objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.kserve_grpc.inputs import decode_inputs, raw_input, shared_memory_location
from inferd.protocols.kserve_grpc.framing import (
    PlainInferRequest,
    serialize_plain_infer_response,
)
from inferd.protocols.kserve_grpc.framing import (
    serialize_infer_response as serialize_framed_infer_response,
)
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
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE, tensor_to_buffer

RESERVED_PREFIX = "triton_"
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
"""The one ``triton_``-prefixed request parameter a client may send (streaming only)."""
FINAL_RESPONSE = "triton_final_response"
"""Response parameter of a stream response: true on the last response to a request."""

_ALLOWED_RESERVED = frozenset({EMPTY_FINAL_RESPONSE})
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


# ------------------------------------------------------------------------------ parameters


def parameter_value(key: str, parameter: Any) -> Any:
    """The plain value an ``InferParameter`` (or ``ModelRepositoryParameter``) holds."""
    choice = parameter.WhichOneof("parameter_choice")
    if choice is None:
        raise InvalidArgument(f"parameter '{key}' has no value")
    return getattr(parameter, choice)


def set_parameter(parameter: Any, value: Any) -> None:
    """Store a plain value in an ``InferParameter``: bool, int (int64, or uint64 when only
    that fits), float (double) or str; anything else is sent as its text."""
    if isinstance(value, (bool, np.bool_)):
        parameter.bool_param = bool(value)
    elif isinstance(value, (int, np.integer)):
        number = int(value)
        if _INT64_MIN <= number <= _INT64_MAX:
            parameter.int64_param = number
        elif 0 <= number <= _UINT64_MAX:
            parameter.uint64_param = number
        else:
            parameter.string_param = str(number)
    elif isinstance(value, (float, np.floating)):
        parameter.double_param = float(value)
    elif isinstance(value, str):
        parameter.string_param = value
    else:
        parameter.string_param = str(value)


def _set_parameters(target: Any, parameters: Mapping[str, Any]) -> None:
    for key, value in parameters.items():
        set_parameter(target[key], value)


def expect_choice(key: str, parameter: Any, *choices: str) -> Any:
    """The value ``parameter`` holds, which must be one of ``choices``."""
    choice = parameter.WhichOneof("parameter_choice")
    return _chosen(key, choice or "", None if choice is None else getattr(parameter, choice),
                   *choices)


def _chosen(key: str, choice: str, value: Any, *choices: str) -> Any:
    if choice not in choices:
        expected = " or ".join(choices)
        raise InvalidArgument(f"invalid value type for '{key}' parameter, expected {expected}.")
    return value


def _request_parameters(parameters: Any) -> tuple[dict[str, Any], int, int]:
    """(custom parameters, priority, timeout in microseconds) of a ModelInferRequest."""
    chosen: dict[str, tuple[str, Any]] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        chosen[key] = ("", None) if choice is None else (choice, getattr(parameter, choice))
    return _parameters_by_rule(chosen)


def _parameters_by_rule(parameters: dict[str, tuple[str, Any]]) -> tuple[dict[str, Any], int, int]:
    """(custom parameters, priority, timeout in microseconds) from each request parameter's
    (``InferParameter`` field it sets, "" for none; value), by Triton's rules."""
    plain: dict[str, Any] = {}
    priority = timeout_us = 0
    for key, (choice, value) in parameters.items():
        if key == "priority":
            priority = _chosen(key, choice, value, "int64_param", "uint64_param")
            if priority < 0:
                raise InvalidArgument("invalid value for 'priority', expected value >= 0.")
        elif key == "timeout":
            timeout_us = _chosen(key, choice, value, "int64_param")
            if timeout_us < 0:
                raise InvalidArgument("invalid value for 'timeout', expected value >= 0.")
        elif key == "sequence_id":
            plain[key] = _chosen(key, choice, value, "int64_param", "string_param")
        elif key in ("sequence_start", "sequence_end"):
            plain[key] = _chosen(key, choice, value, "bool_param")
        elif key.startswith(RESERVED_PREFIX):
            if key not in _ALLOWED_RESERVED:
                raise InvalidArgument(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. "
                    "Only the following keys starting with 'triton_' are allowed: "
                    + " ".join(sorted(_ALLOWED_RESERVED))
                )
            _chosen(key, choice, value, "bool_param")
        elif not choice:
            raise InvalidArgument(f"parameter '{key}' has no value")
        else:
            plain[key] = value
    return plain, priority, timeout_us


def empty_final_response_requested(request: Any) -> bool:
    """Whether a stream request asks for an empty final response after its response."""
    parameter = request.parameters.get(EMPTY_FINAL_RESPONSE)
    return (
        parameter is not None
        and parameter.WhichOneof("parameter_choice") == "bool_param"
        and parameter.bool_param
    )


# ------------------------------------------------------------------------------ inference


def decode_infer_request(
    request: Any,
    raw_input_contents: Sequence[Any] | None = None,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> InferRequest | SharedMemoryInferRequest:
    """A ``ModelInferRequest`` as an ``InferRequest``, or as a ``SharedMemoryInferRequest``
    when an input or requested output names a shared-memory region. ``raw_input_contents``,
    when given, replaces the message's own (the views ``framing.parse_infer_request``
    split off); raw contents are never copied. An input in typed ``contents`` whose values
    would take more than ``max_input_size`` bytes is refused before they are decoded."""
    model = request.model_name
    parameters, priority, timeout_us = _request_parameters(request.parameters)
    if raw_input_contents is None:
        raw_input_contents = request.raw_input_contents
    inputs = decode_inputs(request, raw_input_contents, max_input_size)
    output_regions: dict[str, SharedMemoryRef] = {}
    classification: dict[str, int] = {}
    outputs = tuple(_requested_output(output, output_regions, classification)
                    for output in request.outputs)
    in_shared_memory = any(isinstance(item, SharedMemoryInput) for item in inputs)
    infer_request = InferRequest(
        model=model,
        inputs=() if in_shared_memory else tuple(t for t in inputs if isinstance(t, Tensor)),
        version=request.model_version,
        id=request.id,
        outputs=outputs,
        parameters=parameters,
        priority=priority,
        timeout_us=timeout_us,
        classification=classification,
    )
    if in_shared_memory or output_regions:
        return SharedMemoryInferRequest(infer_request, inputs, output_regions)
    return infer_request


def decode_plain_infer_request(request: PlainInferRequest) -> InferRequest:
    """The ``InferRequest`` a plain request (``framing.scan_plain_infer_request``)
    asks for: what ``decode_infer_request`` makes of the same message, and the same errors."""
    model = request.model_name
    parameters, priority, timeout_us = _parameters_by_rule(request.parameters)
    raw_contents = request.raw_input_contents
    inputs = tuple(
        raw_input(model, tensor.name, tensor.datatype, tensor.shape, raw_contents[index])
        for index, tensor in enumerate(request.inputs)
    )
    return InferRequest(model=model, inputs=inputs, version=request.model_version,
                        id=request.id, outputs=tuple(request.outputs), parameters=parameters,
                        priority=priority, timeout_us=timeout_us)


def _requested_output(output: Any, regions: dict[str, SharedMemoryRef],
                      classification: dict[str, int]) -> str:
    """The output's name; its shared-memory region and classification count go to
    ``regions`` and ``classification`` (Triton's ``ParseClassificationParams``)."""
    name = str(output.name)
    location = shared_memory_location(output)
    if "classification" in output.parameters:
        parameter = output.parameters["classification"]
        if parameter.WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgument(
                "invalid value type for 'classification' parameter, expected int64_param"
            )
        if parameter.int64_param <= 0:
            raise InvalidArgument("invalid value for 'classification' parameter, expected >= 0")
        if location is not None:
            raise InvalidArgument(
                "output can't set both 'shared_memory_region' and 'classification'"
            )
        classification[name] = parameter.int64_param
    if location is not None:
        regions[name] = location
    return name


def encode_infer_response(
    response: InferResponse | SharedMemoryInferResponse, *, final: bool | None = None
) -> tuple[Any, list[Any]]:
    """An ``InferResponse`` as a ``ModelInferResponse`` without raw contents, and its
    outputs' raw bytes in output order (BYTES as 4-byte length-prefixed elements), which
    ``framing`` frames as ``raw_output_contents``: every output travels there.
    ``final`` sets the stream parameter ``triton_final_response``."""
    header = service_pb2.ModelInferResponse(
        model_name=response.model, model_version=response.version, id=response.id
    )
    raw_contents: list[Any] = []
    for tensor in response.outputs:
        header.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if isinstance(tensor, SharedMemoryOutput):
            raw_contents.append(b"")
        else:
            raw_contents.append(tensor_to_buffer(tensor))
    _set_parameters(header.parameters, response.parameters)
    if final is not None:
        header.parameters[FINAL_RESPONSE].bool_param = final
    return header, raw_contents


def serialize_infer_response(response: InferResponse | SharedMemoryInferResponse) -> bytes:
    """The bytes of the ``ModelInferResponse`` that answers with ``response``: written
    directly for a response without parameters whose outputs all travel inline, else
    through ``encode_infer_response``'s protobuf header."""
    if isinstance(response, InferResponse) and not response.parameters:
        outputs = response.outputs
        return serialize_plain_infer_response(
            response.model, response.version, response.id,
            [(tensor.name, tensor.datatype, tensor.shape) for tensor in outputs],
            [tensor_to_buffer(tensor) for tensor in outputs],
        )
    return serialize_framed_infer_response(*encode_infer_response(response))


def _stream_reply_to(request: Any) -> Any:
    infer_response = service_pb2.ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    infer_response.parameters[FINAL_RESPONSE].bool_param = True
    return infer_response


def encode_stream_error(request: Any, message: str) -> Any:
    """The stream response of a request that failed: the error in ``error_message``, the
    request's id (and model) in ``infer_response`` so the client knows which one failed."""
    return service_pb2.ModelStreamInferResponse(
        error_message=message, infer_response=_stream_reply_to(request)
    )


def encode_empty_final_response(request: Any) -> Any:
    """The output-less response that closes a request which asked for one
    (``triton_enable_empty_final_response``)."""
    return service_pb2.ModelStreamInferResponse(infer_response=_stream_reply_to(request))
