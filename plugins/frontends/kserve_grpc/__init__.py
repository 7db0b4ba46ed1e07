"""Hook module of the KServe v2 gRPC frontend: registers it and its ``--allow-grpc`` option,
and imports nothing else.

The frontend class is named by import path so that loading this plugin costs no grpc
import; ``inferd.plugins.frontends.kserve_grpc.frontend`` holds the protocol itself. Its port
and address are the server's own ``--grpc-port``/``--grpc-address`` settings.
"""

from __future__ import annotations

import argparse

from inferd.kernel.frontend import FrontendRegistry, FrontendSpec
from inferd.kernel.hookspecs import hookimpl

_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}


def _boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


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
    parser.add_argument(
        "--allow-grpc", dest="allow_grpc", type=_boolean, nargs="?", const=True, default=True,
        metavar="BOOL", help="serve the KServe v2 gRPC API on --grpc-port (default true)",
    )
