"""``inference.GRPCInferenceService``'s RPCs, built from the service's protobuf descriptor and
bound to the servicer (``servicer``): as ``Method``s for the loop server (``loop_server``) and
as ``grpc.aio`` method handlers.

``ModelInfer`` and ``ModelStreamInfer`` take and give bytes in
``inferd.protocols.kserve_grpc.framing``'s framing, which leaves tensor bytes uncopied (a large
request first gives the C heap that gRPC freed back to the system); every other RPC has
protobuf's (de)serializers, except that a request protobuf cannot parse reaches no servicer
code and is answered INVALID_ARGUMENT. It owns the handlers only: what an RPC does is the
servicer's.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.request_log import request_failed
from inferd.protocols.kserve_grpc import framing as wire

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_grpc.servicer import InferenceServicer


# From this size on a ModelInfer message gets the steps that keep the main process near the
# copies of it that gRPC itself makes; below it they would cost more time than they save.
LARGE_MESSAGE_BYTES = 16 * 2**20

# The RPCs whose requests and replies carry tensors: their raw contents bypass protobuf.
_TENSOR_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """What a request that protobuf cannot parse is handed to its RPC as."""

    message: str


def _parse_infer_request(data: bytes) -> wire.ParsedInferRequest:
    if len(data) >= LARGE_MESSAGE_BYTES:
        _release_freed_heap()
    return wire.parse_infer_request(data)


def _parse_unary_infer_request(data: bytes) -> wire.ParsedInferRequest:
    """``ModelInfer``'s: a plain request is read without protobuf (a stream request keeps
    its protobuf header, which its responses echo)."""
    if len(data) >= LARGE_MESSAGE_BYTES:
        _release_freed_heap()
    return wire.parse_infer_request(data, plain=True)


def _release_freed_heap() -> None:
    """Give the C heap's free pages back to the system.

    gRPC receives a message into slices of a few MiB that it frees once it has joined them
    into the request's bytes. The allocator keeps that freed heap (a whole message's worth)
    as the process's own and cannot reuse it for the reply's large buffers, which it maps
    separately; without this the main process would hold one more copy of every large
    request than it uses.
    """
    malloc_trim = _malloc_trim()
    if malloc_trim is not None:
        malloc_trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    trim: Callable[[int], int] | None = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return trim  # None where the C library is not glibc


def _tolerant(request_class: Any) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return request_class.FromString(data)
        except DecodeError as error:
            return _Undecodable(f"malformed {request_class.__name__}: {error}")

    return deserialize


def _refusing_undecodable(method: Callable[[Any, Any], Awaitable[Any]]) -> Callable[..., Any]:
    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, _Undecodable):
            with log_context.request_context("gRPC", method.__name__):
                request_failed(400, request.message, wire_status="INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await method(request, context)

    return handle


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC of the service: the servicer's coroutine, its request's parser and its
    reply's serializer, and whether the client streams (``ModelStreamInfer``; every other
    RPC is unary)."""

    behaviour: Callable[..., Awaitable[Any]]
    deserialize: Callable[[bytes], Any]
    serialize: Callable[[Any], bytes]
    streaming: bool


def methods(servicer: InferenceServicer) -> dict[str, Method]:
    """``inference.GRPCInferenceService``'s RPCs by name, bound to ``servicer``, from the
    service's descriptor: protobuf (de)serializers, except for the tensor RPCs; a request
    that does not parse is answered INVALID_ARGUMENT."""
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    table = {}
    for method in service.methods:
        behaviour = getattr(servicer, method.name)
        deserializer: Callable[[bytes], Any]
        if method.name == "ModelInfer":
            deserializer, serializer = _parse_unary_infer_request, wire.serialize_reply
        elif method.name in _TENSOR_RPCS:
            deserializer, serializer = _parse_infer_request, wire.serialize_reply
        else:
            request_class = getattr(service_pb2, method.input_type.name)
            response_class = getattr(service_pb2, method.output_type.name)
            deserializer, serializer = _tolerant(request_class), response_class.SerializeToString
            behaviour = _refusing_undecodable(behaviour)
        table[method.name] = Method(behaviour, deserializer, serializer, method.client_streaming)
    return table


SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name


def service_handler(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """``methods(servicer)`` as ``grpc.aio``'s generic handler."""
    handlers = {}
    for name, method in methods(servicer).items():
        make_handler = (grpc.stream_stream_rpc_method_handler if method.streaming
                        else grpc.unary_unary_rpc_method_handler)
        handlers[name] = make_handler(method.behaviour, request_deserializer=method.deserialize,
                                      response_serializer=method.serialize)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
