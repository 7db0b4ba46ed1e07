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
from inferd.kernel.options import add_boolean


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
    add_boolean(parser, "--allow-grpc", True, "serve the KServe v2 gRPC API on --grpc-port")
