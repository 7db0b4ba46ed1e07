"""Hook module of the KServe v2 gRPC frontend: registers it and its options
(``--allow-grpc``, ``--grpc-port``, ``--grpc-address``, ``--grpc-max-input-size``,
``--grpc-restricted-protocol``, the connection bounds ``--grpc-handshake-timeout-secs``,
``--grpc-max-connection-idle-secs`` and ``--grpc-max-connections``, tritonserver's keepalive
flags ``--grpc-keepalive-time`` and ``--grpc-keepalive-timeout``, and tritonserver's TLS flags
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
LISTEN = ListenFlags("grpc", 8001)
# The gRPC servers: HTTP/2 on the event loop (``loop_server``), or grpc.aio.
IMPLEMENTATIONS = ("loop", "grpcio")
DEFAULT_IMPLEMENTATION = "loop"


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
