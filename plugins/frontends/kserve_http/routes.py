"""The KServe v2 REST routes: Triton's URL patterns (first match wins), the API group of each
(``--http-restricted-api``), and the handler of each method it allows. A handler turns a
request into a message with the codecs (``inferd.protocols.kserve_http.infer`` for infer,
``inferd.protocols.kserve_http.admin`` for the rest, ``generate``, ``logging_api``, ``trace_api``),
asks the data plane through the app, and turns the reply into a response; it raises ``InferdError``
for the app to answer. Large bodies are decoded and encoded in a worker thread.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

import anyio

from inferd.kernel.sdk import Trace, log_context, traced
from inferd.kernel.sdk.frontends import ResponseStream
from inferd.kernel.sdk.request_log import request_failed
from inferd.plugins.frontends.kserve_http.exchange import (
    OFFLOAD_BYTES,
    HttpRequest,
    HttpResponse,
    error_response,
    failed,
    json_response,
)
from inferd.protocols.kserve_http import generate as generate_codec
from inferd.protocols.kserve_http import infer as codec
from inferd.protocols.kserve_http import admin
from inferd.protocols import logging_api, trace_api
from inferd.protocols.errors import (
    DecoupledNotStreamed,
    ErrorCode,
    InferdError,
    Internal,
    Unsupported,
    http_status,
)
from inferd.protocols.messages import (
    Catalog,
    HealthRequest,
    HealthStatus,
    Index,
    InferResponse,
    LogSettingsReply,
    LogSettingsRequest,
    Message,
    ModelConfigReply,
    ModelConfigRequest,
    ModelMetadata,
    ModelMetadataRequest,
    ModelReadyRequest,
    PollRequest,
    ServerMetadata,
    ServerMetadataRequest,
    SharedMemoryInferResponse,
    SharedMemoryStatus,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
    Statistics,
    StatisticsRequest,
    Tensor,
    TraceSettingReply,
    TraceSettingRequest,
    VersionLabelsReply,
)
from inferd.protocols.names import model_name_problem

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_http.app import KserveHttpApp

Handler = Callable[["KserveHttpApp", HttpRequest], Coroutine[Any, Any, HttpResponse]]

_MODEL = r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
_REPOSITORY = r"/v2/repository(?:/[^/]+)?"
_SHARED_MEMORY = r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?"


async def health(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    reply = _expect(await app.ask(HealthRequest(request.path_arguments[0])), HealthStatus)
    return HttpResponse(200 if reply.ok else 400)


async def openapi(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """``GET v2/openapi.json`` (inferd extension): the OpenAPI 3 description of this API."""
    return json_response(openapi_document())


async def server_metadata(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    reply = _expect(await app.ask(ServerMetadataRequest()), ServerMetadata)
    return json_response(admin.encode_server_metadata(reply))


async def model_metadata(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model, version = _model_arguments(request)
    reply = _expect(await app.ask(ModelMetadataRequest(model, version)), ModelMetadata)
    return json_response(admin.encode_model_metadata(reply))


async def model_ready(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model, version = _model_arguments(request)
    reply = _expect(await app.ask(ModelReadyRequest(model, version)), HealthStatus)
    return HttpResponse(200) if reply.ok else error_response(400, "Model version not ready")


async def model_config(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model, version = _model_arguments(request)
    reply = _expect(await app.ask(ModelConfigRequest(model, version)), ModelConfigReply)
    return json_response(reply.config_json.encode("utf-8"))


async def model_statistics(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model, version = _model_arguments(request) if request.path_arguments else ("", "")
    reply = _expect(await app.ask(StatisticsRequest(model, version)), Statistics)
    return json_response(admin.encode_statistics(reply))


async def infer(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model, version = _model_arguments(request)
    body = request.body
    header_length = codec.parse_header_length(
        request.headers.get("inference-header-content-length"), len(body)
    )
    arguments = (model, version, body, header_length, app.max_input_size)
    if len(body) > OFFLOAD_BYTES:
        infer_request, encoding = await anyio.to_thread.run_sync(
            codec.decode_infer_request, *arguments
        )
    else:
        infer_request, encoding = codec.decode_infer_request(*arguments)
    trace = _begin_trace(app, model, request)
    try:
        pending = app.ask(infer_request)
        reply = await (pending if trace is None else traced(trace, pending))
    except DecoupledNotStreamed:
        raise Unsupported(DecoupledNotStreamed.endpoint_message("HTTP end point")) from None
    if not isinstance(reply, (InferResponse, SharedMemoryInferResponse)):
        raise Internal(f"the data plane answered {type(reply).__name__}, not InferResponse")
    json_bytes = sum(
        t.data.nbytes for t in reply.outputs
        if isinstance(t, Tensor) and not encoding.is_binary(t.name)
        and t.data.dtype.kind != "O"
    )
    if json_bytes > OFFLOAD_BYTES:
        encoded = await anyio.to_thread.run_sync(codec.encode_infer_response, reply, encoding)
    else:
        encoded = codec.encode_infer_response(reply, encoding)
    if trace is not None:
        trace.stamp("INFER_RESPONSE_COMPLETE")
    return HttpResponse(200, encoded.parts, encoded.headers, compressible=True, trace=trace)


def _begin_trace(app: KserveHttpApp, model: str, request: HttpRequest) -> Trace | None:
    tracer = app.dataplane.tracer
    trace = tracer.begin(model, request.headers.get("traceparent")) if tracer.active else None
    if trace is not None:
        trace.stamp("HTTP_RECV_START", request.received_ns or None)
        trace.stamp("HTTP_RECV_END")
    return trace


async def trace_setting(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """``GET/POST v2[/models/<m>]/trace/setting`` (Triton's trace extension)."""
    model = unquote(request.path_arguments[0] or "")
    message = (trace_api.decode_http_update(model, request.body) if request.method == "POST"
               else TraceSettingRequest(model))
    reply = _expect(await app.ask(message), TraceSettingReply)
    return json_response(trace_api.encode_http_reply(reply))


async def index(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    reply = _expect(await app.ask(admin.decode_index_request(request.body)), Index)
    return json_response(admin.encode_index(reply))


async def catalog(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """``GET v2/catalog[?label=K=V&task=T]`` (inferd extension): the model catalog."""
    reply = _expect(await app.ask(admin.decode_catalog_request(request.query)), Catalog)
    return json_response(admin.encode_catalog(reply))


async def load(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model = unquote(request.path_arguments[0])
    await app.ask(admin.decode_load_request(model, request.body))
    return HttpResponse(200)


async def unload(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    model = unquote(request.path_arguments[0])
    await app.ask(admin.decode_unload_request(model, request.body))
    return HttpResponse(200)


async def labels(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """``GET``/``POST v2/repository/models/<m>/labels`` (inferd extension): read or move
    the model's version labels; a move answers once the switch is done."""
    model = unquote(request.path_arguments[0])
    body = request.body if request.method == "POST" else b""
    reply = _expect(await app.ask(admin.decode_labels_request(model, body)),
                    VersionLabelsReply)
    return json_response(admin.encode_labels(reply))


async def poll(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """``POST v2/repository/poll`` (inferd extension): poll the repository now."""
    await app.ask(PollRequest())
    return HttpResponse(200)

# ``v2/{system,cuda}sharedmemory[/region/<name>]/<action>``: arguments (memory, name).


async def shared_memory_status(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    memory, name = _shared_memory_arguments(request)
    reply = await app.ask(SharedMemoryStatusRequest(name, memory))
    status = _expect(reply, SharedMemoryStatus)
    return json_response(admin.encode_shared_memory_status(status, memory))


async def shared_memory_register(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    memory, name = _shared_memory_arguments(request)
    await app.ask(admin.decode_shared_memory_register(name, request.body, memory))
    return HttpResponse(200)


async def shared_memory_unregister(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    memory, name = _shared_memory_arguments(request)
    await app.ask(SharedMemoryUnregister(name, memory))
    return HttpResponse(200)


async def log_settings(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """Triton's logging extension: ``GET v2/logging`` reads, ``POST`` updates, then reads."""
    message = (logging_api.decode_http_request(request.body) if request.method == "POST"
               else LogSettingsRequest())
    reply = _expect(await app.ask(message), LogSettingsReply)
    return json_response(logging_api.encode_http_reply(reply))


# ------------------------------------------------------------------ generate extension


async def generate(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """Triton's generate: exactly one response, as a JSON object."""
    trace = _begin_trace(app, _model_arguments(request)[0], request)
    if trace is None:
        return await _generate(app, request)
    response = await traced(trace, _generate(app, request))
    trace.stamp("INFER_RESPONSE_COMPLETE")
    return dataclasses.replace(response, trace=trace)


async def _generate(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    stream = await _generate_stream(app, request)
    answers = [(result, final) async for result, final in stream]
    results = [result for result, _ in answers if result is not None]
    if len(results) != 1:
        # Triton sends this error after a 200 status line; the status says it here.
        return failed(500, generate_codec.NOT_ONE_RESPONSE)
    [result] = results
    if isinstance(result, InferdError):
        return failed(http_status(ErrorCode(result.code)), result.message)
    return json_response(generate_codec.encode_generate_response(result))


async def generate_stream(app: KserveHttpApp, request: HttpRequest) -> HttpResponse:
    """Triton's generate_stream: each response a Server-Sent Event, as it comes; a
    request refused before it runs is a JSON error with its status."""
    trace = _begin_trace(app, _model_arguments(request)[0], request)
    pending = _generate_stream(app, request)
    stream = await (pending if trace is None else traced(trace, pending))
    # The status line waits for the first answer (as Triton's does): a request refused
    # before it ran is answered with its status, not with a stream of one error.
    pending_first = stream.__anext__()
    first = await (pending_first if trace is None else traced(trace, pending_first))
    if isinstance(first[0], InferdError) and first[1]:
        refused = failed(http_status(ErrorCode(first[0].code)), first[0].message)
        return dataclasses.replace(refused, trace=trace)

    async def events() -> AsyncIterator[bytes]:
        result, final = first
        while True:
            document = None
            if isinstance(result, InferdError):
                request_failed(http_status(ErrorCode(result.code)), result.message)
                document = generate_codec.error_document(result.message)
            elif result is not None:  # None: the final flag alone
                document = generate_codec.encode_generate_response(result)
            if document is not None:
                if trace is not None:
                    trace.stamp("INFER_RESPONSE_COMPLETE")
                yield generate_codec.server_sent_event(document)
            if final:
                return
            result, final = await stream.__anext__()

    return HttpResponse(200, headers=tuple(generate_codec.event_stream_headers()),
                        stream=events(), trace=trace)


async def _generate_stream(app: KserveHttpApp, request: HttpRequest) -> ResponseStream:
    model, version = _model_arguments(request)
    metadata = _expect(await app.ask(ModelMetadataRequest(model, version)), ModelMetadata)
    infer_request = generate_codec.decode_generate_request(
        model, version, request.body, metadata, app.max_input_size)
    return await app.dataplane.stream(infer_request)


@functools.cache
def openapi_document() -> bytes:
    """``inferd/protocols/kserve_http/openapi.json``, read once: the description this frontend
    serves."""
    return importlib.resources.files("inferd.protocols.kserve_http").joinpath(
        "openapi.json").read_bytes()


def _shared_memory_arguments(request: HttpRequest) -> tuple[str, str]:
    memory, name = request.path_arguments[0], request.path_arguments[1]
    return memory, unquote(name or "")


def _model_arguments(request: HttpRequest) -> tuple[str, str]:
    model, version = unquote(request.path_arguments[0]), request.path_arguments[1] or ""
    if not model_name_problem(model):  # a body the codec refuses still names its model
        log_context.note(model, version)
    return model, version


M = TypeVar("M", bound=Message)


def _expect(reply: Message, kind: type[M]) -> M:
    if not isinstance(reply, kind):
        raise Internal(f"the data plane answered {type(reply).__name__}, not {kind.__name__}")
    return reply


ROUTE_TABLE: tuple[tuple[str, str, dict[str, Handler]], ...] = (
    (r"/v2", "metadata", {"GET": server_metadata}),
    (r"/v2/health/(live|ready)", "health", {"GET": health}),
    (r"/v2/openapi\.json", "metadata", {"GET": openapi}),
    (r"/v2/models/stats", "statistics", {"GET": model_statistics}),
    (_MODEL, "metadata", {"GET": model_metadata}),
    (_MODEL + "/ready", "health", {"GET": model_ready}),
    (_MODEL + "/config", "model-config", {"GET": model_config}),
    (_MODEL + "/stats", "statistics", {"GET": model_statistics}),
    (_MODEL + "/infer", "inference", {"POST": infer}),
    (_MODEL + "/generate", "inference", {"POST": generate}),
    (_MODEL + "/generate_stream", "inference", {"POST": generate_stream}),
    (_REPOSITORY + "/index", "model-repository", {"POST": index}),
    (_REPOSITORY + "/poll", "model-repository", {"POST": poll}),
    (r"/v2/catalog", "model-repository", {"GET": catalog}),
    (_REPOSITORY + "/models/([^/]+)/load", "model-repository", {"POST": load}),
    (_REPOSITORY + "/models/([^/]+)/unload", "model-repository",
     {"POST": unload}),
    (_REPOSITORY + "/models/([^/]+)/labels", "model-repository",
     {"GET": labels, "POST": labels}),
    (r"/v2/logging", "logging",
     {"GET": log_settings, "POST": log_settings}),
    (r"/v2(?:/models/([^/]+))?/trace/setting", "trace",
     {"GET": trace_setting, "POST": trace_setting}),
    (_SHARED_MEMORY + "/status", "shared-memory", {"GET": shared_memory_status}),
    (_SHARED_MEMORY + "/register", "shared-memory",
     {"POST": shared_memory_register}),
    (_SHARED_MEMORY + "/unregister", "shared-memory",
     {"POST": shared_memory_unregister}),
)
"""Triton's URL patterns, first match wins: the API group (``--http-restricted-api``) of
each, and the handler of each method it allows."""
_ROUTES = tuple((re.compile(pattern), group, handlers)
                for pattern, group, handlers in ROUTE_TABLE)


def match(path: str) -> tuple[dict[str, Handler], tuple[str, ...], str] | None:
    for pattern, group, handlers in _ROUTES:
        found = pattern.fullmatch(path)
        if found is not None:
            return handlers, found.groups(), group
    return None
