"""The KServe v2 HTTP/REST frontend: the server glue around the app (``app``).

Owns the listening socket (bound here, so a busy port is an ``OSError`` rather than uvicorn
exiting), TLS from ``--http-ssl-*``, the connection limits (head and body timeouts, dropping
clients that do not read, the connection cap; see ``connection``), which server
``--http-implementation`` runs (``loop_server``, the default, calls the app's ``respond``
directly; uvicorn calls it through ASGI), its start and graceful stop inside the kernel's
task group, and refusing new requests once the server begins to stop. Routes are
``routes``; bodies become messages in ``inferd.protocols.kserve_http.infer`` and
``inferd.protocols.kserve_http.admin``.
"""

from __future__ import annotations

import functools
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import uvicorn

from inferd.kernel.sdk import Frontend
from inferd.kernel.sdk.frontends import StartupFailed
from inferd.kernel.sdk.open_file_limit import default_connection_cap
from inferd.kernel.sdk.tls import server_context
from inferd.plugins.frontends.kserve_http import DEFAULT_IMPLEMENTATION, LISTEN
from inferd.plugins.frontends.kserve_http.app import KserveHttpApp
from inferd.plugins.frontends.kserve_http.connection import (
    ConnectionSweeper,
    GuardedHttpProtocol,
    HttpLimits,
)
from inferd.plugins.frontends.kserve_http.loop_server import LoopHttpServer
from inferd.protocols.restrictions import restrictions
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE

if TYPE_CHECKING:
    from inferd.kernel.sdk.frontends import DataPlane, Settings

logger = logging.getLogger(__name__)
BACKLOG = 2048
KEEP_ALIVE_BY_SWEEP = 24 * 3600


class KserveHttpFrontend(Frontend):
    name = "kserve_http"

    def __init__(self, dataplane: DataPlane, settings: Settings) -> None:
        super().__init__(dataplane, settings)
        options = settings.options
        max_input_size = int(options.get("http_max_input_size", DEFAULT_MAX_INPUT_SIZE))
        try:
            restricted = restrictions(options.get("http_restricted_api", ()),
                                      "--http-restricted-api")
        except ValueError as error:
            raise StartupFailed(str(error)) from None
        self.app = KserveHttpApp(dataplane, max_input_size, restricted)
        self.tls = _tls_context(options)
        self.implementation = str(options.get("http_implementation") or DEFAULT_IMPLEMENTATION)
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
                or default_connection_cap("http")
            ),
            keep_alive_timeout_secs=float(
                options.get("http_keep_alive_timeout_secs") or defaults.keep_alive_timeout_secs
            ),
        )

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        listener = _bind(*LISTEN.read(self.settings.options))
        if self.implementation == "loop":
            await self._serve_on_loop(listener, task_status)
            return
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
            address = _address(listener, self.tls is not None)
            logger.info("HTTP frontend listening on %s (uvicorn)", address)
            task_status.started(address)
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

    async def _serve_on_loop(self, listener: socket.socket,
                             task_status: anyio.abc.TaskStatus[Any]) -> None:
        server = LoopHttpServer(self.app, self.limits)
        try:
            await server.start(listener, self.tls, BACKLOG)
            address = _address(listener, self.tls is not None)
            logger.info("HTTP frontend listening on %s (HTTP/1.1 on the event loop)", address)
            task_status.started(address)
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop(max(1.0, self.settings.exit_timeout_secs))
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
