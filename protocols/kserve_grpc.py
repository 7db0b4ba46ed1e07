"""Conversion between the KServe v2 gRPC messages and inferd's messages.

Owns the mapping of every ``inference.GRPCInferenceService`` request and reply (the classes
tritonclient generates in ``tritonclient.grpc.service_pb2``; never a second copy of the
protos) to and from ``inferd.protocols.messages``: tensors in ``raw_input_contents`` or typed
``contents``, outputs always in ``raw_output_contents``, request parameters (the reserved
``priority``, ``timeout``, ``sequence_*`` and ``triton_*`` keys included), the streaming
``triton_final_response`` flag, model metadata, config, statistics, the repository API and
the system shared-memory extension (``shared_memory_*`` tensor parameters, the register,
unregister and status RPCs; an output written into a region travels with empty raw contents,
as Triton's, so the indices of ``raw_output_contents`` still match the outputs).
Every malformed request is refused with an ``InvalidArgument`` naming the problem (or
``Unsupported`` for a feature inferd does not have). The byte-level framing of the messages
that carry tensors is ``inferd.protocols.kserve_grpc_wire``'s. Pure: no I/O, no gRPC objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    Index,
    IndexRequest,
    InferRequest,
    InferResponse,
    LoadRequest,
    ModelConfigReply,
    ModelMetadata,
    ServerMetadata,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    SharedMemoryRegister,
    SharedMemoryStatus,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    Statistics,
    Tensor,
    UnloadRequest,
)
from inferd.protocols.tensors import (
    DEFAULT_MAX_INPUT_SIZE,
    checked_shape,
    element_size,
    numpy_dtype,
    tensor_from_buffer,
    tensor_to_buffer,
)

RESERVED_PREFIX = "triton_"
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
"""The one ``triton_``-prefixed request parameter a client may send (streaming only)."""
FINAL_RESPONSE = "triton_final_response"
"""Response parameter of a stream response: true on the last response to a request."""
FILE_PREFIX = "file:"

_ALLOWED_RESERVED = frozenset({EMPTY_FINAL_RESPONSE})
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

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


def _expect_choice(key: str, parameter: Any, *choices: str) -> Any:
    choice = parameter.WhichOneof("parameter_choice")
    if choice not in choices:
        expected = " or ".join(choices)
        raise InvalidArgument(f"invalid value type for '{key}' parameter, expected {expected}.")
    return getattr(parameter, choice)


def _request_parameters(parameters: Any) -> tuple[dict[str, Any], int, int]:
    """(custom parameters, priority, timeout in microseconds) of a ModelInferRequest."""
    plain: dict[str, Any] = {}
    priority = timeout_us = 0
    for key, parameter in parameters.items():
        if key == "priority":
            priority = _expect_choice(key, parameter, "int64_param", "uint64_param")
            if priority < 0:
                raise InvalidArgument("invalid value for 'priority', expected value >= 0.")
        elif key == "timeout":
            timeout_us = _expect_choice(key, parameter, "int64_param")
            if timeout_us < 0:
                raise InvalidArgument("invalid value for 'timeout', expected value >= 0.")
        elif key == "sequence_id":
            plain[key] = _expect_choice(key, parameter, "int64_param", "string_param")
        elif key in ("sequence_start", "sequence_end"):
            plain[key] = _expect_choice(key, parameter, "bool_param")
        elif key.startswith(RESERVED_PREFIX):
            if key not in _ALLOWED_RESERVED:
                raise InvalidArgument(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. "
                    "Only the following keys starting with 'triton_' are allowed: "
                    + " ".join(sorted(_ALLOWED_RESERVED))
                )
            _expect_choice(key, parameter, "bool_param")
        else:
            plain[key] = parameter_value(key, parameter)
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
    when given, replaces the message's own (the views ``kserve_grpc_wire.parse_infer_request``
    split off); raw contents are never copied. An input in typed ``contents`` whose values
    would take more than ``max_input_size`` bytes is refused before they are decoded."""
    model = request.model_name
    parameters, priority, timeout_us = _request_parameters(request.parameters)
    if raw_input_contents is None:
        raw_input_contents = request.raw_input_contents
    inputs = _decode_inputs(request, raw_input_contents, max_input_size)
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


def _shared_memory_location(tensor: Any) -> SharedMemoryRef | None:
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


def _requested_output(output: Any, regions: dict[str, SharedMemoryRef],
                      classification: dict[str, int]) -> str:
    """The output's name; its shared-memory region and classification count go to
    ``regions`` and ``classification`` (Triton's ``ParseClassificationParams``)."""
    name = str(output.name)
    location = _shared_memory_location(output)
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


def _decode_inputs(
    request: Any, raw_contents: Sequence[Any], max_input_size: int
) -> tuple[Tensor | SharedMemoryInput, ...]:
    model = request.model_name
    inputs = request.inputs
    locations = [_shared_memory_location(tensor) for tensor in inputs]
    # As tritonclient sends them: raw contents for the inputs not in shared memory only.
    inline_count = sum(location is None for location in locations)
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
            try:
                element_size(datatype)
            except InvalidArgument:
                raise InvalidArgument(
                    f"input '{name}' for model '{model}' has unknown datatype '{datatype}'"
                ) from None
            dims, _ = checked_shape(name, tensor.shape)
            tensors.append(SharedMemoryInput(name, datatype, dims, location))
            continue
        index = raw_index
        raw_index += 1
        try:
            size = element_size(datatype)
        except InvalidArgument:
            raise InvalidArgument(
                f"input '{name}' for model '{model}' has unknown datatype '{datatype}'"
            ) from None
        if tensor.HasField("contents"):
            if raw_contents:
                raise InvalidArgument(
                    "contents field must not be specified when using raw_input_contents "
                    f"for '{name}' for model '{model}'"
                )
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


def encode_infer_response(
    response: InferResponse | SharedMemoryInferResponse, *, final: bool | None = None
) -> tuple[Any, list[Any]]:
    """An ``InferResponse`` as a ``ModelInferResponse`` without raw contents, and its
    outputs' raw bytes in output order (BYTES as 4-byte length-prefixed elements), which
    ``kserve_grpc_wire`` frames as ``raw_output_contents``: every output travels there.
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


# ------------------------------------------------------------------------ model information


def encode_server_metadata(metadata: ServerMetadata) -> Any:
    return service_pb2.ServerMetadataResponse(
        name=metadata.name, version=metadata.version, extensions=metadata.extensions
    )


def encode_model_metadata(metadata: ModelMetadata) -> Any:
    reply = service_pb2.ModelMetadataResponse(
        name=metadata.name, versions=metadata.versions, platform=metadata.platform
    )
    for target, specs in ((reply.inputs, metadata.inputs), (reply.outputs, metadata.outputs)):
        for spec in specs:
            target.add(name=spec.name, datatype=spec.datatype, shape=spec.shape)
    return reply


def encode_model_config(reply: ModelConfigReply) -> Any:
    """The normalized config (Triton's JSON) as a ``ModelConfigResponse``; JSON fields the
    installed ModelConfig proto does not know are dropped."""
    config = model_config_pb2.ModelConfig()
    json_format.Parse(reply.config_json, config, ignore_unknown_fields=True)
    return service_pb2.ModelConfigResponse(config=config)


def encode_statistics(statistics: Statistics) -> Any:
    """Per-version statistics dicts (Triton's JSON shape) as a ``ModelStatisticsResponse``;
    keys the proto does not have (inferd's own breakdowns) are dropped."""
    reply = service_pb2.ModelStatisticsResponse()
    for model_stats in statistics.model_stats:
        json_format.ParseDict(model_stats, reply.model_stats.add(), ignore_unknown_fields=True)
    return reply


# ------------------------------------------------------------------------- repository API


def decode_index_request(request: Any) -> IndexRequest:
    return IndexRequest(ready_only=bool(request.ready))


def encode_index(index: Index) -> Any:
    """Triton's index; the message has no field for warnings, so a READY version's reason,
    empty in Triton, carries them (joined by "; ") when nothing else is to be said."""
    reply = service_pb2.RepositoryIndexResponse()
    for entry in index.entries:
        reply.models.add(
            name=entry.name, version=entry.version, state=entry.state,
            reason=entry.reason or "; ".join(entry.warnings),
        )
    return reply


def decode_load_request(request: Any) -> LoadRequest:
    """``config`` (a string_param holding ModelConfig JSON) and ``file:<version>/<path>``
    (bytes_param contents) parameters as a ``LoadRequest``."""
    model = request.model_name
    config = ""
    files: dict[str, bytes] = {}
    for key, parameter in request.parameters.items():
        if key == "config":
            config = _expect_choice(key, parameter, "string_param")
        elif key.startswith(FILE_PREFIX):
            files[key[len(FILE_PREFIX) :]] = _expect_choice(key, parameter, "bytes_param")
        else:
            raise InvalidArgument(
                f"unknown parameter '{key}' in the load request of model '{model}': "
                f"expected 'config' or '{FILE_PREFIX}<version>/<path>'"
            )
    return LoadRequest(model=model, config=config, files=files)


def decode_unload_request(request: Any) -> UnloadRequest:
    model = request.model_name
    unload_dependents = False
    for key, parameter in request.parameters.items():
        if key != "unload_dependents":
            raise InvalidArgument(
                f"unknown parameter '{key}' in the unload request of model '{model}': "
                "expected 'unload_dependents'"
            )
        unload_dependents = bool(_expect_choice(key, parameter, "bool_param"))
    return UnloadRequest(model=model, unload_dependents=unload_dependents)


# ------------------------------------------------------------- system shared memory


def decode_shared_memory_register(request: Any, memory: str = "system") -> SharedMemoryRegister:
    """A ``SystemSharedMemoryRegisterRequest`` (or, with ``memory="cuda"``, a
    ``CudaSharedMemoryRegisterRequest``, whose handle is not read: it is refused)."""
    if memory != "system":
        return SharedMemoryRegister(request.name, "", 0, memory=memory)
    return SharedMemoryRegister(request.name, request.key, request.byte_size, request.offset)


def decode_shared_memory_unregister(request: Any, memory: str = "system") -> SharedMemoryUnregister:
    return SharedMemoryUnregister(request.name, memory)


def decode_shared_memory_status(request: Any, memory: str = "system") -> SharedMemoryStatusRequest:
    return SharedMemoryStatusRequest(request.name, memory)


def encode_shared_memory_status(status: SharedMemoryStatus) -> Any:
    reply = service_pb2.SystemSharedMemoryStatusResponse()
    for region in status.regions:
        row = reply.regions[region.name]
        row.name, row.key = region.name, region.key
        row.offset, row.byte_size = region.offset, region.byte_size
    return reply
