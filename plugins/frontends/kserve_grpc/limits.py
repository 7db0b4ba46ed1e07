"""What one gRPC connection may take of the server: the HTTP/2 bounds against hostile
clients (docs/security.md), read once from the frontend's options and handed to whichever
server ``--grpc-implementation`` runs. ``loop_server`` enforces every one of them;
``frontend.server_options`` gives grpc.aio those grpc has a channel argument for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.plugins.frontends.kserve_grpc import (
    DEFAULT_CONTROL_FRAME_BUDGET,
    DEFAULT_MAX_CONCURRENT_STREAMS,
    DEFAULT_MAX_CONNECTION_BUFFER,
    DEFAULT_MAX_METADATA_SIZE,
    DEFAULT_MAX_PING_STRIKES,
    DEFAULT_MAX_PINGS_WITHOUT_DATA,
    DEFAULT_MIN_RECV_PING_INTERVAL_MS,
    DEFAULT_RESET_BUDGET,
    DEFAULT_WRITE_TIMEOUT_SECS,
)


@dataclass(frozen=True, slots=True)
class Http2Limits:
    max_concurrent_streams: int = DEFAULT_MAX_CONCURRENT_STREAMS
    max_metadata_size: int = DEFAULT_MAX_METADATA_SIZE
    reset_budget: int = DEFAULT_RESET_BUDGET
    control_frame_budget: int = DEFAULT_CONTROL_FRAME_BUDGET
    max_connection_buffer: int = DEFAULT_MAX_CONNECTION_BUFFER
    write_timeout_secs: float = DEFAULT_WRITE_TIMEOUT_SECS
    # The ping policy, gRPC's and tritonserver's: see ``inferd_add_options``.
    permit_pings_without_calls: bool = False
    max_pings_without_data: int = DEFAULT_MAX_PINGS_WITHOUT_DATA
    min_recv_ping_interval_ms: int = DEFAULT_MIN_RECV_PING_INTERVAL_MS
    max_ping_strikes: int = DEFAULT_MAX_PING_STRIKES

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Http2Limits:
        """The limits ``inferd serve``'s flags set; a flag not given keeps its default."""
        given: dict[str, Any] = {}
        for field, option in (
            ("max_concurrent_streams", "grpc_max_concurrent_streams"),
            ("max_metadata_size", "grpc_max_metadata_size"),
            ("reset_budget", "grpc_reset_budget"),
            ("control_frame_budget", "grpc_control_frame_budget"),
            ("max_connection_buffer", "grpc_max_connection_buffer"),
            ("write_timeout_secs", "grpc_write_timeout_secs"),
            ("permit_pings_without_calls", "grpc_keepalive_permit_without_calls"),
            ("max_pings_without_data", "grpc_http2_max_pings_without_data"),
            ("min_recv_ping_interval_ms", "grpc_http2_min_recv_ping_interval_without_data"),
            ("max_ping_strikes", "grpc_http2_max_ping_strikes"),
        ):
            value = options.get(option)
            if value is not None:
                given[field] = value
        return cls(**given)
