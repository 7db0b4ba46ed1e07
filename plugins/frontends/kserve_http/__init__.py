"""Hook module of the KServe v2 HTTP frontend: registers it and its options (tritonserver's
``--allow-http``, ``--http-port`` and ``--http-address`` among them), imports nothing else.

The frontend class is named by import path so that loading this plugin costs no uvicorn
import; ``inferd.plugins.frontends.kserve_http.frontend`` holds the server itself.
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

# A head is a few hundred bytes: 10 s is generous even on a congested link. The body timeout
# bounds the wait for each next piece of a body (not the whole body, whose size is up to
# --http-max-input-size) and for a client to read the next piece of a response.
DEFAULT_HEADER_TIMEOUT_SECS = 10.0
DEFAULT_BODY_TIMEOUT_SECS = 30.0
# uvicorn's own default: an idle keep-alive connection costs a descriptor and a little memory;
# clients reconnect cheaply (tritonclient keeps its pool warm while it sends).
DEFAULT_KEEP_ALIVE_TIMEOUT_SECS = 5.0
LISTEN = ListenFlags("http", 8000)
# The HTTP server: our own httptools connection calling the app directly, or uvicorn's
# (guarded the same way) through ASGI.
IMPLEMENTATIONS = ("loop", "uvicorn")
DEFAULT_IMPLEMENTATION = "loop"


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
    LISTEN.add_to(group)
    group.add_argument(
        "--http-max-input-size", type=byte_count(), default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest HTTP request body, before and after decompression, and largest input "
        f"tensor (default {DEFAULT_MAX_INPUT_SIZE})",
    )
    group.add_argument(
        "--http-header-timeout-secs", type=positive_seconds,
        default=DEFAULT_HEADER_TIMEOUT_SECS, metavar="SECS",
        help="time a connection has to send a complete request head, from its opening or the "
        "previous response; 408 and close after it (default "
        f"{DEFAULT_HEADER_TIMEOUT_SECS:g})",
    )
    group.add_argument(
        "--http-body-timeout-secs", type=positive_seconds,
        default=DEFAULT_BODY_TIMEOUT_SECS, metavar="SECS",
        help="longest wait for the next bytes of a request body (then 408 and close) or for a "
        f"client to read a response (then the connection is dropped) (default "
        f"{DEFAULT_BODY_TIMEOUT_SECS:g})",
    )
    group.add_argument(
        "--http-keep-alive-timeout-secs", type=positive_seconds,
        default=DEFAULT_KEEP_ALIVE_TIMEOUT_SECS, metavar="SECS",
        help="close a connection that begins no request for this long after its opening or "
        f"the previous response (default {DEFAULT_KEEP_ALIVE_TIMEOUT_SECS:g})",
    )
    group.add_argument(
        "--http-restricted-api", action="append", default=[], type=parse_restriction,
        metavar="GROUPS:KEY=VALUE",
        help="answer the API groups (health, metadata, inference, shared-memory, "
        "model-config, model-repository, statistics, trace, logging) only with header KEY: "
        "VALUE (repeatable)",
    )
    group.add_argument(
        "--http-max-connections", type=positive_count, default=None, metavar="N",
        help="most open HTTP connections; at the cap a new one replaces the one waiting "
        "longest without a request in flight, or, if every one has one, is answered 503 and "
        "closed (default half the open-file limit, at most 16384)",
    )
    group.add_argument(
        "--http-implementation", choices=IMPLEMENTATIONS, default=DEFAULT_IMPLEMENTATION,
        help="the HTTP server: 'loop' parses HTTP/1.1 with httptools and calls the routes "
        "directly; 'uvicorn' serves the same app through uvicorn's ASGI cycle (default "
        f"{DEFAULT_IMPLEMENTATION})",
    )
    group.add_argument(
        "--http-ssl-certfile", default="", metavar="PATH",
        help="serve HTTPS with this PEM certificate (chain); inferd's flag, tritonserver has "
        "no TLS for HTTP")
    group.add_argument(
        "--http-ssl-keyfile", default="", metavar="PATH",
        help="the PEM private key of --http-ssl-certfile (default: in the certificate file)")
    group.add_argument(
        "--http-ssl-ca-certs", default="", metavar="PATH",
        help="mutual TLS: PEM certificates of the CAs whose client certificates are accepted; "
        "a client without one is refused")
