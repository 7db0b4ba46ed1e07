"""The Prometheus metrics frontend: ``GET /metrics`` on ``--metrics-address:--metrics-port``.

A deliberately small HTTP/1.1 responder (a scraper sends one GET per connection or keeps it
alive between scrapes): it reads a request head (bounded in size and time: an idle or slow
connection closes after ``READ_TIMEOUT_SECS``), answers
``/metrics`` with the text ``inferd.protocols.prometheus`` renders (through prometheus-client)
from the data plane's samples and the per-interval ones (``IntervalMetrics``: CPU, memory,
GPUs), 404 for other paths and 405 for other methods. It runs in the main event loop beside
the other frontends. A client that does not read its answer within
``WRITE_TIMEOUT_SECS`` is dropped, and past ``MAX_CONNECTIONS`` open connections a new one is
answered 503 and closed, so scrapers can never hold the process's descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import anyio
import anyio.abc

from inferd.kernel.sdk import Frontend
from inferd.kernel.sdk.metrics_config import metrics_config_from_options
from inferd.plugins.frontends.metrics import LISTEN
from inferd.plugins.frontends.metrics.interval import IntervalMetrics
from inferd.protocols import prometheus
from inferd.protocols.messages import Metrics, MetricsRequest

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
READ_TIMEOUT_SECS = 10.0
WRITE_TIMEOUT_SECS = 10.0
# Prometheus scrapes with one connection per target; a few dashboards may add their own.
MAX_CONNECTIONS = 64


class MetricsFrontend(Frontend):
    name = "metrics"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open_connections = 0
        self.interval = IntervalMetrics(metrics_config_from_options(self.settings.options))

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        address, port = LISTEN.read(self.settings.options)
        try:
            server = await asyncio.start_server(self._connection, address, port,
                                                reuse_address=True)
        except OSError as error:
            raise OSError(error.errno,
                          f"metrics frontend cannot bind {address}:{port}: {error.strerror}"
                          ) from error
        bound = server.sockets[0].getsockname()
        try:
            async with anyio.create_task_group() as tasks:
                await tasks.start(self.interval.run)
                task_status.started(f"http://{bound[0]}:{bound[1]}/metrics")
                await anyio.sleep_forever()
        finally:
            server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            with contextlib.suppress(Exception):
                await self._reply(writer, 503, b"too many metrics connections\n", close=True)
            writer.close()
            return
        self.open_connections += 1
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                                  READ_TIMEOUT_SECS)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._reply(writer, 431, b"request head too large\n", close=True)
                    return
                if len(head) > MAX_HEAD_BYTES:
                    await self._reply(writer, 431, b"request head too large\n", close=True)
                    return
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
                close = b"connection: close" in head.lower()
                if len(request_line) != 3:
                    await self._reply(writer, 400, b"malformed request line\n", close=True)
                    return
                method, target, _ = request_line
                path = target.split("?", 1)[0]
                if path != "/metrics":
                    await self._reply(writer, 404, b"Not Found\n", close)
                elif method not in ("GET", "HEAD"):
                    await self._reply(writer, 405, b"Method Not Allowed\n", close)
                else:
                    body = await self._render()
                    await self._reply(writer, 200, body, close, head_only=method == "HEAD",
                                      content_type=prometheus.CONTENT_TYPE)
                if close:
                    return
        except ConnectionError:
            pass  # the client went away or was dropped for not reading
        except Exception:  # a scrape must never take anything down
            log.exception("metrics request failed")
        finally:
            self.open_connections -= 1
            with contextlib.suppress(Exception):
                writer.close()

    async def _render(self) -> bytes:
        reply = await self.dataplane.handle(MetricsRequest())
        assert isinstance(reply, Metrics)
        return prometheus.render([*reply.samples, *self.interval.samples]).encode()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, close: bool,
                     *, head_only: bool = False,
                     content_type: str = "text/plain; charset=utf-8") -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large", 503: "Service Unavailable"}[status]
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n"
                f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode()
        writer.write(head if head_only else head + body)
        try:
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_SECS)
        except TimeoutError:
            writer.transport.abort()
            raise ConnectionError("the metrics client did not read its answer") from None
