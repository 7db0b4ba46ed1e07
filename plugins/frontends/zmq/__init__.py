"""Hook module of the native ZeroMQ frontend: registers it and its options (``--zmq-port``,
``--zmq-address``, ``--zmq-max-input-size``), and imports nothing else.

The frontend class is named by import path so that loading this plugin costs no pyzmq
import; ``inferd.plugins.frontends.zmq.frontend`` holds the protocol itself.

The native protocol has no TLS and no authentication (CurveZMQ is out of scope): it is the
operator's tool (``inferd models/load/unload``) and a fast path for trusted clients, so bind it
to loopback (``--zmq-address 127.0.0.1``) or a private network, and serve untrusted clients
over the KServe frontends with TLS (``--http-ssl-certfile``, ``--grpc-use-ssl``).
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import FrontendRegistry, FrontendSpec, ListenFlags, byte_count, hookimpl
from inferd.protocols.tensors import DEFAULT_MAX_INPUT_SIZE

LISTEN = ListenFlags("zmq", 8003)


@hookimpl
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    registry.add(
        FrontendSpec(name="zmq", entry="inferd.plugins.frontends.zmq.frontend:ZmqFrontend")
    )


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("native zmq frontend")
    LISTEN.add_to(group)
    group.add_argument(
        "--zmq-max-input-size", type=byte_count(), default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest frame (a request's header, or one of its tensors) a client may send; "
        "a client that sends a larger one is disconnected before it is buffered "
        f"(default {DEFAULT_MAX_INPUT_SIZE})",
    )
