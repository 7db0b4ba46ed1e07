"""The KServe HTTP frontend's own server (``--http-implementation loop``, the default): an
asyncio server on the frontend's listening socket whose connections are
``loop_connection.LoopHttpConnection``, their deadlines checked by the shared
``ConnectionSweeper``, and a graceful stop as uvicorn's: stop listening, close the idle
connections, let those answering finish within the grace, then abort the rest.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import TYPE_CHECKING

from inferd.plugins.frontends.kserve_http.connection import ConnectionSweeper, HttpLimits
from inferd.plugins.frontends.kserve_http.loop_connection import LoopHttpConnection

if TYPE_CHECKING:
    from inferd.plugins.frontends.kserve_http.app import KserveHttpApp

# How often a stop looks whether the connections answering have finished.
_STOP_POLL_SECS = 0.05


class LoopHttpServer:
    def __init__(self, app: KserveHttpApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits
        self.connections: set[LoopHttpConnection] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: ConnectionSweeper | None = None

    async def start(self, listener: socket.socket, tls: ssl.SSLContext | None,
                    backlog: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: LoopHttpConnection(self.app, self.limits, self.connections),
            sock=listener, ssl=tls, backlog=backlog)
        self._sweeper = ConnectionSweeper(self.connections, self.limits)

    async def stop(self, grace_secs: float) -> None:
        """Stop listening, close idle connections, give the others ``grace_secs`` to finish
        their answers, then drop them; deadlines still apply meanwhile."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_secs
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(_STOP_POLL_SECS)
        for connection in list(self.connections):
            transport = connection.transport
            if transport is not None:
                transport.abort()
            answering = connection.answering
            if answering is not None:
                answering.cancel()
        if self._sweeper is not None:
            self._sweeper.stop()
