"""Conversion between the KServe v2 gRPC messages outside inference and inferd's messages:
server and model metadata, model config (Triton's JSON into tritonclient's ``ModelConfig``
proto), statistics, the repository API (index, load with its ``config`` and
``file:<version>/<path>`` parameters, unload) and the system shared-memory extension's
register, unregister and status RPCs, system and CUDA. Every
malformed request is refused with an ``InvalidArgument`` naming the problem. Inference is
``inferd.protocols.kserve_grpc.infer``'s. Pure: no I/O, no gRPC objects.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.kserve_grpc.infer import expect_choice
from inferd.protocols.kserve_http.admin import version_list
from inferd.protocols.messages import (
    Index,
    IndexRequest,
    LoadRequest,
    ModelConfigReply,
    ModelMetadata,
    ServerMetadata,
    SharedMemoryRegister,
    SharedMemoryStatus,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    Statistics,
    UnloadRequest,
)

FILE_PREFIX = "file:"


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
    versions: tuple[int, ...] = ()
    for key, parameter in request.parameters.items():
        if key == "config":
            config = expect_choice(key, parameter, "string_param")
        elif key == "versions":
            versions = _versions(parameter, "load")
        elif key.startswith(FILE_PREFIX):
            files[key[len(FILE_PREFIX) :]] = expect_choice(key, parameter, "bytes_param")
        else:
            raise InvalidArgument(
                f"unknown parameter '{key}' in the load request of model '{model}': "
                f"expected 'config', 'versions' or '{FILE_PREFIX}<version>/<path>'"
            )
    return LoadRequest(model=model, config=config, files=files, versions=versions)


def decode_unload_request(request: Any) -> UnloadRequest:
    model = request.model_name
    unload_dependents = False
    versions: tuple[int, ...] = ()
    for key, parameter in request.parameters.items():
        if key == "versions":
            versions = _versions(parameter, "unload")
            continue
        if key != "unload_dependents":
            raise InvalidArgument(
                f"unknown parameter '{key}' in the unload request of model '{model}': "
                "expected 'unload_dependents' or 'versions'"
            )
        unload_dependents = bool(expect_choice(key, parameter, "bool_param"))
    return UnloadRequest(model=model, unload_dependents=unload_dependents, versions=versions)


def _versions(parameter: Any, what: str) -> tuple[int, ...]:
    """The ``versions`` parameter (inferd's): one version as an int64_param, or a JSON list
    of them as a string_param ("[2, 3]"), checked as over HTTP."""
    value = expect_choice("versions", parameter, "int64_param", "string_param")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidArgument(f"{what} parameter 'versions' must be a JSON list of "
                                  f"version numbers, not {value[:40]!r}") from None
    else:
        value = [value]
    listed: tuple[int, ...] = version_list(value, what)
    return listed


# ------------------------------------------------------------- system shared memory


def decode_shared_memory_register(request: Any, memory: str = "system") -> SharedMemoryRegister:
    """A ``SystemSharedMemoryRegisterRequest`` (or, with ``memory="cuda"``, a
    ``CudaSharedMemoryRegisterRequest``: its raw ``cudaIpcMemHandle_t`` and device)."""
    if memory == "cuda":
        return SharedMemoryRegister(request.name, "", request.byte_size, memory=memory,
                                    raw_handle=bytes(request.raw_handle),
                                    device_id=request.device_id)
    if memory != "system":
        return SharedMemoryRegister(request.name, "", 0, memory=memory)
    return SharedMemoryRegister(request.name, request.key, request.byte_size, request.offset)


def decode_shared_memory_unregister(request: Any, memory: str = "system") -> SharedMemoryUnregister:
    return SharedMemoryUnregister(request.name, memory)


def decode_shared_memory_status(request: Any, memory: str = "system") -> SharedMemoryStatusRequest:
    return SharedMemoryStatusRequest(request.name, memory)


def encode_shared_memory_status(status: SharedMemoryStatus, memory: str = "system") -> Any:
    if memory == "cuda":
        cuda = service_pb2.CudaSharedMemoryStatusResponse()
        for region in status.regions:
            entry = cuda.regions[region.name]
            entry.name, entry.device_id, entry.byte_size = (
                region.name, region.device_id, region.byte_size)
        return cuda
    reply = service_pb2.SystemSharedMemoryStatusResponse()
    for region in status.regions:
        row = reply.regions[region.name]
        row.name, row.key = region.name, region.key
        row.offset, row.byte_size = region.offset, region.byte_size
    return reply
