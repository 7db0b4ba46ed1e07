"""Hook module of the KServe v2 HTTP frontend: registers it and its options, imports nothing else.

The frontend class is named by import path so that loading this plugin costs no uvicorn
import; ``inferd.plugins.frontends.kserve_http.frontend`` holds the server itself.
"""

from __future__ import annotations

import argparse

from inferd.kernel.frontend import FrontendRegistry, FrontendSpec
from inferd.kernel.hookspecs import hookimpl
from inferd.kernel.options import add_boolean

DEFAULT_MAX_INPUT_SIZE = 64 * 2**20


def _byte_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes, got {text!r}")
    return value


@hookimpl
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    registry.add(
        FrontendSpec(
            name="kserve_http",
            entry="inferd.plugins.frontends.kserve_http.frontend:KserveHttpFrontend",
            enabled_option="allow_http",
        )
    )


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("KServe HTTP frontend")
    add_boolean(group, "--allow-http", True, "serve the KServe v2 HTTP/REST API on --http-port")
    group.add_argument(
        "--http-max-input-size", type=_byte_count, default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest HTTP request body, before and after decompression, and largest input "
        f"tensor (default {DEFAULT_MAX_INPUT_SIZE})",
    )
