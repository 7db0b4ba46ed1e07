"""The answers of ``ModelStreamInfer``: the stream responses to one request, written as they
come (one for a model that is not decoupled, any number for one that is, the
``triton_final_response`` flag on the last and, when asked for, an empty final response), and
each request's slot in the order the servicer writes them in. A request's failure, even an
unexpected exception, is a stream response with ``error_message`` (logged as the request's
one error line), never an exception: one request never ends the stream. It reads and writes
through the servicer (``servicer``) and decides nothing about models.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from inferd.kernel.sdk import CURRENT, log_context
from inferd.kernel.sdk.request_log import request_failed
from inferd.protocols.kserve_grpc import infer as convert
from inferd.protocols.kserve_grpc import framing as wire
from inferd.protocols.errors import SHUTTING_DOWN, InferdError, Unavailable, http_status
from inferd.protocols.messages import InferRequest, InferResponse, SharedMemoryInferResponse

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_grpc.servicer import InferenceServicer

# Responses of one stream that may wait behind an earlier, slower one; past this the stream
# stops reading, so gRPC flow control slows the client down.
STREAM_WINDOW = 1024


class StreamSlot:
    """One stream request's place in the order responses are written in: its responses,
    written as they come."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[Any](math.inf)


async def stream_answer(servicer: InferenceServicer, request: wire.ParsedInferRequest,
                        write: Callable[[Any], Awaitable[None]]) -> None:
    """Write the stream responses to one ``ModelStreamInfer`` request as they come: one
    for a model that is not decoupled, any number for one that is. A failure is a
    response with ``error_message``, never an exception."""
    tracer = servicer.dataplane.tracer
    trace = tracer.begin(request.header.model_name) if tracer.active else None
    if trace is None:
        return await _stream_answer(servicer, request, write)
    trace.stamp("GRPC_WAITREAD_START")
    trace.stamp("GRPC_WAITREAD_END")

    first = True

    async def traced_write(response: Any) -> None:
        nonlocal first
        if first:  # Triton stamps a stream request's first response only
            trace.stamp("INFER_RESPONSE_COMPLETE")
            first = False
        trace.stamp("GRPC_SEND_START")
        await write(response)
        trace.stamp("GRPC_SEND_END")

    token = CURRENT.set(trace)  # this request's own task: its answer is awaited here
    try:
        await _stream_answer(servicer, request, traced_write)
    finally:
        CURRENT.reset(token)
        trace.end()


async def _stream_answer(servicer: InferenceServicer, request: wire.ParsedInferRequest,
                         write: Callable[[Any], Awaitable[None]]) -> None:
    header = request.header
    with log_context.request_context("gRPC", "ModelStreamInfer"):
        await _stream_answer_logged(servicer, request, header, write)


async def _stream_answer_logged(servicer: InferenceServicer, request: wire.ParsedInferRequest,
                                header: Any, write: Callable[[Any], Awaitable[None]]) -> None:
    try:
        empty_final = convert.empty_final_response_requested(header)
        message = servicer.decode_infer(request)
        if not isinstance(message, InferRequest):  # shared memory: one response
            reply = await servicer.ask(message, SharedMemoryInferResponse)
            await _write_response(write, reply, True, empty_final, header)
            return
        if not servicer.frontend.accepting:
            raise Unavailable(SHUTTING_DOWN)
        stream = await servicer.dataplane.stream(message)
        empty_final = empty_final and stream.decoupled
        async for result, final in stream:
            if isinstance(result, InferdError):
                _stream_failed(result)
                await write(convert.encode_stream_error(header, result.message))
            elif result is not None:
                await _write_response(write, result, final, empty_final, header)
            elif empty_final:  # the final flag alone
                await write(convert.encode_empty_final_response(header))
    except InferdError as error:
        _stream_failed(error)
        await write(convert.encode_stream_error(header, error.message))
    except Exception as error:
        text = f"{type(error).__name__}: {error}"
        request_failed(500, text, wire_status="error_message", exc_info=error)
        await write(convert.encode_stream_error(header, text))


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
