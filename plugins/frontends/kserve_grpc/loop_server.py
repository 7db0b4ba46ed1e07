"""The KServe gRPC frontend's server on the event loop's own thread: gRPC over HTTP/2
(``inferd.protocols.http2.connection`` and ``hpack``, compiled) in an asyncio protocol, calling the
servicer's RPCs (``service.methods``) exactly as ``grpc.aio`` calls them. This module owns the
listening socket, the connection cap, ``--grpc-restricted-protocol``'s refusals and the stop;
one client's connection is ``loop_connection``'s (its clocks ``loop_timers``'), each call's
messages, context and texts ``loop_calls``'.

``grpc.aio`` polls its sockets on a thread of its own and hands every completion to the
loop through a socket pair: about 41 system calls and 6 futex hand-offs per unary call
against HTTP's 7 and none. Here a call costs what an HTTP request costs: the loop reads the
frames, the servicer's coroutine runs as a task, and its reply leaves in one write
(``--grpc-implementation loop``).

What a gRPC server owes its clients and this one does:

* unary calls and the bidirectional ``ModelStreamInfer``; a stream's reader that falls
  behind holds its client back through the stream's window;
* statuses as trailers (``grpc-status``, ``grpc-message`` percent-encoded), trailers only
  for a call that fails before its reply; ``UNIMPLEMENTED "Method not found!"`` for an
  unknown path, ``UNKNOWN "Unexpected <class>: ..."`` for an exception no ``Rpc`` caught,
  as ``grpc.aio`` answers;
* ``grpc-timeout`` (the call is cancelled at its deadline and answered
  ``DEADLINE_EXCEEDED``), a client's RST_STREAM cancelling its call, the compressed
  messages of ``grpc-encoding`` gzip and deflate;
* the largest request (``RESOURCE_EXHAUSTED`` from the length prefix, before the body is
  read), the connection cap, the handshake and idle-connection timeouts, keepalive pings,
  TLS with ALPN ``h2`` (mutual where asked), ``--grpc-restricted-protocol``;
* a stop that sends GOAWAY, lets the calls in flight finish within the grace, then closes;
* every bound of ``Http2Limits`` (docs/security.md): the stream cap, the reset and control
  frame budgets and the header limits in ``http2``; here, reading paused while the socket's
  buffer is over the connection's share, new streams refused while output waits on the
  client's windows past it, a connection whose output stops moving closed, and a unary
  request's window given back as its message is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from inferd.plugins.frontends.kserve_grpc.limits import Http2Limits
from inferd.plugins.frontends.kserve_grpc.loop_connection import Connection
from inferd.plugins.frontends.kserve_grpc.service import Method
from inferd.protocols.restrictions import (
    GRPC_HEADER_PREFIX,
    GRPC_METHOD_GROUPS,
    Restriction,
    grpc_refusal,
)


class LoopServer:
    """The listening socket and its connections; ``methods`` are the RPCs by name."""

    def __init__(self, methods: dict[str, Method], *, max_message: int,
                 handshake_timeout: float, max_idle: float, max_connections: int,
                 keepalive_ms: tuple[int, int], limits: Http2Limits,
                 restricted: dict[str, Restriction],
                 ssl_context: ssl.SSLContext | None) -> None:
        self.methods = methods
        self.max_message = max_message
        self.handshake_timeout = handshake_timeout
        self.max_idle = max_idle
        self.max_connections = max_connections
        self.keepalive_time = keepalive_ms[0] / 1000
        self.keepalive_timeout = keepalive_ms[1] / 1000
        self.limits = limits
        self.restricted = restricted
        self.ssl_context = ssl_context
        self.connections: set[Connection] = set()
        self.loop = asyncio.get_running_loop()
        self._server: asyncio.Server | None = None
        self._quiet: asyncio.Event | None = None

    async def listen(self, host: str, port: int) -> int:
        """Bind ``host:port``; the port bound (``port`` 0 picks one)."""
        self._server = await self.loop.create_server(
            lambda: Connection(self), host.strip("[]") or None, port, ssl=self.ssl_context,
            ssl_handshake_timeout=self.handshake_timeout if self.ssl_context else None,
            reuse_address=True, backlog=1024)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def refusal(self, name: str, fields: dict[str, str]) -> str | None:
        """The message a call of ``name`` is refused with under ``--grpc-restricted-protocol``,
        None when it may run."""
        restriction = self.restricted.get(GRPC_METHOD_GROUPS.get(name, ""))
        if restriction is None:
            return None
        if restriction.allows(fields.get(GRPC_HEADER_PREFIX + restriction.key)):
            return None
        return grpc_refusal(restriction)

    def call_ended(self) -> None:
        if self._quiet is not None and not any(c.calls for c in self.connections):
            self._quiet.set()

    async def stop(self, grace: float) -> None:
        """Stop listening, GOAWAY every connection, give the calls in flight ``grace``
        seconds, then close what is left."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.goaway()
        if any(c.calls for c in self.connections):
            self._quiet = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), grace)
        for connection in list(self.connections):
            connection.flush()
            if connection.transport is not None:
                connection.transport.close()
        if self._server is not None:
            await self._server.wait_closed()


def ssl_context(certificate: str, key: str, root: str | None, mutual: bool) -> ssl.SSLContext:
    """TLS for gRPC: HTTP/2 by ALPN, the client's certificate required when ``mutual``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    context.set_alpn_protocols(["h2"])
    if root:
        context.load_verify_locations(root)
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
    return context
