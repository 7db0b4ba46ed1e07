"""The KServe v2 gRPC frontend: ``inference.GRPCInferenceService`` on a ``grpc.aio`` server in
the main process's event loop.

Owns the server (its options, its bind, its start and stop), the servicer, and the one place
where this protocol turns exceptions into gRPC statuses (or, inside ``ModelStreamInfer``, into
a stream response's ``error_message``). Each RPC is a few lines: convert with
``inferd.protocols.kserve_grpc``, ``await dataplane.handle``, convert back. The service is
registered from its protobuf descriptor so that ``ModelInfer`` and ``ModelStreamInfer`` use
``inferd.protocols.kserve_grpc_wire``'s framing, which leaves tensor bytes uncopied. It decides
nothing about models or inference, and never lets one request's failure end a stream or the
server.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.kernel import log_context
from inferd.kernel.frontend import Frontend
from inferd.kernel.request_log import request_failed
from inferd.kernel.server import StartupFailed
from inferd.kernel.tls import read_certificates, read_key_pair
from inferd.kernel.tracing import CURRENT, traced
from inferd.protocols import kserve_grpc as convert
from inferd.protocols import kserve_grpc_wire as wire
from inferd.protocols import logging_api
from inferd.protocols import trace_api
from inferd.protocols.restrictions import (
    GRPC_HEADER_PREFIX,
    GRPC_METHOD_GROUPS,
    Restriction,
    grpc_refusal,
    restrictions,
)
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE
from inferd.plugins.frontends.kserve_grpc import (
    DEFAULT_HANDSHAKE_TIMEOUT_SECS,
    DEFAULT_MAX_CONNECTION_IDLE_SECS,
)
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    DecoupledNotStreamed,
    InferdError,
    Internal,
    InvalidArgument,
    Unavailable,
    Unsupported,
    grpc_status_name,
    http_status,
)
from inferd.protocols.messages import (
    Ack,
    HealthRequest,
    HealthStatus,
    Index,
    InferRequest,
    InferResponse,
    LogSettingsReply,
    Message,
    ModelConfigReply,
    ModelConfigRequest,
    ModelMetadata,
    ModelMetadataRequest,
    ModelReadyRequest,
    ServerMetadata,
    ServerMetadataRequest,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryStatus,
    Statistics,
    StatisticsRequest,
    TraceSettingReply,
)

if TYPE_CHECKING:
    from inferd.kernel.dataplane import DataPlane
    from inferd.kernel.settings import Settings

logger = logging.getLogger(__name__)


# From this size on a ModelInfer message gets the steps that keep the main process near the
# copies of it that gRPC itself makes; below it they would cost more time than they save.
LARGE_MESSAGE_BYTES = 16 * 2**20


def server_options(
    max_input_size: int,
    handshake_timeout_secs: float = DEFAULT_HANDSHAKE_TIMEOUT_SECS,
    max_connection_idle_secs: float = DEFAULT_MAX_CONNECTION_IDLE_SECS,
) -> Sequence[tuple[str, Any]]:
    """The ``grpc.aio.server`` options for requests of at most ``max_input_size`` bytes and
    connections that must be set up within ``handshake_timeout_secs`` and are closed (GOAWAY;
    clients reconnect on their next call) after ``max_connection_idle_secs`` without a call."""
    return (
        # A connection that never completes its HTTP/2 (and TLS) set-up holds a descriptor;
        # gRPC's own default waits two minutes.
        ("grpc.server_handshake_timeout_ms", int(handshake_timeout_secs * 1000)),
        ("grpc.max_connection_idle_ms", int(max_connection_idle_secs * 1000)),
        # Replies carry the model's outputs, whose size the client chose by its inputs.
        ("grpc.max_send_message_length", -1),
        # gRPC refuses a larger request from its length prefix, with RESOURCE_EXHAUSTED,
        # before reading its body: an oversized message never costs its size in memory.
        ("grpc.max_receive_message_length", max_input_size),
        # Without this a second server could bind the same port and silently share its traffic.
        ("grpc.so_reuseport", 0),
    )


# Seconds the in-flight RPCs get once the server is cancelled; the server's shutdown has
# already drained the data plane by then, so this only covers replies still being written.
STOP_GRACE_SECS = 1.0

# Responses of one stream that may wait behind an earlier, slower one; past this the stream
# stops reading, so gRPC flow control slows the client down.
STREAM_WINDOW = 1024

ReplyT = TypeVar("ReplyT", bound=Message)


class KserveGrpcFrontend(Frontend):
    name = "kserve_grpc"

    def __init__(self, dataplane: DataPlane, settings: Settings) -> None:
        super().__init__(dataplane, settings)
        self.accepting = True
        self.max_input_size = int(
            settings.options.get("grpc_max_input_size", DEFAULT_MAX_INPUT_SIZE)
        )
        try:
            self.restricted = restrictions(settings.options.get("grpc_restricted_protocol", ()),
                                           "--grpc-restricted-protocol")
        except ValueError as error:
            raise StartupFailed(str(error)) from None
        self.credentials = _credentials(settings.options)

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # grpc.aio binds the server to the event loop running when it is created.
        interceptors = [_Restricted(self.restricted)] if self.restricted else []
        options = self.settings.options
        server = grpc.aio.server(
            options=server_options(
                self.max_input_size,
                float(options.get("grpc_handshake_timeout_secs")
                      or DEFAULT_HANDSHAKE_TIMEOUT_SECS),
                float(options.get("grpc_max_connection_idle_secs")
                      or DEFAULT_MAX_CONNECTION_IDLE_SECS),
            ),
            interceptors=interceptors)
        server.add_generic_rpc_handlers((service_handler(InferenceServicer(self)),))
        try:
            address = self._bind(server)
            await server.start()
            logger.info("gRPC frontend listening on %s", address)
            task_status.started(address)
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop(STOP_GRACE_SECS)

    async def stop_accepting(self) -> None:
        self.accepting = False

    def _bind(self, server: grpc.aio.Server) -> str:
        host = self.settings.grpc_address
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        target = f"{host}:{self.settings.grpc_port}"
        try:
            if self.credentials is None:
                port = server.add_insecure_port(target)
            else:
                port = server.add_secure_port(target, self.credentials)
        except RuntimeError:
            port = 0
        if not port:
            # grpc logs the system's reason (address in use, unknown host, ...) itself.
            raise OSError(
                f"the gRPC frontend cannot listen on {target}: the address is in use or not "
                "available on this host"
            )
        return f"{host}:{port}"

    def rpc(self, context: grpc.aio.ServicerContext[Any, Any], name: str) -> _Rpc:
        return _Rpc(context, name)

    async def ask(self, request: Message, reply_type: type[ReplyT]) -> ReplyT:
        """The data plane's reply to ``request``, which must be a ``reply_type``."""
        if not self.accepting:
            raise Unavailable(SHUTTING_DOWN)
        reply = await self.dataplane.handle(request)
        if not isinstance(reply, reply_type):
            raise Internal(
                f"the data plane answered a {request.kind()} with a {reply.kind()}, "
                f"not a {reply_type.__name__}"
            )
        return reply

    async def infer(
        self, request: wire.ParsedInferRequest
    ) -> InferResponse | SharedMemoryInferResponse:
        message = self._decoded(request)
        try:
            if isinstance(message, InferRequest):
                return await self.ask(message, InferResponse)
            return await self.ask(message, SharedMemoryInferResponse)
        except DecoupledNotStreamed:
            raise Unsupported(DecoupledNotStreamed.endpoint_message("ModelInfer RPC")) from None

    def _decoded(self, request: wire.ParsedInferRequest
                 ) -> InferRequest | SharedMemoryInferRequest:
        if request.error:
            raise InvalidArgument(request.error)
        return convert.decode_infer_request(
            request.header, request.raw_input_contents, self.max_input_size
        )

    async def stream_answer(self, request: wire.ParsedInferRequest,
                            write: Callable[[Any], Awaitable[None]]) -> None:
        """Write the stream responses to one ``ModelStreamInfer`` request as they come: one
        for a model that is not decoupled, any number for one that is. A failure is a
        response with ``error_message``, never an exception."""
        tracer = self.dataplane.tracer
        trace = tracer.begin(request.header.model_name) if tracer.active else None
        if trace is None:
            return await self._stream_answer(request, write)
        trace.stamp("GRPC_WAITREAD_END")

        async def traced_write(response: Any) -> None:
            trace.stamp("GRPC_SEND_START")
            await write(response)
            trace.stamp("GRPC_SEND_END")

        token = CURRENT.set(trace)  # this request's own task: its answer is awaited here
        try:
            await self._stream_answer(request, traced_write)
        finally:
            CURRENT.reset(token)
            trace.end()

    async def _stream_answer(self, request: wire.ParsedInferRequest,
                             write: Callable[[Any], Awaitable[None]]) -> None:
        header = request.header
        with log_context.request_context("gRPC", "ModelStreamInfer"):
            await self._stream_answer_logged(request, header, write)

    async def _stream_answer_logged(self, request: wire.ParsedInferRequest, header: Any,
                                    write: Callable[[Any], Awaitable[None]]) -> None:
        try:
            empty_final = convert.empty_final_response_requested(header)
            message = self._decoded(request)
            if not isinstance(message, InferRequest):  # shared memory: one response
                reply = await self.ask(message, SharedMemoryInferResponse)
                await self._write_response(write, reply, True, empty_final, header)
                return
            if not self.accepting:
                raise Unavailable(SHUTTING_DOWN)
            async for result, final in await self.dataplane.stream(message):
                if isinstance(result, InferdError):
                    _stream_failed(result)
                    await write(convert.encode_stream_error(header, result.message))
                elif result is not None:
                    await self._write_response(write, result, final, empty_final, header)
                elif empty_final:  # the final flag alone
                    await write(convert.encode_empty_final_response(header))
        except InferdError as error:
            _stream_failed(error)
            await write(convert.encode_stream_error(header, error.message))
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            request_failed(500, message, wire_status="error_message", exc_info=error)
            await write(convert.encode_stream_error(header, message))

    @staticmethod
    async def _write_response(write: Callable[[Any], Awaitable[None]],
                              reply: InferResponse | SharedMemoryInferResponse, final: bool,
                              empty_final: bool, header: Any) -> None:
        # Triton flags a request's last response final; asked for an empty final response,
        # no response with outputs is, and the empty one closes the request.
        response = convert.encode_infer_response(reply, final=final and not empty_final)
        await write(wire.serialize_stream_response(*response))
        if final and empty_final:
            await write(convert.encode_empty_final_response(header))


def _stream_failed(error: InferdError) -> None:
    """A stream response's ``error_message`` (the stream itself goes on)."""
    request_failed(http_status(error.code), error.message, wire_status="error_message")


class _Rpc:
    """``async with frontend.rpc(context, name):`` ends the RPC with the status an error's code
    maps to (the one place this frontend turns exceptions into statuses), and writes the
    request's one error line (``inferd.kernel.request_log``)."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any], name: str) -> None:
        self._context = context
        self._name = name
        self._token: contextvars.Token[log_context.RequestContext | None] | None = None

    async def __aenter__(self) -> None:
        self._token = log_context.CURRENT.set(log_context.RequestContext("gRPC", self._name))

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if error is None or isinstance(error, grpc.aio.AbortError):
                return
            if isinstance(error, InferdError):
                name = grpc_status_name(error.code)
                request_failed(http_status(error.code), error.message, wire_status=name)
                code = grpc.StatusCode[name]
                await self._context.abort(code, error.message)
            if isinstance(error, Exception):
                message = f"{type(error).__name__}: {error}"
                request_failed(500, message, wire_status="INTERNAL", exc_info=error)
                await self._context.abort(grpc.StatusCode.INTERNAL, message)
        finally:
            if self._token is not None:
                log_context.CURRENT.reset(self._token)


class _StreamSlot:
    """One stream request's place in the order responses are written in: its responses,
    written as they come."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[Any](math.inf)


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``inference.GRPCInferenceService`` over the data plane."""

    def __init__(self, frontend: KserveGrpcFrontend) -> None:
        self._frontend = frontend

    # ------------------------------------------------------------------ health and metadata

    async def ServerLive(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ServerLive"):
            status = await self._frontend.ask(HealthRequest("live"), HealthStatus)
            return service_pb2.ServerLiveResponse(live=status.ok)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ServerReady"):
            status = await self._frontend.ask(HealthRequest("ready"), HealthStatus)
            return service_pb2.ServerReadyResponse(ready=status.ok)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ModelReady"):
            message = ModelReadyRequest(request.name, request.version)
            status = await self._frontend.ask(message, HealthStatus)
            return service_pb2.ModelReadyResponse(ready=status.ok)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ServerMetadata"):
            metadata = await self._frontend.ask(ServerMetadataRequest(), ServerMetadata)
            return convert.encode_server_metadata(metadata)

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ModelMetadata"):
            message = ModelMetadataRequest(request.name, request.version)
            return convert.encode_model_metadata(await self._frontend.ask(message, ModelMetadata))

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ModelConfig"):
            message = ModelConfigRequest(request.name, request.version)
            return convert.encode_model_config(await self._frontend.ask(message, ModelConfigReply))

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "ModelStatistics"):
            message = StatisticsRequest(request.name, request.version)
            return convert.encode_statistics(await self._frontend.ask(message, Statistics))

    # ------------------------------------------------------------------ inference

    async def ModelInfer(self, request: wire.ParsedInferRequest, context: Any) -> bytes:
        async with self._frontend.rpc(context, "ModelInfer"):
            tracer = self._frontend.dataplane.tracer
            trace = (tracer.begin(request.header.model_name, _traceparent(context))
                     if tracer.active else None)
            if trace is not None:
                trace.stamp("GRPC_WAITREAD_END")
            pending = self._frontend.infer(request)
            reply = await (pending if trace is None else traced(trace, pending))
            if trace is not None:
                trace.stamp("GRPC_SEND_START")
            header, raw_output_contents = convert.encode_infer_response(reply)
            response = wire.serialize_infer_response(header, raw_output_contents)
            del reply, raw_output_contents
            if trace is not None:  # handed to gRPC, which sends it once this returns
                trace.stamp("GRPC_SEND_END")
                trace.end()
            if len(response) >= LARGE_MESSAGE_BYTES:
                # The reply's outputs stay alive as long as the event loop step that handed
                # them over runs, and gRPC copies the response within the step this returns
                # in: yielding first frees them before that copy rather than after.
                await anyio.lowlevel.checkpoint()
            return response

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[Any], context: Any) -> None:
        # Requests run concurrently; their responses are written in request order (a
        # decoupled model's as they come, once the requests before it have finished).
        send, receive = anyio.create_memory_object_stream[_StreamSlot](STREAM_WINDOW)

        async def answer(request: Any, slot: _StreamSlot) -> None:
            async with slot.send:
                await self._frontend.stream_answer(request, slot.send.send)

        async def read(tasks: anyio.abc.TaskGroup) -> None:
            async with send:
                async for request in request_iterator:
                    slot = _StreamSlot()
                    tasks.start_soon(answer, request, slot)
                    await send.send(slot)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read, tasks)
            async with receive:
                async for slot in receive:
                    async with slot.receive:
                        async for response in slot.receive:
                            await context.write(response)

    # ------------------------------------------------------------------ repository API

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "RepositoryIndex"):
            index = await self._frontend.ask(convert.decode_index_request(request), Index)
            return convert.encode_index(index)

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "RepositoryModelLoad"):
            await self._frontend.ask(convert.decode_load_request(request), Ack)
            return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "RepositoryModelUnload"):
            await self._frontend.ask(convert.decode_unload_request(request), Ack)
            return service_pb2.RepositoryModelUnloadResponse()

    # ------------------------------------------------------------------ shared memory

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "SystemSharedMemoryStatus"):
            message = convert.decode_shared_memory_status(request)
            status = await self._frontend.ask(message, SharedMemoryStatus)
            return convert.encode_shared_memory_status(status)

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "SystemSharedMemoryRegister"):
            await self._frontend.ask(convert.decode_shared_memory_register(request), Ack)
            return service_pb2.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "SystemSharedMemoryUnregister"):
            await self._frontend.ask(convert.decode_shared_memory_unregister(request), Ack)
            return service_pb2.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "CudaSharedMemoryStatus"):
            message = convert.decode_shared_memory_status(request, "cuda")
            await self._frontend.ask(message, SharedMemoryStatus)  # never lists a region
            return service_pb2.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "CudaSharedMemoryRegister"):
            await self._frontend.ask(convert.decode_shared_memory_register(request, "cuda"), Ack)
            return service_pb2.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "CudaSharedMemoryUnregister"):
            message = convert.decode_shared_memory_unregister(request, "cuda")
            await self._frontend.ask(message, Ack)
            return service_pb2.CudaSharedMemoryUnregisterResponse()

    # ------------------------------------------------------------------ logging and trace

    async def LogSettings(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "LogSettings"):
            message = logging_api.decode_grpc_request(request)
            reply = await self._frontend.ask(message, LogSettingsReply)
            return logging_api.encode_grpc_reply(reply)

    async def TraceSetting(self, request: Any, context: Any) -> Any:
        async with self._frontend.rpc(context, "TraceSetting"):
            message = trace_api.decode_grpc_request(request)
            reply = await self._frontend.ask(message, TraceSettingReply)
            return trace_api.encode_grpc_reply(reply, service_pb2.TraceSettingResponse)


def _credentials(options: dict[str, Any]) -> grpc.ServerCredentials | None:
    """tritonserver's ``--grpc-use-ssl[-mutual]``: the TLS credentials from the files named,
    each read and checked now; None for a plaintext server."""
    mutual = bool(options.get("grpc_use_ssl_mutual"))  # as Triton, it implies --grpc-use-ssl
    files = {flag: str(options.get(flag.removeprefix("--").replace("-", "_")) or "")
             for flag in ("--grpc-server-cert", "--grpc-server-key", "--grpc-root-cert")}
    if not (mutual or options.get("grpc_use_ssl")):
        for flag, path in files.items():
            if path:
                logger.warning("%s=%s is not used: gRPC serves plaintext without "
                               "--grpc-use-ssl=true", flag, path)
        return None
    needed = ["--grpc-server-cert", "--grpc-server-key"] + (["--grpc-root-cert"] if mutual else [])
    missing = [flag for flag in needed if not files[flag]]
    if missing:
        which = "--grpc-use-ssl-mutual" if mutual else "--grpc-use-ssl"
        raise StartupFailed(f"{which} needs {' and '.join(missing)}")
    pair = read_key_pair(files["--grpc-server-cert"], "--grpc-server-cert",
                         files["--grpc-server-key"], "--grpc-server-key")
    root = files["--grpc-root-cert"]
    roots = read_certificates(root, "--grpc-root-cert") if root else None
    return grpc.ssl_server_credentials(((pair.key, pair.certificate),), root_certificates=roots,
                                       require_client_auth=mutual)


# The RPCs whose requests and replies carry tensors: their raw contents bypass protobuf.
_TENSOR_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})


class _Restricted(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses calls of a restricted API group without its header (Triton's
    ``--grpc-restricted-protocol``), before any of the servicer's code runs."""

    def __init__(self, restricted: dict[str, Restriction]) -> None:
        self._restricted = restricted

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        group = GRPC_METHOD_GROUPS.get(details.method.rsplit("/", 1)[-1], "")
        restriction = self._restricted.get(group)
        if handler is None or restriction is None:
            return handler
        metadata = {key: value for key, value in (details.invocation_metadata or ())}
        if restriction.allows(metadata.get(GRPC_HEADER_PREFIX + restriction.key)):
            return handler
        message = grpc_refusal(restriction)

        async def refuse(request: Any, context: Any) -> Any:
            with log_context.request_context("gRPC", details.method.rsplit("/", 1)[-1]):
                request_failed(403, message, wire_status="UNAVAILABLE")
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)

        kinds = {(False, False): grpc.unary_unary_rpc_method_handler,
                 (False, True): grpc.unary_stream_rpc_method_handler,
                 (True, False): grpc.stream_unary_rpc_method_handler,
                 (True, True): grpc.stream_stream_rpc_method_handler}
        make = kinds[(handler.request_streaming, handler.response_streaming)]
        return make(refuse, request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)


def _traceparent(context: Any) -> str | None:
    """The W3C trace context a client sent in the call's metadata, if any."""
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            return str(value)
    return None


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """What a request that protobuf cannot parse is handed to its RPC as."""

    message: str


def _parse_infer_request(data: bytes) -> wire.ParsedInferRequest:
    if len(data) >= LARGE_MESSAGE_BYTES:
        _release_freed_heap()
    return wire.parse_infer_request(data)


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


def service_handler(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """``inference.GRPCInferenceService`` bound to ``servicer``, built from the service's
    descriptor: protobuf (de)serializers, except for the tensor RPCs; a request that does not
    parse is answered INVALID_ARGUMENT."""
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    handlers = {}
    for method in service.methods:
        behaviour = getattr(servicer, method.name)
        deserializer: Callable[[bytes], Any]
        if method.name in _TENSOR_RPCS:
            deserializer, serializer = _parse_infer_request, wire.serialize_reply
        else:
            request_class = getattr(service_pb2, method.input_type.name)
            response_class = getattr(service_pb2, method.output_type.name)
            deserializer, serializer = _tolerant(request_class), response_class.SerializeToString
            behaviour = _refusing_undecodable(behaviour)
        make_handler = (
            grpc.stream_stream_rpc_method_handler
            if method.client_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make_handler(
            behaviour, request_deserializer=deserializer, response_serializer=serializer
        )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
