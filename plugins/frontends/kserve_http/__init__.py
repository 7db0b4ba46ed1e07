"""Hook module of the KServe v2 HTTP frontend: registers it and its options, imports nothing else.

The frontend class is named by import path so that loading this plugin costs no uvicorn
import; ``inferd.plugins.frontends.kserve_http.frontend`` holds the server itself.
"""

from __future__ import annotations

import argparse

from inferd.kernel.frontend import FrontendRegistry, FrontendSpec
from inferd.kernel.hookspecs import hookimpl

DEFAULT_MAX_INPUT_SIZE = 64 * 2**20
_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}


def _boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


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
    group.add_argument(
        "--allow-http", type=_boolean, nargs="?", const=True, default=True, metavar="BOOL",
        help="serve the KServe v2 HTTP/REST API on --http-port (default true)",
    )
    group.add_argument(
        "--http-max-input-size", type=_byte_count, default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest HTTP request body, before and after decompression, and largest input "
        f"tensor (default {DEFAULT_MAX_INPUT_SIZE})",
    )
