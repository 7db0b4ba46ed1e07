"""What the KServe HTTP app and its handlers pass each other: the request a handler reads
(method, path arguments, headers, whole body) and the response it returns (status, body parts
or a stream, headers, whether it may be compressed, its trace), and the one way an error
becomes a response: ``{"error": ...}`` with its status, plus the request's one error line
(``inferd.kernel.sdk.request_log``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from inferd.kernel.sdk import Trace
from inferd.kernel.sdk.request_log import request_failed
from inferd.protocols import json_bodies

# Bodies (or outputs) above this are decoded, encoded and compressed in a worker thread, so a
# large request never stalls the event loop that every other request shares.
OFFLOAD_BYTES = 1 << 20
JSON = (("content-type", "application/json"),)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path_arguments: tuple[str, ...]
    headers: dict[str, str]
    body: bytes | memoryview
    received_ns: int = 0  # when its head arrived, kept only while tracing
    query: str = ""  # the query string, decoded as latin-1 (only the catalog reads one)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    parts: tuple[bytes | memoryview, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    # Only infer responses: tritonclient decompresses those, yet sends Accept-Encoding (aiohttp's
    # default) on every call and would choke on any other compressed reply.
    compressible: bool = False
    # A body written as it is made (Server-Sent Events), after ``parts``; no content-length.
    stream: AsyncIterator[bytes] | None = None
    trace: Trace | None = None  # a traced inference: its send is stamped, then it ends

    @property
    def length(self) -> int:
        return sum(len(p) if isinstance(p, bytes) else p.nbytes for p in self.parts)


def json_response(body: bytes, status: int = 200) -> HttpResponse:
    return HttpResponse(status, (body,), JSON)


def error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, (json_bodies.encode_error(message),), JSON)


def failed(status: int, message: str, error: BaseException | None = None) -> HttpResponse:
    """A request's error answer, and its one log line
    (``inferd.kernel.sdk.request_log``)."""
    request_failed(status, message, exc_info=error)
    return error_response(status, message)
