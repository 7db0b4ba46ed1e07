"""What the response cache stores: the key of a request and the bytes of a response.

Triton's key hashes the model name, the version and each input's name and bytes. inferd's
holds everything a response depends on, so a cached answer can never be another request's:
the model, the version that serves it, a digest of the version's config (a reload with a
changed config under the same version number misses), every input's name, datatype, shape
and bytes (inputs sorted by name), and every other field of ``InferRequest`` that can change
the answer: the requested outputs (in their order) and the request's parameters. The request
id, priority and timeout change no answer and are left out; how a frontend encodes the
outputs (binary or JSON) is the frontend's business and not the cache's. A field added to
``InferRequest`` later is part of the key until it is named in ``NOT_IN_KEY``. The key is a
256-bit BLAKE2b digest, the same on every server, so servers sharing one Redis share entries.

An entry is msgpack of the response's outputs (name, datatype, shape, bytes) and parameters.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import msgpack
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import tensor_from_buffer, tensor_to_buffer

# Bumped whenever the key or the entry changes shape, so old entries in a shared Redis are
# never read as new ones.
FORMAT = "inferd-cache-1"
KEY_PREFIX = f"{FORMAT}:"
# The fields of InferRequest that are in the key in their own way, or change no answer.
IN_KEY_APART = frozenset({"model", "version", "inputs"})
NOT_IN_KEY = frozenset({"id", "priority", "timeout_us"})
# Config fields that say how a model is served, not what it answers: left out of the digest
# so servers with other instance counts or batching still share entries.
SERVING_FIELDS = ("instance_group", "dynamic_batching", "version_policy", "model_warmup",
                  "response_cache", "optimization", "metric_tags", "model_metrics")


class NotCacheable(Exception):
    """The request holds a value the key cannot be built from; it goes uncached."""


def config_digest(config: ModelConfig) -> bytes:
    """A digest of what in ``config`` decides a model's answers."""
    answering = ModelConfig()
    answering.CopyFrom(config)
    for name in SERVING_FIELDS:
        answering.ClearField(name)
    return hashlib.blake2b(answering.SerializeToString(deterministic=True),
                           digest_size=16).digest()


def request_key(model: str, version: int, digest: bytes, request: InferRequest) -> str:
    """The cache key of ``request`` served by ``version`` of ``model``."""
    inputs = sorted(request.inputs, key=lambda tensor: tensor.name)
    buffers = [memoryview(tensor_to_buffer(tensor)).cast("B") for tensor in inputs]
    others = {
        item.name: _canonical(getattr(request, item.name))
        for item in dataclasses.fields(request)
        if item.name not in IN_KEY_APART and item.name not in NOT_IN_KEY
    }
    head = msgpack.packb([
        FORMAT, model, version, digest,
        [[t.name, t.datatype, list(t.shape), b.nbytes] for t, b in zip(inputs, buffers,
                                                                          strict=True)],
        sorted(others.items()),
    ], use_bin_type=True)
    hasher = hashlib.blake2b(digest_size=32)
    hasher.update(len(head).to_bytes(8, "little"))
    hasher.update(head)
    for buffer in buffers:  # their lengths are in the head: the concatenation is unambiguous
        hasher.update(buffer)
    return KEY_PREFIX + hasher.hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` as msgpack packs it the same way every time (dicts sorted by key)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (tuple, list)):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return [[str(key), _canonical(item)] for key, item in sorted(value.items())]
    raise NotCacheable(f"a request field holds a {type(value).__name__}")


def encode_entry(response: InferResponse) -> bytes:
    """A successful response as the cache stores it."""
    outputs = [[t.name, t.datatype, list(t.shape), bytes(memoryview(tensor_to_buffer(t)))]
               for t in response.outputs]
    packed: bytes = msgpack.packb([FORMAT, outputs, _canonical(response.parameters)],
                                  use_bin_type=True)
    return packed


def decode_entry(entry: bytes, model: str, version: str, request_id: str) -> InferResponse:
    """The response an entry holds, answering the request ``request_id``; ``ValueError`` if
    the entry is not one ``encode_entry`` made."""
    try:
        marker, outputs, parameters = msgpack.unpackb(entry, raw=False, use_list=True)
        if marker != FORMAT:
            raise ValueError(f"an entry of format {marker!r}")
        tensors = tuple(_tensor(*item) for item in outputs)
        params = {str(key): value for key, value in parameters}
    except (TypeError, ValueError, InferdError, msgpack.UnpackException) as error:
        raise ValueError(f"not a response cache entry: {error}") from None
    return InferResponse(model=model, version=version, outputs=tensors, id=request_id,
                         parameters=params)


def _tensor(name: str, datatype: str, shape: list[int], data: bytes) -> Tensor:
    return tensor_from_buffer(name, datatype, shape, data)
