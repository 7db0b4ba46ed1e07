"""The plugin SDK for frontends: what a frontend uses in the server's event loop (see
``inferd.kernel.sdk`` for the contracts and the boundary). The protocol-agnostic
``DataPlane`` and the server's ``Settings``; ``StartupFailed`` for a frontend that cannot
start; the request's log context (``log_context``, a module) and its one error line
(``request_failed``); streamed responses; TLS contexts; the connection cap; the zmq loop
socket; the metrics configuration and the process and GPU metrics readers."""

from __future__ import annotations

from inferd.kernel.dataplane.data_plane import DataPlane
from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.dataplane.tls import read_certificates, read_key_pair, server_context
from inferd.kernel.observability import log_context
from inferd.kernel.observability.gpu_metrics import GpuMetrics
from inferd.kernel.observability.metrics_config import MetricsConfig, metrics_config_from_options
from inferd.kernel.observability.process_metrics import CpuUtilization, machine_memory
from inferd.kernel.observability.request_log import request_failed
from inferd.kernel.runtime.loop_socket import LoopSocket
from inferd.kernel.runtime.open_file_limit import default_connection_cap
from inferd.kernel.settings import Settings
from inferd.kernel.supervisor import StartupFailed

__all__ = [
    "DataPlane", "Settings", "StartupFailed",
    "log_context", "request_failed",
    "GpuMetrics", "MetricsConfig", "metrics_config_from_options", "CpuUtilization",
    "machine_memory",
    "default_connection_cap", "LoopSocket", "ResponseStream",
    "read_certificates", "read_key_pair", "server_context",
]
