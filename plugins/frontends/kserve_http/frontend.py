"""The KServe v2 HTTP/REST frontend: a plain ASGI app served by uvicorn in the main event loop.

Owns the HTTP side only: the listening socket, the connection limits (head and body timeouts,
dropping clients that do not read, the connection cap; see ``connection``), the
table of Triton's URL patterns, reading bodies under ``--http-max-input-size`` (from
``Content-Length`` before reading, while reading, and after decompression), response
compression and slicing, and the single place where this protocol turns exceptions into
``{"error": ...}`` responses with the status of their error code (and writes the request's one
error line: ``inferd.kernel.request_log``). Bodies become messages and
replies become bodies in ``inferd.protocols.kserve_http``; every request is answered by the
data plane. No exception may reach uvicorn, and a client's numbers are checked
before anything is allocated from them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import logging
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

import anyio
import anyio.abc
import uvicorn

from inferd.kernel import log_context
from inferd.kernel.frontend import Frontend
from inferd.kernel.limits import open_file_limit
from inferd.kernel.request_log import request_failed
from inferd.kernel.server import StartupFailed
from inferd.kernel.tls import server_context
from inferd.plugins.frontends.kserve_http.connection import (
    ConnectionSweeper,
    GuardedHttpProtocol,
    HttpLimits,
)
from inferd.kernel.streams import ResponseStream
from inferd.kernel.tracing import CURRENT, Trace, traced
from inferd.protocols import content_coding
from inferd.protocols import generate as generate_codec
from inferd.protocols import json_bodies
from inferd.protocols import kserve_http as codec
from inferd.protocols import kserve_http_admin as admin
from inferd.protocols import logging_api
from inferd.protocols import trace_api
from inferd.protocols.errors import (
    DecoupledNotStreamed,
    ErrorCode,
    InferdError,
    Internal,
    InvalidArgument,
    Unsupported,
    http_status,
)
from inferd.protocols.names import model_name_problem
from inferd.protocols.restrictions import Restriction, http_refusal, restrictions
from inferd.protocols.messages import (
    HealthRequest,
    HealthStatus,
    Catalog,
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
)

if TYPE_CHECKING:
    from inferd.kernel.dataplane import DataPlane
    from inferd.kernel.settings import Settings

logger = logging.getLogger(__name__)
# Responses smaller than this are written in one piece; larger ones part by part, so tensor
# buffers are never copied into one big bytes object.
JOIN_BODY_BELOW = 256 * 1024
# Parts larger than this are written as views of this size: uvicorn waits for the transport's
# buffer to drain between writes, so a client that reads slowly (or never) holds at most
# about one slice in the transport rather than the whole response.
WRITE_SLICE_BYTES = 512 * 1024
# The default --http-max-connections: half the open-file limit leaves the other half to gRPC,
# metrics, zmq, executors and model files; past 16384 the connections' memory matters more.
MAX_CONNECTIONS_CEILING = 16384

# Bodies (or outputs) above this are decoded, encoded and compressed in a worker thread, so a
# large request never stalls the event loop that every other request shares.
OFFLOAD_BYTES = 1 << 20
BACKLOG = 2048
KEEP_ALIVE_BY_SWEEP = 24 * 3600
SHUTTING_DOWN = "server is shutting down"
JSON = (("content-type", "application/json"),)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path_arguments: tuple[str, ...]
    headers: dict[str, str]
    body: bytes | memoryview
    received_ns: int = 0  # when its head arrived, kept only while tracing
    query: str = ""  # the query string, decoded as latin-1 (only the catalog reads one)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    parts: tuple[bytes | memoryview, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    # Only infer responses: tritonclient decompresses those, yet sends Accept-Encoding (aiohttp's
    # default) on every call and would choke on any other compressed reply.
    compressible: bool = False
    # A body written as it is made (Server-Sent Events), after ``parts``; no content-length.
    stream: AsyncIterator[bytes] | None = None
    trace: Trace | None = None  # a traced inference: its send is stamped, then it ends

    @property
    def length(self) -> int:
        return sum(len(p) if isinstance(p, bytes) else p.nbytes for p in self.parts)


def json_response(body: bytes, status: int = 200) -> HttpResponse:
    return HttpResponse(status, (body,), JSON)


def error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, (json_bodies.encode_error(message),), JSON)


def _failed(status: int, message: str, error: BaseException | None = None) -> HttpResponse:
    """A request's error answer, and its one log line (``inferd.kernel.request_log``)."""
    request_failed(status, message, exc_info=error)
    return error_response(status, message)


class _ClientGone(Exception):
    """The client disconnected before its request body arrived."""


Handler = Callable[["KserveHttpApp", HttpRequest], Coroutine[Any, Any, HttpResponse]]

_MODEL = r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
_REPOSITORY = r"/v2/repository(?:/[^/]+)?"
_SHARED_MEMORY = r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?"


class KserveHttpApp:
    """The ASGI application: routes a request, reads its body, asks the data plane."""

    def __init__(self, dataplane: DataPlane, max_input_size: int,
                 restricted: dict[str, Restriction] | None = None) -> None:
        self.dataplane = dataplane
        self.max_input_size = max_input_size
        self.restricted = restricted or {}
        self.accepting = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        with log_context.request_context("HTTP", scope.get("method", "")):
            await self._answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await self._respond(scope, receive)
        except _ClientGone:
            return
        except Exception as error:
            response = _failed(500, f"{type(error).__name__}: {error}", error)
        trace = response.trace
        if trace is not None:
            trace.stamp("HTTP_SEND_START")
            # A streamed body's answers are computed as it is sent: in the request's trace.
            token = CURRENT.set(trace)
        try:
            await self._send(send, response)
        except Exception:
            logger.debug("could not send an HTTP response", exc_info=True)
        if trace is not None:
            CURRENT.reset(token)
            trace.stamp("HTTP_SEND_END")
            trace.end()

    async def _respond(self, scope: Scope, receive: Receive) -> HttpResponse:
        path = bytes(scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        route = _match(path)
        if route is None:
            return _failed(404, "Not Found")
        handlers, arguments, group = route
        method = scope["method"]
        handler = handlers.get(method)
        if handler is None:
            return _failed(405, "Method Not Allowed")
        context = log_context.current()
        if context is not None:  # the handler's name: the path may hold anything
            context.endpoint = f"{method} {handler.__name__}"
        if not self.accepting:
            return _failed(503, SHUTTING_DOWN)
        received_ns = time.perf_counter_ns() if self.dataplane.tracer.active else 0
        headers = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        restriction = self.restricted.get(group)
        if restriction is not None and not restriction.allows(headers.get(restriction.key)):
            return _failed(403, http_refusal(restriction))
        try:
            body = await self._read_body(headers, receive) if method == "POST" else b""
            query = bytes(scope.get("query_string") or b"").decode("latin-1")
            response = await handler(self, HttpRequest(method, arguments, headers, body,
                                                       received_ns, query))
        except InferdError as error:
            return _failed(http_status(ErrorCode(error.code)), error.message)
        if response.compressible and response.length:
            response = await self._compressed(response, headers.get("accept-encoding"))
        return response

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes | memoryview:
        limit = self.max_input_size
        declared = headers.get("content-length", "").strip()
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise InvalidArgument(
                f"the request body of {int(declared)} bytes is larger than the maximum input "
                f"size of {limit} bytes (--http-max-input-size)"
            )
        decoder = content_coding.BodyDecoder(headers.get("content-encoding"), limit)
        chunks: list[bytes | memoryview] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:
                raise InvalidArgument(
                    f"the request body is larger than the maximum input size of {limit} bytes "
                    "(--http-max-input-size)"
                )
            if chunk:
                decoded = decoder.feed(chunk)
                if len(decoded):
                    chunks.append(decoded)
            if not message.get("more_body", False):
                break
        rest = decoder.finish()
        if rest:
            chunks.append(rest)
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    async def _compressed(self, response: HttpResponse, accept: str | None) -> HttpResponse:
        coding = content_coding.choose_response_coding(accept)
        if coding == content_coding.IDENTITY:
            return response
        if response.length > OFFLOAD_BYTES:
            body = await anyio.to_thread.run_sync(content_coding.compress, response.parts, coding)
        else:
            body = content_coding.compress(response.parts, coding)
        headers = (*response.headers, ("content-encoding", coding))
        return HttpResponse(response.status, (body,), headers, trace=response.trace)

    @staticmethod
    async def _send(send: Send, response: HttpResponse) -> None:
        headers = [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers
        ]
        if response.stream is not None:  # chunked: each event is written as it comes
            await send({"type": "http.response.start", "status": response.status,
                        "headers": headers})
            async for chunk in response.stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        length = response.length
        headers.append((b"content-length", str(length).encode("ascii")))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        parts: list[bytes | memoryview] = [part for part in response.parts if len(part)] or [b""]
        if len(parts) > 1 and length <= JOIN_BODY_BELOW:
            parts = [b"".join(parts)]  # one write (one syscall) instead of one per part
        elif length > WRITE_SLICE_BYTES:
            parts = list(_slices(parts))
        for index, part in enumerate(parts):
            more = index < len(parts) - 1
            await send({"type": "http.response.body", "body": part, "more_body": more})

    async def ask(self, request: Message) -> Message:
        return await self.dataplane.handle(request)

    # ------------------------------------------------------------------ handlers

    async def health(self, request: HttpRequest) -> HttpResponse:
        reply = _expect(await self.ask(HealthRequest(request.path_arguments[0])), HealthStatus)
        return HttpResponse(200 if reply.ok else 400)

    async def openapi(self, request: HttpRequest) -> HttpResponse:
        """``GET v2/openapi.json`` (inferd extension): the OpenAPI 3 description of this API."""
        return json_response(openapi_document())

    async def server_metadata(self, request: HttpRequest) -> HttpResponse:
        reply = _expect(await self.ask(ServerMetadataRequest()), ServerMetadata)
        return json_response(admin.encode_server_metadata(reply))

    async def model_metadata(self, request: HttpRequest) -> HttpResponse:
        model, version = _model_arguments(request)
        reply = _expect(await self.ask(ModelMetadataRequest(model, version)), ModelMetadata)
        return json_response(admin.encode_model_metadata(reply))

    async def model_ready(self, request: HttpRequest) -> HttpResponse:
        model, version = _model_arguments(request)
        reply = _expect(await self.ask(ModelReadyRequest(model, version)), HealthStatus)
        return HttpResponse(200) if reply.ok else error_response(400, "Model version not ready")

    async def model_config(self, request: HttpRequest) -> HttpResponse:
        model, version = _model_arguments(request)
        reply = _expect(await self.ask(ModelConfigRequest(model, version)), ModelConfigReply)
        return json_response(reply.config_json.encode("utf-8"))

    async def model_statistics(self, request: HttpRequest) -> HttpResponse:
        model, version = _model_arguments(request) if request.path_arguments else ("", "")
        reply = _expect(await self.ask(StatisticsRequest(model, version)), Statistics)
        return json_response(admin.encode_statistics(reply))

    async def infer(self, request: HttpRequest) -> HttpResponse:
        model, version = _model_arguments(request)
        body = request.body
        header_length = codec.parse_header_length(
            request.headers.get("inference-header-content-length"), len(body)
        )
        arguments = (model, version, body, header_length, self.max_input_size)
        if len(body) > OFFLOAD_BYTES:
            infer_request, encoding = await anyio.to_thread.run_sync(
                codec.decode_infer_request, *arguments
            )
        else:
            infer_request, encoding = codec.decode_infer_request(*arguments)
        trace = self._begin_trace(model, request)
        try:
            pending = self.ask(infer_request)
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
        return HttpResponse(200, encoded.parts, encoded.headers, compressible=True, trace=trace)

    def _begin_trace(self, model: str, request: HttpRequest) -> Trace | None:
        tracer = self.dataplane.tracer
        trace = tracer.begin(model, request.headers.get("traceparent")) if tracer.active else None
        if trace is not None:
            trace.stamp("HTTP_RECV_START", request.received_ns or None)
            trace.stamp("HTTP_RECV_END")
        return trace

    async def trace_setting(self, request: HttpRequest) -> HttpResponse:
        """``GET/POST v2[/models/<m>]/trace/setting`` (Triton's trace extension)."""
        model = unquote(request.path_arguments[0] or "")
        message = (trace_api.decode_http_update(model, request.body) if request.method == "POST"
                   else TraceSettingRequest(model))
        reply = _expect(await self.ask(message), TraceSettingReply)
        return json_response(trace_api.encode_http_reply(reply))

    async def index(self, request: HttpRequest) -> HttpResponse:
        reply = _expect(await self.ask(admin.decode_index_request(request.body)), Index)
        return json_response(admin.encode_index(reply))

    async def catalog(self, request: HttpRequest) -> HttpResponse:
        """``GET v2/catalog[?label=K=V&task=T]`` (inferd extension): the model catalog."""
        reply = _expect(await self.ask(admin.decode_catalog_request(request.query)), Catalog)
        return json_response(admin.encode_catalog(reply))

    async def load(self, request: HttpRequest) -> HttpResponse:
        model = unquote(request.path_arguments[0])
        await self.ask(admin.decode_load_request(model, request.body))
        return HttpResponse(200)

    async def unload(self, request: HttpRequest) -> HttpResponse:
        model = unquote(request.path_arguments[0])
        await self.ask(admin.decode_unload_request(model, request.body))
        return HttpResponse(200)

    async def poll(self, request: HttpRequest) -> HttpResponse:
        """``POST v2/repository/poll`` (inferd extension): poll the repository now."""
        await self.ask(PollRequest())
        return HttpResponse(200)

    # ``v2/{system,cuda}sharedmemory[/region/<name>]/<action>``: arguments (memory, name).

    async def shared_memory_status(self, request: HttpRequest) -> HttpResponse:
        memory, name = _shared_memory_arguments(request)
        reply = await self.ask(SharedMemoryStatusRequest(name, memory))
        return json_response(admin.encode_shared_memory_status(_expect(reply, SharedMemoryStatus)))

    async def shared_memory_register(self, request: HttpRequest) -> HttpResponse:
        memory, name = _shared_memory_arguments(request)
        await self.ask(admin.decode_shared_memory_register(name, request.body, memory))
        return HttpResponse(200)

    async def shared_memory_unregister(self, request: HttpRequest) -> HttpResponse:
        memory, name = _shared_memory_arguments(request)
        await self.ask(SharedMemoryUnregister(name, memory))
        return HttpResponse(200)

    async def log_settings(self, request: HttpRequest) -> HttpResponse:
        """Triton's logging extension: ``GET v2/logging`` reads, ``POST`` updates, then reads."""
        message = (logging_api.decode_http_request(request.body) if request.method == "POST"
                   else LogSettingsRequest())
        reply = _expect(await self.ask(message), LogSettingsReply)
        return json_response(logging_api.encode_http_reply(reply))

    # ------------------------------------------------------------------ generate extension

    async def generate(self, request: HttpRequest) -> HttpResponse:
        """Triton's generate: exactly one response, as a JSON object."""
        trace = self._begin_trace(_model_arguments(request)[0], request)
        if trace is None:
            return await self._generate(request)
        return dataclasses.replace(await traced(trace, self._generate(request)), trace=trace)

    async def _generate(self, request: HttpRequest) -> HttpResponse:
        stream = await self._generate_stream(request)
        answers = [(result, final) async for result, final in stream]
        results = [result for result, _ in answers if result is not None]
        if len(results) != 1:
            return json_response(generate_codec.error_document(generate_codec.NOT_ONE_RESPONSE))
        [result] = results
        if isinstance(result, InferdError):
            return _failed(http_status(ErrorCode(result.code)), result.message)
        return json_response(generate_codec.encode_generate_response(result))

    async def generate_stream(self, request: HttpRequest) -> HttpResponse:
        """Triton's generate_stream: each response a Server-Sent Event, as it comes; a
        request refused before it runs is a JSON error with its status."""
        trace = self._begin_trace(_model_arguments(request)[0], request)
        pending = self._generate_stream(request)
        stream = await (pending if trace is None else traced(trace, pending))

        async def events() -> AsyncIterator[bytes]:
            async for result, _final in stream:
                if isinstance(result, InferdError):
                    request_failed(http_status(ErrorCode(result.code)), result.message)
                    document = generate_codec.error_document(result.message)
                elif result is not None:
                    document = generate_codec.encode_generate_response(result)
                else:
                    continue  # the final flag alone
                yield generate_codec.server_sent_event(document)

        return HttpResponse(200, headers=tuple(generate_codec.event_stream_headers()),
                            stream=events(), trace=trace)

    async def _generate_stream(self, request: HttpRequest) -> ResponseStream:
        model, version = _model_arguments(request)
        metadata = _expect(await self.ask(ModelMetadataRequest(model, version)), ModelMetadata)
        infer_request = generate_codec.decode_generate_request(
            model, version, request.body, metadata, self.max_input_size)
        return await self.dataplane.stream(infer_request)


@functools.cache
def openapi_document() -> bytes:
    """``inferd/protocols/openapi.json``, read once: the description this frontend serves."""
    return importlib.resources.files("inferd.protocols").joinpath("openapi.json").read_bytes()


def _slices(parts: list[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """``parts`` with every part over ``WRITE_SLICE_BYTES`` cut into views (no copies)."""
    for part in parts:
        if len(part) <= WRITE_SLICE_BYTES:
            yield part
            continue
        view = memoryview(part).cast("B")
        for offset in range(0, view.nbytes, WRITE_SLICE_BYTES):
            yield view[offset : offset + WRITE_SLICE_BYTES]


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


_ROUTE_TABLE: tuple[tuple[str, str, dict[str, Handler]], ...] = (
    (r"/v2", "metadata", {"GET": KserveHttpApp.server_metadata}),
    (r"/v2/health/(live|ready)", "health", {"GET": KserveHttpApp.health}),
    (r"/v2/openapi\.json", "metadata", {"GET": KserveHttpApp.openapi}),
    (r"/v2/models/stats", "statistics", {"GET": KserveHttpApp.model_statistics}),
    (_MODEL, "metadata", {"GET": KserveHttpApp.model_metadata}),
    (_MODEL + "/ready", "health", {"GET": KserveHttpApp.model_ready}),
    (_MODEL + "/config", "model-config", {"GET": KserveHttpApp.model_config}),
    (_MODEL + "/stats", "statistics", {"GET": KserveHttpApp.model_statistics}),
    (_MODEL + "/infer", "inference", {"POST": KserveHttpApp.infer}),
    (_MODEL + "/generate", "inference", {"POST": KserveHttpApp.generate}),
    (_MODEL + "/generate_stream", "inference", {"POST": KserveHttpApp.generate_stream}),
    (_REPOSITORY + "/index", "model-repository", {"POST": KserveHttpApp.index}),
    (_REPOSITORY + "/poll", "model-repository", {"POST": KserveHttpApp.poll}),
    (r"/v2/catalog", "model-repository", {"GET": KserveHttpApp.catalog}),
    (_REPOSITORY + "/models/([^/]+)/load", "model-repository", {"POST": KserveHttpApp.load}),
    (_REPOSITORY + "/models/([^/]+)/unload", "model-repository",
     {"POST": KserveHttpApp.unload}),
    (r"/v2/logging", "logging",
     {"GET": KserveHttpApp.log_settings, "POST": KserveHttpApp.log_settings}),
    (r"/v2(?:/models/([^/]+))?/trace/setting", "trace",
     {"GET": KserveHttpApp.trace_setting, "POST": KserveHttpApp.trace_setting}),
    (_SHARED_MEMORY + "/status", "shared-memory", {"GET": KserveHttpApp.shared_memory_status}),
    (_SHARED_MEMORY + "/register", "shared-memory",
     {"POST": KserveHttpApp.shared_memory_register}),
    (_SHARED_MEMORY + "/unregister", "shared-memory",
     {"POST": KserveHttpApp.shared_memory_unregister}),
)
"""Triton's URL patterns, first match wins: the API group (``--http-restricted-api``) of
each, and the handler of each method it allows."""
_ROUTES = tuple((re.compile(pattern), group, handlers)
                for pattern, group, handlers in _ROUTE_TABLE)


def _match(path: str) -> tuple[dict[str, Handler], tuple[str, ...], str] | None:
    for pattern, group, handlers in _ROUTES:
        found = pattern.fullmatch(path)
        if found is not None:
            return handlers, found.groups(), group
    return None


class KserveHttpFrontend(Frontend):
    name = "kserve_http"

    def __init__(self, dataplane: DataPlane, settings: Settings) -> None:
        super().__init__(dataplane, settings)
        options = settings.options
        max_input_size = int(options.get("http_max_input_size", codec.DEFAULT_MAX_INPUT_SIZE))
        try:
            restricted = restrictions(options.get("http_restricted_api", ()),
                                      "--http-restricted-api")
        except ValueError as error:
            raise StartupFailed(str(error)) from None
        self.app = KserveHttpApp(dataplane, max_input_size, restricted)
        self.tls = _tls_context(options)
        defaults = HttpLimits()
        self.limits = HttpLimits(
            header_timeout_secs=float(
                options.get("http_header_timeout_secs") or defaults.header_timeout_secs
            ),
            body_timeout_secs=float(
                options.get("http_body_timeout_secs") or defaults.body_timeout_secs
            ),
            max_connections=int(
                options.get("http_max_connections")
                or max(1, min(open_file_limit() // 2, MAX_CONNECTIONS_CEILING))
            ),
            keep_alive_timeout_secs=float(
                options.get("http_keep_alive_timeout_secs") or defaults.keep_alive_timeout_secs
            ),
        )

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = _bind(self.settings.http_address, self.settings.http_port)
        # Out of descriptors, uvloop's accept (libuv's reserved-descriptor trick) accepts and
        # closes the waiting connections and keeps listening; asyncio's pauses accepting for a
        # second. The connection cap keeps this frontend well below the limit either way.
        protocol: Any = functools.partial(GuardedHttpProtocol, limits=self.limits)
        config = uvicorn.Config(
            self.app, loop="none", http=protocol, ws="none", lifespan="off",
            interface="asgi3", log_config=None, log_level="warning", access_log=False,
            server_header=False, proxy_headers=False, backlog=BACKLOG,
            # The sweep closes idle connections (--http-keep-alive-timeout-secs), not uvicorn.
            timeout_keep_alive=KEEP_ALIVE_BY_SWEEP,
            timeout_graceful_shutdown=max(1, int(self.settings.exit_timeout_secs)),
        )
        # startup/main_loop/shutdown rather than serve(): serve() installs its own SIGTERM and
        # SIGINT handlers, which belong to the kernel in this process.
        server = uvicorn.Server(config)
        sweeper: ConnectionSweeper | None = None
        try:
            config.load()
            config.ssl = self.tls  # after load(), which sets it from uvicorn's own flags
            server.lifespan = config.lifespan_class(config)
            await server.startup(sockets=[listener])
            sweeper = ConnectionSweeper(server.server_state.connections, self.limits)
            task_status.started(_address(listener, self.tls is not None))
            await server.main_loop()
        finally:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self.settings.exit_timeout_secs + 1):
                    if server.started:
                        # Deadlines still apply while in-flight responses finish.
                        await server.shutdown(sockets=[listener])
                if sweeper is not None:
                    sweeper.stop()
                listener.close()

    async def stop_accepting(self) -> None:
        self.app.accepting = False


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound here so a busy port raises ``OSError`` (uvicorn would exit)."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise OSError(f"HTTP frontend cannot resolve address {host!r}: {error}") from error
    listener = socket.socket(family, kind, protocol)
    try:
        # Rebinding over connections in TIME_WAIT only; a port someone listens on stays busy.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(BACKLOG)
        listener.setblocking(False)
    except OSError as error:
        listener.close()
        raise OSError(
            error.errno, f"HTTP frontend cannot bind {host}:{port}: {error.strerror}"
        ) from error
    return listener


def _address(listener: socket.socket, tls: bool) -> str:
    host, port = listener.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _tls_context(options: dict[str, Any]) -> ssl.SSLContext | None:
    """The context of ``--http-ssl-certfile`` and its kin, or None for plain HTTP."""
    cert, key, ca = (str(options.get(name) or "") for name in
                     ("http_ssl_certfile", "http_ssl_keyfile", "http_ssl_ca_certs"))
    if not cert:
        if key or ca:
            given = "--http-ssl-keyfile" if key else "--http-ssl-ca-certs"
            raise StartupFailed(f"{given} needs --http-ssl-certfile (the server's certificate)")
        return None
    return server_context(cert, key, ca, flags=("--http-ssl-certfile", "--http-ssl-keyfile",
                                                "--http-ssl-ca-certs"))

