"""The flat layouts of the two kinds of every batch, ``InferBatch`` and ``BatchResult``, on the
kernel wire.

They cross the executor link once per batch, so they skip the generic walk of
``inferd.protocols.wire.codec`` (a nested packer and an ExtType per request and per tensor, each
unpacked by a hook): their values are packed as plain nested arrays in one call and rebuilt
by hand, with the same checks as ``inferd.protocols.wire.kinds``, from one unpack. The
header names them ``flat:<kind>``; one whose parameters hold more than plain values (a
tensor, a message, an array), or one of whose requests has output windows (CUDA shared
memory), takes the generic layout under its own name. The layouts follow
the dataclasses' field order, which the assertions below pin: a field added to one of these
kinds must be added here too. Owns these layouts only: the frames and the tensor descriptors
are the encoder's and decoder's (``wire``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    BatchResult,
    Failure,
    InferBatch,
    InferRequest,
    InferResponse,
    Message,
)
from inferd.protocols.wire.kinds import CODECS_BY_CLASS

if TYPE_CHECKING:
    from inferd.protocols.wire.codec import FrameDecoder, FrameEncoder


FLAT_PREFIX = "flat:"
_PLAIN_PARAMETER = frozenset({str, int, float, bool, bytes, type(None)})

_REQUEST_FIELDS = ("model", "inputs", "version", "id", "outputs", "parameters", "priority",
                   "timeout_us", "classification")
_RESPONSE_FIELDS = ("model", "version", "outputs", "id", "parameters")
# A request with output windows takes the generic layout (its encoder declines it).
assert CODECS_BY_CLASS[InferRequest].field_names == (*_REQUEST_FIELDS, "output_windows")
assert CODECS_BY_CLASS[InferResponse].field_names == _RESPONSE_FIELDS
assert CODECS_BY_CLASS[InferBatch].field_names == ("model", "version", "instance", "requests")
assert CODECS_BY_CLASS[BatchResult].field_names == ("results", "compute_ns", "started_ns")
assert CODECS_BY_CLASS[Failure].field_names == ("code", "message")


def _plain(parameters: dict[str, Any]) -> bool:
    return not parameters or all(type(v) in _PLAIN_PARAMETER for v in parameters.values())


def _flat_infer_batch(encoder: FrameEncoder, batch: InferBatch) -> tuple[Any, ...] | None:
    if not all(_plain(r.parameters) and not r.output_windows for r in batch.requests):
        return None
    describe = encoder.describe
    requests = tuple(
        (r.model, tuple(map(describe, r.inputs)), r.version, r.id, r.outputs, r.parameters,
         r.priority, r.timeout_us, r.classification)
        for r in batch.requests
    )
    return (batch.model, batch.version, batch.instance, requests)


def _flat_batch_result(encoder: FrameEncoder, result: BatchResult) -> tuple[Any, ...] | None:
    if not all(_plain(r.parameters) for r in result.results if type(r) is InferResponse):
        return None
    describe = encoder.describe
    results = tuple(
        (r.model, r.version, tuple(map(describe, r.outputs)), r.id, r.parameters)
        if isinstance(r, InferResponse) else (r.code, r.message)  # a Failure: two values
        for r in result.results
    )
    return (results, result.compute_ns, result.started_ns)


def _infer_batch_from(decoder: FrameDecoder, values: tuple[Any, ...]) -> InferBatch:
    model, version, instance, requests = values
    _expect_types(("model", model, str), ("version", version, int),
                  ("instance", instance, int), ("requests", requests, tuple))
    tensors = decoder.tensors
    built = []
    for fields in requests:
        (name, inputs, version_text, request_id, outputs, parameters, priority, timeout,
         classification) = fields
        _expect_types(("model", name, str), ("version", version_text, str),
                      ("id", request_id, str), ("outputs", outputs, tuple),
                      ("parameters", parameters, dict), ("priority", priority, int),
                      ("timeout_us", timeout, int), ("classification", classification, dict))
        _expect_names("outputs", outputs)
        _expect_names("parameters", parameters)
        _expect_names("classification", classification)
        built.append(InferRequest(name, tensors(inputs), version_text, request_id, outputs,
                                  parameters, priority, timeout, classification))
    return InferBatch(model, version, instance, tuple(built))


def _batch_result_from(decoder: FrameDecoder, values: tuple[Any, ...]) -> BatchResult:
    results, compute_ns, started_ns = values
    _expect_types(("results", results, tuple), ("compute_ns", compute_ns, tuple),
                  ("started_ns", started_ns, int))
    if len(compute_ns) != 3 or not all(type(ns) is int for ns in compute_ns):
        raise InvalidArgument("BatchResult.compute_ns must be three integers")
    tensors = decoder.tensors
    built: list[InferResponse | Failure] = []
    for fields in results:
        if type(fields) is tuple and len(fields) == 2:
            code, message = fields
            _expect_types(("code", code, str), ("message", message, str))
            built.append(Failure(code, message))
            continue
        model, version, outputs, response_id, parameters = fields
        _expect_types(("model", model, str), ("version", version, str),
                      ("id", response_id, str), ("parameters", parameters, dict))
        _expect_names("parameters", parameters)
        built.append(InferResponse(model, version, tensors(outputs), response_id, parameters))
    return BatchResult(tuple(built), compute_ns, started_ns)


def _expect_types(*fields: tuple[str, Any, type]) -> None:
    for name, value, expected in fields:
        if type(value) is not expected:
            raise InvalidArgument(
                f"field '{name}' has a value of the wrong type ({type(value).__name__})"
            )


def _expect_names(field: str, values: tuple[Any, ...] | dict[Any, Any]) -> None:
    if not all(type(value) is str for value in values):
        raise InvalidArgument(f"field '{field}' holds a name that is not a string")


FLAT_ENCODERS: dict[type, Callable[[FrameEncoder, Any], tuple[Any, ...] | None]] = {
    InferBatch: _flat_infer_batch,
    BatchResult: _flat_batch_result,
}
FLAT_DECODERS: dict[str, Callable[[FrameDecoder, tuple[Any, ...]], Message]] = {
    FLAT_PREFIX + "InferBatch": _infer_batch_from,
    FLAT_PREFIX + "BatchResult": _batch_result_from,
}


def build_flat(kind: str, decoder: FrameDecoder, values: Any) -> Message:
    build = FLAT_DECODERS[kind]
    kind = kind.removeprefix(FLAT_PREFIX)
    if type(values) is not tuple:
        raise InvalidArgument(f"malformed {kind}: expected an array of field values")
    try:
        return build(decoder, values)
    except InvalidArgument as error:
        raise InvalidArgument(f"malformed {kind}: {error.message}") from None
    except (TypeError, ValueError) as error:  # a wrong count of values to unpack
        raise InvalidArgument(f"malformed {kind}: {error}") from None
