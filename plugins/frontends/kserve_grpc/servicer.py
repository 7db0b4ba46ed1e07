"""The KServe gRPC frontend's servicer: ``inference.GRPCInferenceService`` over the data plane.

Each RPC is a few lines inside ``Rpc`` (which turns its exceptions into statuses): convert the
request with ``inferd.protocols.kserve_grpc.infer`` (inference) or
``inferd.protocols.kserve_grpc.admin`` (the rest), ``ask`` the data plane, convert the reply back.
``ModelInfer`` takes and returns ``inferd.protocols.kserve_grpc.framing``'s framing (``service``);
``ModelStreamInfer`` runs its requests concurrently and writes their responses in request order
(each request's answer is ``streams``'). It decides nothing about models or inference, refuses new
requests once the frontend stops accepting, and never lets one request's failure end a stream or the
server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.kernel.sdk import traced
from inferd.plugins.frontends.kserve_grpc.rpc import Rpc, log_call
from inferd.plugins.frontends.kserve_grpc.service import LARGE_MESSAGE_BYTES
from inferd.plugins.frontends.kserve_grpc.streams import STREAM_WINDOW, StreamSlot, stream_answer
from inferd.protocols.kserve_grpc import infer as convert
from inferd.protocols.kserve_grpc import admin
from inferd.protocols.kserve_grpc import framing as wire
from inferd.protocols import logging_api, trace_api
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    DecoupledNotStreamed,
    Internal,
    InvalidArgument,
    Unavailable,
    Unsupported,
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
    from inferd.plugins.frontends.kserve_grpc.frontend import KserveGrpcFrontend

ReplyT = TypeVar("ReplyT", bound=Message)


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """``inference.GRPCInferenceService`` over the data plane."""

    def __init__(self, frontend: KserveGrpcFrontend) -> None:
        self.frontend = frontend
        self.dataplane = frontend.dataplane
        self.max_input_size = frontend.max_input_size

    async def ask(self, request: Message, reply_type: type[ReplyT]) -> ReplyT:
        """The data plane's reply to ``request``, which must be a ``reply_type``."""
        if not self.frontend.accepting:
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
        message = self.decode_infer(request)
        try:
            if isinstance(message, InferRequest):
                return await self.ask(message, InferResponse)
            return await self.ask(message, SharedMemoryInferResponse)
        except DecoupledNotStreamed:
            raise Unsupported(DecoupledNotStreamed.endpoint_message("ModelInfer RPC")) from None

    def decode_infer(self, request: wire.ParsedInferRequest
                     ) -> InferRequest | SharedMemoryInferRequest:
        """The message a received ``ModelInferRequest`` asks for; INVALID_ARGUMENT when its
        bytes did not parse or it is malformed."""
        if request.error:
            raise InvalidArgument(request.error)
        if request.plain is not None:
            return convert.decode_plain_infer_request(request.plain)
        return convert.decode_infer_request(
            request.header, request.raw_input_contents, self.max_input_size
        )

    # ------------------------------------------------------------------ health and metadata

    async def ServerLive(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ServerLive"):
            status = await self.ask(HealthRequest("live"), HealthStatus)
            return service_pb2.ServerLiveResponse(live=status.ok)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ServerReady"):
            status = await self.ask(HealthRequest("ready"), HealthStatus)
            return service_pb2.ServerReadyResponse(ready=status.ok)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ModelReady"):
            message = ModelReadyRequest(request.name, request.version)
            status = await self.ask(message, HealthStatus)
            return service_pb2.ModelReadyResponse(ready=status.ok)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ServerMetadata"):
            metadata = await self.ask(ServerMetadataRequest(), ServerMetadata)
            return admin.encode_server_metadata(metadata)

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ModelMetadata"):
            message = ModelMetadataRequest(request.name, request.version)
            return admin.encode_model_metadata(await self.ask(message, ModelMetadata))

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ModelConfig"):
            message = ModelConfigRequest(request.name, request.version)
            return admin.encode_model_config(await self.ask(message, ModelConfigReply))

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "ModelStatistics"):
            message = StatisticsRequest(request.name, request.version)
            return admin.encode_statistics(await self.ask(message, Statistics))

    # ------------------------------------------------------------------ inference

    async def ModelInfer(self, request: wire.ParsedInferRequest, context: Any) -> bytes:
        async with Rpc(context, "ModelInfer"):
            tracer = self.dataplane.tracer
            trace = (tracer.begin(request.model_name, _traceparent(context))
                     if tracer.active else None)
            if trace is not None:
                # gRPC hands the request over read: its wait ends as this handler starts.
                trace.stamp("GRPC_WAITREAD_START")
                trace.stamp("GRPC_WAITREAD_END")
            pending = self.infer(request)
            reply = await (pending if trace is None else traced(trace, pending))
            response = convert.serialize_infer_response(reply)
            del reply
            if trace is not None:  # handed to gRPC, which sends it once this returns
                trace.stamp("INFER_RESPONSE_COMPLETE")
                trace.stamp("GRPC_SEND_START")
                trace.stamp("GRPC_SEND_END")
                trace.end()
            if len(response) >= LARGE_MESSAGE_BYTES:
                # The reply's outputs stay alive as long as the event loop step that handed
                # them over runs, and gRPC copies the response within the step this returns
                # in: yielding first frees them before that copy rather than after.
                await anyio.lowlevel.checkpoint()
            return response

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[Any], context: Any) -> None:
        log_call("ModelStreamInfer")
        # Requests run concurrently; their responses are written in request order (a
        # decoupled model's as they come, once the requests before it have finished).
        send, receive = anyio.create_memory_object_stream[StreamSlot](STREAM_WINDOW)

        async def answer(request: Any, slot: StreamSlot) -> None:
            async with slot.send:
                await stream_answer(self, request, slot.send.send)

        async def read(tasks: anyio.abc.TaskGroup) -> None:
            async with send:
                async for request in request_iterator:
                    slot = StreamSlot()
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
        async with Rpc(context, "RepositoryIndex"):
            index = await self.ask(admin.decode_index_request(request), Index)
            return admin.encode_index(index)

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "RepositoryModelLoad"):
            await self.ask(admin.decode_load_request(request), Ack)
            return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "RepositoryModelUnload"):
            await self.ask(admin.decode_unload_request(request), Ack)
            return service_pb2.RepositoryModelUnloadResponse()

    # ------------------------------------------------------------------ shared memory

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "SystemSharedMemoryStatus"):
            message = admin.decode_shared_memory_status(request)
            status = await self.ask(message, SharedMemoryStatus)
            return admin.encode_shared_memory_status(status)

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "SystemSharedMemoryRegister"):
            await self.ask(admin.decode_shared_memory_register(request), Ack)
            return service_pb2.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "SystemSharedMemoryUnregister"):
            await self.ask(admin.decode_shared_memory_unregister(request), Ack)
            return service_pb2.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "CudaSharedMemoryStatus"):
            message = admin.decode_shared_memory_status(request, "cuda")
            status = await self.ask(message, SharedMemoryStatus)
            return admin.encode_shared_memory_status(status, "cuda")

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "CudaSharedMemoryRegister"):
            await self.ask(admin.decode_shared_memory_register(request, "cuda"), Ack)
            return service_pb2.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "CudaSharedMemoryUnregister"):
            message = admin.decode_shared_memory_unregister(request, "cuda")
            await self.ask(message, Ack)
            return service_pb2.CudaSharedMemoryUnregisterResponse()

    # ------------------------------------------------------------------ logging and trace

    async def LogSettings(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "LogSettings"):
            message = logging_api.decode_grpc_request(request)
            reply = await self.ask(message, LogSettingsReply)
            return logging_api.encode_grpc_reply(reply)

    async def TraceSetting(self, request: Any, context: Any) -> Any:
        async with Rpc(context, "TraceSetting"):
            message = trace_api.decode_grpc_request(request)
            reply = await self.ask(message, TraceSettingReply)
            return trace_api.encode_grpc_reply(reply, service_pb2.TraceSettingResponse)


def _traceparent(context: Any) -> str | None:
    """The W3C trace context a client sent in the call's metadata, if any."""
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            return str(value)
    return None
