"""Hook module of the KServe v2 gRPC frontend: registers it and its options
(``--allow-grpc``, ``--grpc-port``, ``--grpc-address``, ``--grpc-max-input-size``,
``--grpc-restricted-protocol``, the connection bounds ``--grpc-handshake-timeout-secs``,
``--grpc-max-connection-idle-secs`` and ``--grpc-max-connections``, tritonserver's keepalive
flags ``--grpc-keepalive-time``, ``--grpc-keepalive-timeout``,
``--grpc-keepalive-permit-without-calls``, ``--grpc-http2-max-pings-without-data``,
``--grpc-http2-min-recv-ping-interval-without-data`` and ``--grpc-http2-max-ping-strikes``,
the HTTP/2 bounds against hostile clients (``--grpc-max-concurrent-streams``,
``--grpc-max-metadata-size``, ``--grpc-reset-budget``, ``--grpc-control-frame-budget``,
``--grpc-max-connection-buffer``, ``--grpc-write-timeout-secs``; docs/security.md), and
tritonserver's TLS flags
``--grpc-use-ssl``, ``--grpc-use-ssl-mutual``, ``--grpc-server-cert``, ``--grpc-server-key``,
``--grpc-root-cert``), and imports nothing else.

The frontend class is named by import path so that loading this plugin costs no grpc
import; ``inferd.plugins.frontends.kserve_grpc.frontend`` holds the server, ``servicer`` the
RPCs (with ``streams``, ``rpc`` and ``service``).
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import (
    FrontendRegistry,
    FrontendSpec,
    ListenFlags,
    add_boolean,
    byte_count,
    hookimpl,
    positive_count,
    positive_seconds,
)
from inferd.protocols.restrictions import parse_restriction
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE

# gRPC holds its message size limits in a C int.
LARGEST_MAX_INPUT_SIZE = 2**31 - 1
# As the HTTP frontend's head timeout: the set-up of a connection is a few round trips.
DEFAULT_HANDSHAKE_TIMEOUT_SECS = 10.0
# gRPC clients keep channels open between calls and reconnect after a GOAWAY on their own, so
# an idle connection may stay a while; past this it only holds a descriptor.
DEFAULT_MAX_CONNECTION_IDLE_SECS = 300.0
# tritonserver's defaults, which are gRPC's own: a ping after two hours without a frame, and
# a connection whose ping is not answered within 20 s is closed.
DEFAULT_KEEPALIVE_TIME_MS = 7_200_000
DEFAULT_KEEPALIVE_TIMEOUT_MS = 20_000
# The ping policy: gRPC's (and tritonserver's) defaults. A client's PING that comes sooner than
# this after the last one, with no call in flight or nothing sent since, is a strike; past
# the strikes the connection ends with GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
DEFAULT_MAX_PINGS_WITHOUT_DATA = 2
DEFAULT_MIN_RECV_PING_INTERVAL_MS = 300_000
DEFAULT_MAX_PING_STRIKES = 2
# HTTP/2 bounds (docs/security.md). Streams: SETTINGS_MAX_CONCURRENT_STREAMS, as nginx's;
# a gRPC client queues its calls past it. Metadata: RFC 9113's measure of a request's header
# list (each field's name and value plus 32), SETTINGS_MAX_HEADER_LIST_SIZE; grpc's own hard
# limit by default.
DEFAULT_MAX_CONCURRENT_STREAMS = 128
DEFAULT_MAX_METADATA_SIZE = 16 * 2**10
# Streams a connection may reset or have refused, and frames that make the server answer or
# work without serving a call (PING, SETTINGS, WINDOW_UPDATE, RST_STREAM, PRIORITY, empty
# DATA and CONTINUATION, unknown types): a burst of this many, then a tenth of it a second.
# Past either, GOAWAY ENHANCE_YOUR_CALM.
DEFAULT_RESET_BUDGET = 1000
DEFAULT_CONTROL_FRAME_BUDGET = 1000
# Output one connection may have waiting: in its socket's buffer (past it the server stops
# reading the connection until the client takes it), or waiting for the client's flow-control
# windows (past it new streams are refused). A connection whose output has not moved for the
# write timeout is closed.
DEFAULT_MAX_CONNECTION_BUFFER = 4 * 2**20
DEFAULT_WRITE_TIMEOUT_SECS = 30.0
LISTEN = ListenFlags("grpc", 8001)
# The gRPC servers: HTTP/2 on the event loop (``loop_server``), or grpc.aio.
IMPLEMENTATIONS = ("loop", "grpcio")
DEFAULT_IMPLEMENTATION = "loop"


def whole_number(text: str) -> int:
    """An argparse ``type`` for a whole number of 0 or more."""
    value = int(text) if text.strip().isascii() and text.strip().isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return value


@hookimpl
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    registry.add(
        FrontendSpec(
            name="kserve_grpc",
            entry="inferd.plugins.frontends.kserve_grpc.frontend:KserveGrpcFrontend",
            enabled_option="allow_grpc",
        )
    )


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("KServe gRPC frontend")
    add_boolean(group, "--allow-grpc", True, "serve the KServe v2 gRPC API on --grpc-port")
    LISTEN.add_to(group)
    group.add_argument(
        "--grpc-max-input-size", type=byte_count(LARGEST_MAX_INPUT_SIZE),
        default=DEFAULT_MAX_INPUT_SIZE, metavar="BYTES",
        help="largest gRPC request message, refused with RESOURCE_EXHAUSTED before it is "
        f"read whole, and largest input tensor (default {DEFAULT_MAX_INPUT_SIZE})",
    )
    group.add_argument(
        "--grpc-handshake-timeout-secs", type=positive_seconds,
        default=DEFAULT_HANDSHAKE_TIMEOUT_SECS, metavar="SECS",
        help="close a connection whose HTTP/2 (and TLS) set-up has not completed after this "
        f"long (default {DEFAULT_HANDSHAKE_TIMEOUT_SECS:g})",
    )
    group.add_argument(
        "--grpc-max-connection-idle-secs", type=positive_seconds,
        default=DEFAULT_MAX_CONNECTION_IDLE_SECS, metavar="SECS",
        help="close (GOAWAY) a connection without a call in flight for this long; clients "
        f"reconnect on their next call (default {DEFAULT_MAX_CONNECTION_IDLE_SECS:g})",
    )
    group.add_argument(
        "--grpc-max-connections", type=positive_count, default=None, metavar="N",
        help="most open gRPC connections; past it a new connection is closed as soon as it "
        "is accepted (default a quarter of the open-file limit, at most 16384; HTTP's "
        "default is half)",
    )
    group.add_argument(
        "--grpc-keepalive-time", type=positive_count, default=DEFAULT_KEEPALIVE_TIME_MS,
        metavar="MS", help="ping a connection after this many milliseconds without a frame "
        f"(default {DEFAULT_KEEPALIVE_TIME_MS})",
    )
    group.add_argument(
        "--grpc-keepalive-timeout", type=positive_count, default=DEFAULT_KEEPALIVE_TIMEOUT_MS,
        metavar="MS", help="close a connection whose ping is not answered within this many "
        f"milliseconds (default {DEFAULT_KEEPALIVE_TIMEOUT_MS})",
    )
    add_boolean(group, "--grpc-keepalive-permit-without-calls", False,
                "let clients ping a connection that has no call in flight as often as "
                "--grpc-http2-min-recv-ping-interval-without-data allows (otherwise such a "
                "ping is a strike)")
    group.add_argument(
        "--grpc-http2-max-pings-without-data", type=whole_number,
        default=DEFAULT_MAX_PINGS_WITHOUT_DATA, metavar="N",
        help="most keepalive pings the server sends while it has nothing else to send, 0 for "
        f"no limit (default {DEFAULT_MAX_PINGS_WITHOUT_DATA})",
    )
    group.add_argument(
        "--grpc-http2-min-recv-ping-interval-without-data", type=whole_number,
        default=DEFAULT_MIN_RECV_PING_INTERVAL_MS, metavar="MS",
        help="a client's ping sooner than this after its last, while the server sends "
        f"nothing, is a strike (default {DEFAULT_MIN_RECV_PING_INTERVAL_MS})",
    )
    group.add_argument(
        "--grpc-http2-max-ping-strikes", type=whole_number, default=DEFAULT_MAX_PING_STRIKES,
        metavar="N", help="past this many strikes the connection ends with GOAWAY "
        "ENHANCE_YOUR_CALM \"too_many_pings\"; 0 for no limit "
        f"(default {DEFAULT_MAX_PING_STRIKES})",
    )
    group.add_argument(
        "--grpc-max-concurrent-streams", type=positive_count,
        default=DEFAULT_MAX_CONCURRENT_STREAMS, metavar="N",
        help="most calls in flight on one connection (SETTINGS_MAX_CONCURRENT_STREAMS); a "
        f"stream past it is refused (default {DEFAULT_MAX_CONCURRENT_STREAMS})",
    )
    group.add_argument(
        "--grpc-max-metadata-size", type=byte_count(2**24, smallest=1024),
        default=DEFAULT_MAX_METADATA_SIZE, metavar="BYTES",
        help="largest header list of a call, by RFC 9113's measure (SETTINGS_MAX_HEADER_LIST_"
        "SIZE); a larger one is refused with RESOURCE_EXHAUSTED "
        f"(default {DEFAULT_MAX_METADATA_SIZE})",
    )
    group.add_argument(
        "--grpc-reset-budget", type=positive_count, default=DEFAULT_RESET_BUDGET, metavar="N",
        help="streams one connection may cancel or have refused: a burst of N, then N/10 a "
        "second; past it GOAWAY ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487; loop "
        f"server) (default {DEFAULT_RESET_BUDGET})",
    )
    group.add_argument(
        "--grpc-control-frame-budget", type=positive_count,
        default=DEFAULT_CONTROL_FRAME_BUDGET, metavar="N",
        help="frames one connection may send that serve no call (PING, SETTINGS, "
        "WINDOW_UPDATE, RST_STREAM, PRIORITY, empty DATA or CONTINUATION, unknown types): a "
        "burst of N, then N/10 a second; past it GOAWAY ENHANCE_YOUR_CALM (loop server) "
        f"(default {DEFAULT_CONTROL_FRAME_BUDGET})",
    )
    group.add_argument(
        "--grpc-max-connection-buffer", type=byte_count(2**31 - 1, smallest=65_536),
        default=DEFAULT_MAX_CONNECTION_BUFFER, metavar="BYTES",
        help="output one connection may have waiting for its client: past it in the socket's "
        "buffer the server stops reading the connection, past it behind flow control new "
        f"streams are refused (loop server) (default {DEFAULT_MAX_CONNECTION_BUFFER})",
    )
    group.add_argument(
        "--grpc-write-timeout-secs", type=positive_seconds, default=DEFAULT_WRITE_TIMEOUT_SECS,
        metavar="SECS", help="close a connection whose waiting output has not moved for this "
        f"long (loop server) (default {DEFAULT_WRITE_TIMEOUT_SECS:g})",
    )
    group.add_argument(
        "--grpc-restricted-protocol", action="append", default=[], type=parse_restriction,
        metavar="GROUPS:KEY=VALUE",
        help="answer the API groups (as --http-restricted-api) only to calls whose metadata "
        "has triton-grpc-protocol-KEY: VALUE (repeatable)",
    )
    group.add_argument(
        "--grpc-implementation", choices=IMPLEMENTATIONS, default=DEFAULT_IMPLEMENTATION,
        help="the gRPC server: 'loop' speaks HTTP/2 on the event loop's own thread, as the "
        "HTTP frontend does; 'grpcio' is grpc.aio, whose poller thread hands every call to "
        f"the loop (default {DEFAULT_IMPLEMENTATION})",
    )
    add_boolean(group, "--grpc-use-ssl", False,
                "serve gRPC over TLS with --grpc-server-cert and --grpc-server-key")
    add_boolean(group, "--grpc-use-ssl-mutual", False,
                "mutual TLS: as --grpc-use-ssl, and every client must show a certificate "
                "signed by --grpc-root-cert")
    group.add_argument("--grpc-server-cert", default="", metavar="PATH",
                       help="the server's PEM certificate (chain) for --grpc-use-ssl")
    group.add_argument("--grpc-server-key", default="", metavar="PATH",
                       help="the server's PEM private key for --grpc-use-ssl")
    group.add_argument("--grpc-root-cert", default="", metavar="PATH",
                       help="PEM certificates of the CAs that sign client certificates "
                       "(--grpc-use-ssl-mutual)")
