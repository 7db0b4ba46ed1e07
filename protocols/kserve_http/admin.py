"""The KServe v2 REST bodies outside inference: the repository API (index, load with its
config and files, unload), server and model metadata, statistics, the model catalog (an
inferd extension) and the system shared-memory extension's register and status bodies. Each
malformed body is refused with an ``InvalidArgument`` naming the problem. Pure: no sockets,
no HTTP framing; the infer codec is ``inferd.protocols.kserve_http.infer``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from inferd.protocols.errors import InvalidArgument
# Results of these helpers are bound to typed names before they are returned: with
# ``ignore_missing_imports`` mypy sees every ``inferd.*`` import as ``Any``.
from inferd.protocols.json_bodies import (
    check_nesting,
    dumps,
    json_boolean,
    json_object,
    json_type,
    no_unknown_fields,
    non_negative_int,
    parse_json,
)
from inferd.protocols.messages import (
    Catalog,
    CatalogRequest,
    Index,
    IndexRequest,
    LabelsRequest,
    LoadRequest,
    ModelMetadata,
    ServerMetadata,
    SharedMemoryRegister,
    SharedMemoryStatus,
    Statistics,
    TensorSpec,
    UnloadRequest,
    VersionLabelsReply,
)


# --------------------------------------------------------------------------- repository API


def decode_index_request(body: bytes | memoryview) -> IndexRequest:
    """``{"ready": bool}``, or an empty body."""
    document = parse_json(body, "repository index request")
    if document is None:
        return IndexRequest()
    document = json_object(document, "the repository index request")
    no_unknown_fields(document, frozenset({"ready"}), "the repository index request")
    return IndexRequest(ready_only=json_boolean(document.get("ready", False), "'ready'"))


def decode_load_request(model: str, body: bytes | memoryview) -> LoadRequest:
    """``{"parameters": {"config": "<JSON>", "file:<version>/<path>": "<base64>",
    "versions": [3]}}``, or an empty body (``versions`` is inferd's)."""
    parameters = _repository_parameters(body, "model load request")
    versions = version_list(parameters.pop("versions", None), "load")
    config = parameters.pop("config", "")
    if isinstance(config, dict):
        config = json.dumps(config)
    if not isinstance(config, str):
        raise InvalidArgument(
            f"load parameter 'config' must be a JSON string, not {json_type(config)}"
        )
    # The repository parses it, under the same bound as the body around it.
    check_nesting(config.encode("utf-8", "surrogatepass"), "malformed load parameter 'config'")
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if not key.startswith("file:"):
            raise InvalidArgument(
                f"unknown load parameter '{key}' (expected 'config', 'versions' or "
                "'file:<version>/<path>')"
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
    return LoadRequest(model, config, files, versions)


def decode_unload_request(model: str, body: bytes | memoryview) -> UnloadRequest:
    """``{"parameters": {"unload_dependents": bool, "versions": [2]}}``, or an empty body
    (``versions`` is inferd's)."""
    parameters = _repository_parameters(body, "model unload request")
    unload_dependents = json_boolean(
        parameters.pop("unload_dependents", False), "unload parameter 'unload_dependents'"
    )
    versions = version_list(parameters.pop("versions", None), "unload")
    if parameters:
        raise InvalidArgument(f"unknown unload parameter '{min(parameters)}'")
    return UnloadRequest(model, unload_dependents, versions)


MAX_VERSIONS_PER_REQUEST = 64


def version_list(value: Any, what: str) -> tuple[int, ...]:
    """A ``versions`` parameter (inferd's): a non-empty list of distinct version numbers
    (integers >= 1); ``None`` (absent) is every version, as in Triton."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value or len(value) > MAX_VERSIONS_PER_REQUEST:
        raise InvalidArgument(f"{what} parameter 'versions' must be a list of 1 to "
                              f"{MAX_VERSIONS_PER_REQUEST} version numbers, not "
                              f"{json_type(value)}" + (" (empty)" if value == [] else ""))
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise InvalidArgument(f"{what} parameter 'versions' must hold version numbers "
                                  f"(integers >= 1), not {json.dumps(item)}")
    if len(set(value)) != len(value):
        raise InvalidArgument(f"{what} parameter 'versions' names a version twice")
    return tuple(sorted(value))


def decode_labels_request(model: str, body: bytes | memoryview) -> LabelsRequest:
    """``{"labels": {"stable": 4, "canary": null}, "canary_percent": 10}`` (inferd's): set
    labels, remove those set to null, set the canary's share; an empty body reads them."""
    document = parse_json(body, "version labels request")
    if document is None:
        return LabelsRequest(model)
    document = json_object(document, "the version labels request")
    no_unknown_fields(document, frozenset({"labels", "canary_percent"}),
                      "the version labels request")
    labels = json_object(document.get("labels", {}), "'labels'")
    percent = document.get("canary_percent", -1.0)
    if percent is None or isinstance(percent, bool) or not isinstance(percent, (int, float)) \
            or (percent != -1.0 and not 0 <= percent <= 100):
        raise InvalidArgument(f"'canary_percent' must be a number from 0 to 100, not "
                              f"{json.dumps(percent)}")
    moved: dict[str, int] = {}
    for name, version in labels.items():
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                    or version < 1):
            raise InvalidArgument(f"label '{name}' must name a version number (an integer "
                                  f">= 1) or be null (removed), not {json.dumps(version)}")
        if version is not None:
            moved[name] = version
    removed = tuple(sorted(name for name, version in labels.items() if version is None))
    return LabelsRequest(model, moved, removed, float(percent))


def encode_labels(reply: VersionLabelsReply) -> bytes:
    encoded: bytes = dumps({"model": reply.model, "labels": dict(sorted(reply.labels.items())),
                            "canary_percent": reply.canary_percent})
    return encoded


def _repository_parameters(body: bytes | memoryview, what: str) -> dict[str, Any]:
    document = parse_json(body, what)
    if document is None:
        return {}
    document = json_object(document, f"the {what}")
    no_unknown_fields(document, frozenset({"parameters"}), f"the {what}")
    return dict(json_object(document.get("parameters", {}), f"the 'parameters' of the {what}"))


# -------------------------------------------------------------------------- other replies


def encode_server_metadata(metadata: ServerMetadata) -> bytes:
    encoded: bytes = dumps(
        {
            "name": metadata.name,
            "version": metadata.version,
            "extensions": list(metadata.extensions),
        }
    )
    return encoded


def encode_model_metadata(metadata: ModelMetadata) -> bytes:
    def tensors(specs: Sequence[Any]) -> list[dict[str, Any]]:
        return [
            {"name": spec.name, "datatype": spec.datatype, "shape": [int(d) for d in spec.shape]}
            for spec in specs
        ]

    encoded: bytes = dumps(
        {
            "name": metadata.name,
            "versions": list(metadata.versions),
            "platform": metadata.platform,
            "inputs": tensors(metadata.inputs),
            "outputs": tensors(metadata.outputs),
        }
    )
    return encoded


def encode_index(index: Index) -> bytes:
    """Triton's index rows: ``{"name"}`` alone for a model never loaded, else its version (when
    known), state and reason (when there is one); plus, an inferd extension, ``warnings``: the
    config fields a READY version's config sets that inferd ignores (when there are any), and
    ``catalog``: the model's catalog metadata (when it has a ``catalog.toml``); with a memory
    budget, ``memory_bytes`` and ``last_used_ms`` of a READY version (when known); and
    ``memory``: what an unloaded version's load took and its unload gave back."""
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
        if entry.memory_bytes:
            row["memory_bytes"] = entry.memory_bytes
        if entry.last_used_ms:
            row["last_used_ms"] = entry.last_used_ms
        if entry.memory:
            row["memory"] = entry.memory
        rows.append(row)
    encoded: bytes = dumps(rows)
    return encoded


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
    encoded: bytes = dumps(catalog_document(catalog))
    return encoded


def encode_statistics(statistics: Statistics) -> bytes:
    encoded: bytes = dumps({"model_stats": list(statistics.model_stats)})
    return encoded


def decode_shared_memory_register(
    name: str, body: bytes | memoryview, memory: str = "system"
) -> SharedMemoryRegister:
    """``{"key": str, "offset": int, "byte_size": int}`` (``offset`` optional) for a system
    region; ``{"raw_handle": {"b64": str}, "device_id": int, "byte_size": int}`` for a CUDA
    one, the handle a base64 ``cudaIpcMemHandle_t``."""
    document = parse_json(body, "shared memory register request")
    document = ({} if document is None
                else json_object(document, "the shared memory register request"))
    if memory == "cuda":
        return _decode_cuda_register(name, document)
    if memory != "system":
        return SharedMemoryRegister(name, "", 0, memory=memory)
    if "key" not in document:
        raise InvalidArgument("Shared memory register request has no 'key' field")
    key = document["key"]
    if not isinstance(key, str):
        raise InvalidArgument(f"'key' must be a string, not {json_type(key)}")
    offset = non_negative_int(document.get("offset", 0), "'offset'")
    if "byte_size" not in document:
        raise InvalidArgument("Shared memory register request has no 'byte_size' field")
    byte_size = non_negative_int(document["byte_size"], "'byte_size'")
    return SharedMemoryRegister(name, key, byte_size, offset)


def _decode_cuda_register(name: str, document: dict[str, Any]) -> SharedMemoryRegister:
    if "raw_handle" not in document:
        raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
    raw = document["raw_handle"]
    encoded = raw.get("b64") if isinstance(raw, dict) else None
    if not isinstance(encoded, str):
        raise InvalidArgument("'raw_handle' must be an object with a base64 string 'b64'")
    for field in ("byte_size", "device_id"):
        if field not in document:
            raise InvalidArgument(f"Shared memory register request has no '{field}' field")
    byte_size = non_negative_int(document["byte_size"], "'byte_size'")
    device_id = non_negative_int(document["device_id"], "'device_id'")
    try:
        handle = base64.b64decode(encoded)
    except (binascii.Error, ValueError):
        handle = b""  # Triton's decoder is lenient; a bad handle fails the size check below
    return SharedMemoryRegister(name, "", byte_size, memory="cuda", raw_handle=handle,
                                device_id=device_id)


def encode_shared_memory_status(status: SharedMemoryStatus, memory: str = "system") -> bytes:
    """Triton's rows: name, key, offset and byte_size for system regions; name, device_id and
    byte_size for CUDA ones."""
    if memory == "cuda":
        rows = [{"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}
                for r in status.regions]
    else:
        rows = [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
                for r in status.regions]
    encoded: bytes = dumps(rows)
    return encoded
