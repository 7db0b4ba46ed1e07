"""The plugin SDK for frontends: what a frontend uses in the server's event loop (see
``inferd.kernel.sdk`` for the contracts and the boundary). The protocol-agnostic
``DataPlane`` and the server's ``Settings``; ``StartupFailed`` for a frontend that cannot
start; the request's log context (``log_context``, a module) and its one error line
(``request_failed``); streamed responses; TLS contexts; the connection cap; the zmq loop
socket; the metrics configuration and the process and GPU metrics readers."""

from __future__ import annotations

from inferd.kernel import log_context
from inferd.kernel.dataplane import DataPlane
from inferd.kernel.gpu_metrics import GpuMetrics
from inferd.kernel.limits import default_connection_cap
from inferd.kernel.loop_socket import LoopSocket
from inferd.kernel.metrics_config import MetricsConfig, metrics_config_from_options
from inferd.kernel.process_metrics import CpuUtilization, machine_memory
from inferd.kernel.request_log import request_failed
from inferd.kernel.server import StartupFailed
from inferd.kernel.settings import Settings
from inferd.kernel.streams import ResponseStream
from inferd.kernel.tls import read_certificates, read_key_pair, server_context

__all__ = [
    "DataPlane", "Settings", "StartupFailed",
    "log_context", "request_failed",
    "GpuMetrics", "MetricsConfig", "metrics_config_from_options", "CpuUtilization",
    "machine_memory",
    "default_connection_cap", "LoopSocket", "ResponseStream",
    "read_certificates", "read_key_pair", "server_context",
]
