"""The KServe v2 (Open Inference Protocol) REST codec, with Triton's binary tensor extension.

Owns the translation between HTTP bodies and inferd's messages: an infer request body (all
JSON, or a JSON header of ``Inference-Header-Content-Length`` bytes followed by the binary
inputs in input order, each sized by its ``binary_data_size``) into an ``InferRequest`` plus how
each output must travel back; an ``InferResponse`` into headers and body parts; the repository
API bodies; the system shared-memory extension (an input or requested output naming a region in
its ``shared_memory_*`` parameters becomes a ``SharedMemoryInferRequest``, an output written
into a region is answered without data, as Triton does; register bodies and status JSON); and
the JSON of every other reply. Every malformed body is refused with an
``InvalidArgument`` naming the problem, before anything is allocated from the client's numbers.
Pure: no sockets, no HTTP framing, no compression (``inferd.protocols.content_coding``).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from urllib.parse import parse_qsl
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    Catalog,
    CatalogRequest,
    Index,
    IndexRequest,
    InferRequest,
    InferResponse,
    LoadRequest,
    ModelMetadata,
    ServerMetadata,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryInput,
    SharedMemoryOutput,
    SharedMemoryRef,
    SharedMemoryRegister,
    SharedMemoryStatus,
    Statistics,
    Tensor,
    TensorSpec,
    UnloadRequest,
)
from inferd.protocols.tensors import (
    DEFAULT_MAX_INPUT_SIZE,
    checked_shape,
    element_size,
    from_numpy,
    numpy_dtype,
    tensor_from_buffer,
    tensor_to_buffer,
)

HEADER_LENGTH_HEADER = "Inference-Header-Content-Length"
MAX_JSON_DEPTH = 64
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
_INTEGER_KINDS = "iu"
_FLOAT_DATATYPES = frozenset({"FP16", "BF16", "FP32", "FP64"})
# JSON has no NaN or infinities. Triton writes them as the bare words NaN, Infinity and
# -Infinity, which strict parsers refuse; inferd writes these strings instead, which are valid
# JSON and which tritonclient's ``as_numpy`` (numpy) turns back into the same floats. Both
# forms are accepted in requests.
_NON_FINITE_TEXT = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


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


# ---------------------------------------------------------------------------- JSON bodies


def parse_json(body: bytes | memoryview, what: str) -> Any:
    """The JSON document of ``body`` (an empty body is ``None``); ``what`` names it in errors."""
    if not len(body):
        return None
    try:
        return json.loads(body if isinstance(body, bytes) else bytes(body))
    except RecursionError:
        raise InvalidArgument(
            f"malformed {what}: JSON nesting deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"malformed {what}: not UTF-8 text ({error.reason})") from None
    except ValueError as error:
        raise InvalidArgument(f"malformed {what}: {error}") from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _no_unknown_fields(document: dict[str, Any], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(document) - known)
    if unknown:
        names = ", ".join(f"'{name}'" for name in unknown)
        raise InvalidArgument(f"unknown field {names} in {what}")


def _boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a boolean, not {_json_type(value)}")
    return value


def _non_negative_int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {value!r}")
    return value


def dumps(document: Any) -> bytes:
    """Compact JSON; values JSON cannot hold (bytes, numpy scalars) are printed as text. A NaN
    or infinity here is a bug (tensors spell theirs out first): it raises ``ValueError``
    rather than send what strict parsers refuse."""
    return json.dumps(
        document, separators=(",", ":"), default=_printable, allow_nan=False
    ).encode("utf-8")


def _printable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, tuple):
        return list(value)
    return str(value)


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
    """
    view = memoryview(body).cast("B")
    if header_length is None:
        header_length = view.nbytes
    header = body if header_length == view.nbytes else view[:header_length]
    document = _object(parse_json(header, "inference request"), "the inference request")
    _no_unknown_fields(document, _REQUEST_FIELDS, "the inference request")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument(f"the request 'id' must be a string, not {_json_type(request_id)}")
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


def _request_parameters(value: Any) -> tuple[dict[str, Any], int, int, bool]:
    parameters = dict(_object(value, "the request 'parameters'"))
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
    default_binary = _boolean(
        parameters.pop("binary_data_output", False), "parameter 'binary_data_output'"
    )
    priority = _non_negative_int(parameters.pop("priority", 0), "parameter 'priority'")
    timeout_us = _non_negative_int(parameters.pop("timeout", 0), "parameter 'timeout'")
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
        raise InvalidArgument(f"the request 'inputs' must be an array, not {_json_type(value)}")
    tensors: list[Tensor | SharedMemoryInput] = []
    offset = 0
    for index, item in enumerate(value):
        entry = _object(item, f"request input {index}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"request input {index} has no 'name' string")
        what = f"input '{name}'"
        _no_unknown_fields(entry, _INPUT_FIELDS, what)
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
        parameters = _object(entry.get("parameters", {}), f"the 'parameters' of {what}")
        location = _shared_memory_location(parameters, what)
        if location is not None:
            if "data" in entry or "binary_data_size" in parameters:
                raise InvalidArgument(
                    f"{what} must give exactly one of 'data', 'parameters.binary_data_size' "
                    "and 'parameters.shared_memory_region'"
                )
            _no_unknown_fields(parameters, _SHARED_MEMORY_PARAMETERS, f"the 'parameters' of {what}")
            tensors.append(SharedMemoryInput(name, datatype, dims, location))
            continue
        if size is not None and count * size > max_input_size:
            raise InvalidArgument(
                f"{what} of shape {list(dims)} and datatype {datatype} needs {count * size} "
                f"bytes, more than the maximum input size of {max_input_size} bytes"
            )
        binary_size = _input_parameters(parameters, what)
        has_data = "data" in entry
        if (binary_size is None) == (not has_data):
            raise InvalidArgument(
                f"{what} must give exactly one of 'data' and 'parameters.binary_data_size'"
            )
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


def _input_parameters(parameters: dict[str, Any], what: str) -> int | None:
    _no_unknown_fields(parameters, frozenset({"binary_data_size"}), f"the 'parameters' of {what}")
    if "binary_data_size" not in parameters:
        return None
    return _non_negative_int(parameters["binary_data_size"], f"'binary_data_size' of {what}")


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
    byte_size = _non_negative_int(
        parameters[SHARED_MEMORY_BYTE_SIZE], f"'{SHARED_MEMORY_BYTE_SIZE}' of {what}"
    )
    offset = _non_negative_int(
        parameters.get(SHARED_MEMORY_OFFSET, 0), f"'{SHARED_MEMORY_OFFSET}' of {what}"
    )
    return SharedMemoryRef(region, byte_size, offset)


def tensor_from_json(
    name: str, datatype: str, dims: tuple[int, ...], count: int, data: Any, max_input_size: int
) -> Tensor:
    what = f"input '{name}'"
    if not isinstance(data, list):
        data = [data]  # a lone value for a one-element tensor
    if datatype == "BYTES":
        values = _flat_strings(data, what)
        if len(values) != count:
            raise InvalidArgument(_count_mismatch(what, len(values), dims, count))
        if sum(len(v) + 4 for v in values) > max_input_size:
            raise InvalidArgument(
                f"{what} holds more than the maximum input size of {max_input_size} bytes"
            )
        array = np.empty(count, dtype=object)
        array[:] = values
        return Tensor(name, datatype, dims, array.reshape(dims))
    parsed = _json_array(what, data)
    if parsed.dtype.kind in "UO" and datatype in _FLOAT_DATATYPES:
        parsed = _json_array(what, _spelled_out_floats(data))
    if parsed.size != count:
        raise InvalidArgument(_count_mismatch(what, parsed.size, dims, count))
    if parsed.dtype.kind in "fO" and datatype in ("UINT64", "INT64"):
        # numpy turns integers past int64 mixed with others into floats or objects.
        parsed = _exact_integers(what, datatype, _flatten(data, what), parsed.shape)
    _check_json_values(what, datatype, parsed)
    flat = parsed.reshape(dims)
    if datatype == "BF16":
        return from_numpy(name, flat.astype(np.float32), "BF16")
    return Tensor(name, datatype, dims, flat.astype(numpy_dtype(datatype)))


def _json_array(what: str, data: list[Any]) -> np.ndarray:
    try:
        return np.array(data)
    except ValueError as error:
        raise InvalidArgument(
            f"{what} 'data' is not a rectangular array of values: {error}"
        ) from None


def _spelled_out_floats(data: list[Any]) -> list[Any]:
    """``data`` with the strings "NaN", "Infinity" and "-Infinity" (at any depth) as floats."""
    return [
        _NON_FINITE_TEXT.get(item, item) if isinstance(item, str)
        else _spelled_out_floats(item) if isinstance(item, list) else item
        for item in data
    ]


def _count_mismatch(what: str, got: int, dims: tuple[int, ...], count: int) -> str:
    return f"{what} has {got} elements in 'data' but its shape {list(dims)} needs {count}"


def _check_json_values(what: str, datatype: str, parsed: np.ndarray) -> None:
    if parsed.size == 0:
        return
    kind = parsed.dtype.kind
    if datatype == "BOOL":
        if kind != "b":
            raise InvalidArgument(f"{what} of datatype BOOL needs true/false values in 'data'")
        return
    if datatype in _FLOAT_DATATYPES:
        if kind not in "iuf":
            raise InvalidArgument(f"{what} of datatype {datatype} needs numbers in 'data'")
        return
    if kind not in _INTEGER_KINDS:
        raise InvalidArgument(f"{what} of datatype {datatype} needs integers in 'data'")
    limits = np.iinfo(numpy_dtype(datatype))
    low, high = int(parsed.min()), int(parsed.max())
    if low < limits.min or high > limits.max:
        bad = low if low < limits.min else high
        raise InvalidArgument(f"{what}: value {bad} is out of range for datatype {datatype}")


def _exact_integers(
    what: str, datatype: str, values: list[Any], shape: tuple[int, ...]
) -> np.ndarray:
    if not all(type(value) is int for value in values):
        raise InvalidArgument(f"{what} of datatype {datatype} needs integers in 'data'")
    limits = np.iinfo(numpy_dtype(datatype))
    for value in values:
        if not limits.min <= value <= limits.max:
            raise InvalidArgument(f"{what}: value {value} is out of range for datatype {datatype}")
    return np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)


def _flat_strings(data: list[Any], what: str) -> list[bytes]:
    """The strings of a (nested) JSON array in order, encoded as UTF-8."""
    values = []
    for item in _flatten(data, what):
        if not isinstance(item, str):
            raise InvalidArgument(
                f"{what} of datatype BYTES needs strings in 'data', found {_json_type(item)}"
            )
        values.append(item.encode("utf-8", errors="surrogatepass"))
    return values


def _flatten(data: list[Any], what: str) -> list[Any]:
    """The leaves of a (nested) JSON array in order, its nesting bounded."""
    leaves: list[Any] = []
    stack = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            if len(stack) >= MAX_JSON_DEPTH:
                raise InvalidArgument(
                    f"{what} 'data' is nested deeper than {MAX_JSON_DEPTH} levels"
                )
            stack.append(iter(item))
        else:
            leaves.append(item)
    return leaves


_END = object()


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
        raise InvalidArgument(f"the request 'outputs' must be an array, not {_json_type(value)}")
    names: list[str] = []
    binary: dict[str, bool] = {}
    regions: dict[str, SharedMemoryRef] = {}
    classes: dict[str, int] = {}
    for index, item in enumerate(value):
        entry = _object(item, f"requested output {index}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"requested output {index} has no 'name' string")
        what = f"requested output '{name}'"
        _no_unknown_fields(entry, _OUTPUT_FIELDS, what)
        if name in binary:
            raise InvalidArgument(f"output '{name}' already exists in request")
        parameters = _object(entry.get("parameters", {}), f"the 'parameters' of {what}")
        location = _shared_memory_location(parameters, what)
        _no_unknown_fields(
            parameters, _SHARED_MEMORY_PARAMETERS | {"binary_data", "classification"},
            f"the 'parameters' of {what}"
        )
        names.append(name)
        binary[name] = _boolean(parameters.get("binary_data", False), f"'binary_data' of {what}")
        # As Triton: 0 asks for the values themselves.
        count = _non_negative_int(parameters.get("classification", 0),
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


def json_values(tensor: Tensor) -> list[Any]:
    data = np.asarray(tensor.data)
    if tensor.datatype == "BYTES":
        texts: list[Any] = []
        for item in data.flat:
            raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
            try:
                texts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidArgument(
                    f"output '{tensor.name}' holds bytes that are not UTF-8 text, which JSON "
                    "cannot carry; request it with binary_data: true"
                ) from None
        return texts
    if tensor.datatype == "BF16":
        bits = data.astype("<u2").astype("<u4") << np.uint32(16)
        data = bits.view("<f4")
    elif tensor.datatype == "FP16":
        data = data.astype(np.float32)
    values: list[Any] = data.ravel().tolist()
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        floats: list[float] = values
        values = [v if math.isfinite(v) else _non_finite_text(v) for v in floats]
    return values


def _non_finite_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


# --------------------------------------------------------------------------- repository API


def decode_index_request(body: bytes | memoryview) -> IndexRequest:
    """``{"ready": bool}``, or an empty body."""
    document = parse_json(body, "repository index request")
    if document is None:
        return IndexRequest()
    document = _object(document, "the repository index request")
    _no_unknown_fields(document, frozenset({"ready"}), "the repository index request")
    return IndexRequest(ready_only=_boolean(document.get("ready", False), "'ready'"))


def decode_load_request(model: str, body: bytes | memoryview) -> LoadRequest:
    """``{"parameters": {"config": "<JSON>", "file:<version>/<path>": "<base64>"}}``, or an
    empty body."""
    parameters = _repository_parameters(body, "model load request")
    config = parameters.pop("config", "")
    if isinstance(config, dict):
        config = json.dumps(config)
    if not isinstance(config, str):
        raise InvalidArgument(
            f"load parameter 'config' must be a JSON string, not {_json_type(config)}"
        )
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if not key.startswith("file:"):
            raise InvalidArgument(
                f"unknown load parameter '{key}' (expected 'config' or 'file:<version>/<path>')"
            )
        path = key[len("file:") :]
        if not path:
            raise InvalidArgument(f"load parameter '{key}' names no file")
        if not isinstance(value, str):
            raise InvalidArgument(f"load parameter '{key}' must be a base64 string")
        try:
            files[path] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument(f"load parameter '{key}' is not valid base64") from None
    return LoadRequest(model, config, files)


def decode_unload_request(model: str, body: bytes | memoryview) -> UnloadRequest:
    """``{"parameters": {"unload_dependents": bool}}``, or an empty body."""
    parameters = _repository_parameters(body, "model unload request")
    unload_dependents = _boolean(
        parameters.pop("unload_dependents", False), "unload parameter 'unload_dependents'"
    )
    if parameters:
        raise InvalidArgument(f"unknown unload parameter '{min(parameters)}'")
    return UnloadRequest(model, unload_dependents)


def _repository_parameters(body: bytes | memoryview, what: str) -> dict[str, Any]:
    document = parse_json(body, what)
    if document is None:
        return {}
    document = _object(document, f"the {what}")
    _no_unknown_fields(document, frozenset({"parameters"}), f"the {what}")
    return dict(_object(document.get("parameters", {}), f"the 'parameters' of the {what}"))


# -------------------------------------------------------------------------- other replies


def encode_server_metadata(metadata: ServerMetadata) -> bytes:
    return dumps(
        {
            "name": metadata.name,
            "version": metadata.version,
            "extensions": list(metadata.extensions),
        }
    )


def encode_model_metadata(metadata: ModelMetadata) -> bytes:
    def tensors(specs: Sequence[Any]) -> list[dict[str, Any]]:
        return [
            {"name": spec.name, "datatype": spec.datatype, "shape": [int(d) for d in spec.shape]}
            for spec in specs
        ]

    return dumps(
        {
            "name": metadata.name,
            "versions": list(metadata.versions),
            "platform": metadata.platform,
            "inputs": tensors(metadata.inputs),
            "outputs": tensors(metadata.outputs),
        }
    )


def encode_index(index: Index) -> bytes:
    """Triton's index rows: ``{"name"}`` alone for a model never loaded, else its version (when
    known), state and reason (when there is one); plus, an inferd extension, ``warnings``: the
    config fields a READY version's config sets that inferd ignores (when there are any), and
    ``catalog``: the model's catalog metadata (when it has a ``catalog.toml``)."""
    rows = []
    for entry in index.entries:
        row: dict[str, Any] = {"name": entry.name}
        if entry.version:
            row["version"] = entry.version
        if entry.state:
            row["state"] = entry.state
        if entry.reason:
            row["reason"] = entry.reason
        if entry.warnings:
            row["warnings"] = list(entry.warnings)
        if entry.catalog:
            row["catalog"] = entry.catalog
        rows.append(row)
    return dumps(rows)


def decode_catalog_request(query: str) -> CatalogRequest:
    """``GET v2/catalog``'s query string: ``label=KEY=VALUE`` (repeatable, all must match)
    and ``task=TASK``; anything else is ``InvalidArgument``."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query),
                          encoding="utf-8", errors="strict", max_num_fields=100)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidArgument(f"catalog filter: malformed query string: {error}") from None
    labels: list[tuple[str, str]] = []
    task: str | None = None
    for name, value in pairs:
        if name == "label":
            key, equals, wanted = value.partition("=")
            if not equals or not key:
                raise InvalidArgument(f"catalog filter label={value!r}: expected "
                                      "label=KEY=VALUE")
            labels.append((key, wanted))
        elif name == "task":
            if task is not None:
                raise InvalidArgument("catalog filter: 'task' is given more than once")
            if not value:
                raise InvalidArgument("catalog filter: 'task' is empty")
            task = value
        else:
            raise InvalidArgument(f"catalog filter: unknown parameter {name!r} (expected "
                                  "'label' or 'task')")
    return CatalogRequest(tuple(labels), task or "")


def catalog_document(catalog: Catalog) -> dict[str, Any]:
    """The model catalog (an inferd extension) as JSON: ``{"models": [...]}``, one object per
    model with every field of ``CatalogEntry`` (tensors as model metadata shows them)."""
    def tensors(specs: Sequence[TensorSpec]) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in specs]

    return {"models": [
        {
            "name": entry.name,
            "platform": entry.platform,
            "backend": entry.backend,
            "versions": list(entry.versions),
            "loadable_versions": list(entry.loadable),
            "state": entry.state,
            "reason": entry.reason,
            "inputs": tensors(entry.inputs),
            "outputs": tensors(entry.outputs),
            "metadata": entry.metadata,
            "error": entry.error,
        }
        for entry in catalog.entries
    ]}


def encode_catalog(catalog: Catalog) -> bytes:
    return dumps(catalog_document(catalog))


def encode_statistics(statistics: Statistics) -> bytes:
    return dumps({"model_stats": list(statistics.model_stats)})


def decode_shared_memory_register(
    name: str, body: bytes | memoryview, memory: str = "system"
) -> SharedMemoryRegister:
    """``{"key": str, "offset": int, "byte_size": int}`` (``offset`` optional) for a system
    region; a CUDA body (``raw_handle``, ``device_id``) is not read, as it is refused anyway."""
    document = parse_json(body, "shared memory register request")
    document = {} if document is None else _object(document, "the shared memory register request")
    if memory != "system":
        return SharedMemoryRegister(name, "", 0, memory=memory)
    if "key" not in document:
        raise InvalidArgument("Shared memory register request has no 'key' field")
    key = document["key"]
    if not isinstance(key, str):
        raise InvalidArgument(f"'key' must be a string, not {_json_type(key)}")
    offset = _non_negative_int(document.get("offset", 0), "'offset'")
    if "byte_size" not in document:
        raise InvalidArgument("Shared memory register request has no 'byte_size' field")
    byte_size = _non_negative_int(document["byte_size"], "'byte_size'")
    return SharedMemoryRegister(name, key, byte_size, offset)


def encode_shared_memory_status(status: SharedMemoryStatus) -> bytes:
    return dumps(
        [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in status.regions
        ]
    )


def encode_error(message: str) -> bytes:
    return dumps({"error": message})
