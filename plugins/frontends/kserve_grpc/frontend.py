"""The KServe v2 gRPC frontend: the server glue around the servicer (``servicer``), either
``loop_server`` (HTTP/2 on the main process's event loop) or a ``grpc.aio`` server in it, as
``--grpc-implementation`` says.

Owns the server's options (the largest request, the handshake and idle-connection timeouts,
keepalive, the connection cap sharing the descriptor budget with HTTP's),
TLS from ``--grpc-use-ssl*``, the interceptor that refuses the API groups
``--grpc-restricted-protocol`` keeps from a call without its header, the bind (a busy port is
an ``OSError``), the start, the stop with a short grace for replies still being written, and
refusing new requests once the server begins to stop. The handlers are built in ``service``;
what each RPC does is the servicer's. It decides nothing about models or inference.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import grpc
import grpc.aio

from inferd.kernel.sdk import Frontend, log_context
from inferd.kernel.sdk.frontends import StartupFailed
from inferd.kernel.sdk.open_file_limit import default_connection_cap
from inferd.kernel.sdk.request_log import request_failed
from inferd.kernel.sdk.tls import read_certificates, read_key_pair
from inferd.plugins.frontends.kserve_grpc import (
    DEFAULT_HANDSHAKE_TIMEOUT_SECS,
    DEFAULT_IMPLEMENTATION,
    DEFAULT_KEEPALIVE_TIME_MS,
    DEFAULT_KEEPALIVE_TIMEOUT_MS,
    DEFAULT_MAX_CONNECTION_IDLE_SECS,
    LISTEN,
)
from inferd.plugins.frontends.kserve_grpc.limits import Http2Limits
from inferd.plugins.frontends.kserve_grpc.loop_server import LoopServer, ssl_context
from inferd.plugins.frontends.kserve_grpc.service import methods, service_handler
from inferd.plugins.frontends.kserve_grpc.servicer import InferenceServicer
from inferd.protocols.restrictions import (
    GRPC_HEADER_PREFIX,
    GRPC_METHOD_GROUPS,
    Restriction,
    grpc_refusal,
    restrictions,
)
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE

if TYPE_CHECKING:
    from inferd.kernel.sdk.frontends import DataPlane, Settings

logger = logging.getLogger(__name__)


DEFAULT_LIMITS = Http2Limits()


def server_options(
    max_input_size: int,
    handshake_timeout_secs: float = DEFAULT_HANDSHAKE_TIMEOUT_SECS,
    max_connection_idle_secs: float = DEFAULT_MAX_CONNECTION_IDLE_SECS,
    max_connections: int | None = None,
    keepalive_ms: tuple[int, int] = (DEFAULT_KEEPALIVE_TIME_MS, DEFAULT_KEEPALIVE_TIMEOUT_MS),
    limits: Http2Limits = DEFAULT_LIMITS,
) -> Sequence[tuple[str, Any]]:
    """The ``grpc.aio.server`` options for requests of at most ``max_input_size`` bytes and
    connections that must be set up within ``handshake_timeout_secs``, are closed (GOAWAY;
    clients reconnect on their next call) after ``max_connection_idle_secs`` without a call,
    pinged as ``keepalive_ms`` says (time, timeout), and number at most ``max_connections``
    (default: gRPC's share of the open-file limit).

    Of ``limits``, grpc has a channel argument for the streams in flight, the header list's
    size and the ping policy; the reset and control-frame budgets, the connection buffer and
    the write timeout have none and bind the loop server alone."""
    return (
        # A connection that never completes its HTTP/2 (and TLS) set-up holds a descriptor;
        # gRPC's own default waits two minutes.
        ("grpc.server_handshake_timeout_ms", int(handshake_timeout_secs * 1000)),
        ("grpc.max_connection_idle_ms", int(max_connection_idle_secs * 1000)),
        # Without a cap, idle gRPC clients took every descriptor and HTTP's clients were
        # refused; past it gRPC closes a new connection as soon as it is accepted.
        ("grpc.max_allowed_incoming_connections",
         max_connections or default_connection_cap("grpc")),
        # A stream whose peer vanished without a FIN is not idle: only a ping finds it gone.
        ("grpc.keepalive_time_ms", keepalive_ms[0]),
        ("grpc.keepalive_timeout_ms", keepalive_ms[1]),
        # Replies carry the model's outputs, whose size the client chose by its inputs.
        ("grpc.max_send_message_length", -1),
        # gRPC refuses a larger request from its length prefix, with RESOURCE_EXHAUSTED,
        # before reading its body: an oversized message never costs its size in memory.
        ("grpc.max_receive_message_length", max_input_size),
        # Without this a second server could bind the same port and silently share its traffic.
        ("grpc.so_reuseport", 0),
        # SETTINGS_MAX_CONCURRENT_STREAMS; grpc resets a stream past it, REFUSED_STREAM once
        # the client has acknowledged the setting, ENHANCE_YOUR_CALM before.
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        # grpc rejects every header list over the absolute limit and a random share of those
        # between the soft limit and it; the soft limit at the absolute one makes the cut
        # exact. The absolute limit is also what it announces as MAX_HEADER_LIST_SIZE.
        ("grpc.max_metadata_size", limits.max_metadata_size),
        ("grpc.absolute_max_metadata_size", limits.max_metadata_size),
        # The ping policy: a client's ping sooner than the interval after its last while the
        # server sends nothing (or with no call in flight, unless permitted) is a strike;
        # past the strikes grpc ends the connection with GOAWAY ENHANCE_YOUR_CALM
        # "too_many_pings". Pings without data bounds the server's own keepalive pings.
        ("grpc.keepalive_permit_without_calls", int(limits.permit_pings_without_calls)),
        ("grpc.http2.max_pings_without_data", limits.max_pings_without_data),
        ("grpc.http2.min_ping_interval_without_data_ms", limits.min_recv_ping_interval_ms),
        ("grpc.http2.max_ping_strikes", limits.max_ping_strikes),
    )


# Seconds the in-flight RPCs get once the server is cancelled; the server's shutdown has
# already drained the data plane by then, so this only covers replies still being written.
STOP_GRACE_SECS = 1.0


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
        self.tls = _tls(settings.options)
        self.credentials = self.tls.credentials() if self.tls is not None else None
        options = settings.options
        self.implementation = str(options.get("grpc_implementation") or DEFAULT_IMPLEMENTATION)
        self.handshake_timeout = float(options.get("grpc_handshake_timeout_secs")
                                       or DEFAULT_HANDSHAKE_TIMEOUT_SECS)
        self.max_idle = float(options.get("grpc_max_connection_idle_secs")
                              or DEFAULT_MAX_CONNECTION_IDLE_SECS)
        self.max_connections = int(options.get("grpc_max_connections") or 0) or None
        self.keepalive_ms = (
            int(options.get("grpc_keepalive_time") or DEFAULT_KEEPALIVE_TIME_MS),
            int(options.get("grpc_keepalive_timeout") or DEFAULT_KEEPALIVE_TIMEOUT_MS))
        self.limits = Http2Limits.from_options(options)

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        if self.implementation == "loop":
            await self._serve_on_loop(task_status)
            return
        # grpc.aio binds the server to the event loop running when it is created.
        interceptors = [_Restricted(self.restricted)] if self.restricted else []
        server = grpc.aio.server(
            options=server_options(self.max_input_size, self.handshake_timeout, self.max_idle,
                                   self.max_connections, self.keepalive_ms, self.limits),
            interceptors=interceptors)
        server.add_generic_rpc_handlers((service_handler(InferenceServicer(self)),))
        try:
            address = self._bind(server)
            await server.start()
            await _serve_until_cancelled(address, "grpc.aio", task_status)
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop(STOP_GRACE_SECS)

    async def _serve_on_loop(self, task_status: anyio.abc.TaskStatus[Any]) -> None:
        server = LoopServer(
            methods(InferenceServicer(self)), max_message=self.max_input_size,
            handshake_timeout=self.handshake_timeout, max_idle=self.max_idle,
            max_connections=self.max_connections or default_connection_cap("grpc"),
            keepalive_ms=self.keepalive_ms, limits=self.limits, restricted=self.restricted,
            ssl_context=self.tls.ssl_context() if self.tls is not None else None)
        host, listen_port = LISTEN.read(self.settings.options)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        try:
            port = await server.listen(host, listen_port)
        except OSError as error:
            raise OSError(f"the gRPC frontend cannot listen on {host}:{listen_port}: "
                          f"{error.strerror or error}") from None
        try:
            await _serve_until_cancelled(f"{host}:{port}", "HTTP/2 on the event loop",
                                         task_status)
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop(STOP_GRACE_SECS)

    async def stop_accepting(self) -> None:
        self.accepting = False

    def _bind(self, server: grpc.aio.Server) -> str:
        host, listen_port = LISTEN.read(self.settings.options)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        target = f"{host}:{listen_port}"
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


async def _serve_until_cancelled(address: str, implementation: str,
                                 task_status: anyio.abc.TaskStatus[Any]) -> None:
    logger.info("gRPC frontend listening on %s (%s)", address, implementation)
    task_status.started(address)
    await anyio.sleep_forever()


class _Tls:
    """tritonserver's ``--grpc-use-ssl[-mutual]`` files, each read and checked."""

    def __init__(self, files: dict[str, str], mutual: bool) -> None:
        self.files = files
        self.mutual = mutual
        self.pair = read_key_pair(files["--grpc-server-cert"], "--grpc-server-cert",
                                  files["--grpc-server-key"], "--grpc-server-key")
        root = files["--grpc-root-cert"]
        self.roots = read_certificates(root, "--grpc-root-cert") if root else None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(((self.pair.key, self.pair.certificate),),
                                           root_certificates=self.roots,
                                           require_client_auth=self.mutual)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl_context(self.files["--grpc-server-cert"], self.files["--grpc-server-key"],
                           self.files["--grpc-root-cert"] or None, self.mutual)


def _tls(options: dict[str, Any]) -> _Tls | None:
    """tritonserver's ``--grpc-use-ssl[-mutual]``: the TLS files named, each read and checked
    now; None for a plaintext server."""
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
    return _Tls(files, mutual)


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
