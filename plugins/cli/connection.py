"""The client side of the ``inferd`` command: one ``Connection`` interface over the three
protocols a server speaks, chosen by the URL's scheme.

``tcp://`` is inferd's native zmq client, ``http://`` and ``https://`` tritonclient.http,
``grpc://`` tritonclient.grpc. Each answer comes back in one plain form (``IndexRow``,
``OutputTensor``, KServe statistics dicts with integer counts), and every failure as one of
two errors: ``CannotConnect`` (nothing answers: exit code 3) or ``Refused`` (the server
answered no: exit code 1). This module owns that interface, its plain forms and errors, the
choice of protocol and the liveness probe; each protocol's differences are its connection's
(``zmq_connection``, ``kserve_connections``, imported only once a URL names one). Nothing here
knows how a command presents its result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import numpy as np

DEFAULT_URL = "tcp://127.0.0.1:8003"
SCHEMES = ("tcp", "http", "https", "grpc")
# The ports `inferd serve` (and tritonserver) listen on by default.
DEFAULT_PORTS = {"tcp": 8003, "http": 8000, "https": 8000, "grpc": 8001}


class CannotConnect(Exception):
    """No server answered at the URL within the connect timeout."""


class Refused(Exception):
    """The server answered with an error; ``str()`` is its message."""


class BadUrl(ValueError):
    """A URL whose scheme or address the command cannot use (a usage error)."""


@dataclass(frozen=True, slots=True)
class IndexRow:
    name: str
    version: str = ""
    state: str = ""
    reason: str = ""
    memory_bytes: int = 0  # with --model-memory-budget: what a READY version holds
    last_used_ms: int = 0  # and its last inference (ms since the epoch)


@dataclass(frozen=True, slots=True)
class InputSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class InputTensor:
    name: str
    datatype: str
    data: np.ndarray


@dataclass(frozen=True, slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray


@dataclass(frozen=True, slots=True)
class InferAnswer:
    model: str
    version: str
    outputs: tuple[OutputTensor, ...]


class Connection(Protocol):
    """What the client commands ask of a server, whatever the protocol."""

    url: str

    def is_live(self) -> bool: ...

    def index(self, ready_only: bool = False) -> list[IndexRow]: ...

    def load(self, model: str, config: str | None, files: Mapping[str, bytes],
             versions: Sequence[int] = ()) -> None:
        """``files`` maps ``<version>/<path>`` to the content (no ``file:`` prefix);
        ``versions`` (inferd's): load exactly these, leaving the others."""

    def unload(self, model: str, dependents: bool, versions: Sequence[int] = ()) -> None: ...

    def labels(self, model: str, moved: Mapping[str, int | None],
               canary_percent: float | None) -> dict[str, Any]:
        """Read (nothing moved) or move a model's version labels (inferd's): the labels
        document (``model``, ``labels``, ``canary_percent``) after the switch."""

    def inputs(self, model: str, version: str) -> list[InputSpec]: ...

    def infer(self, model: str, inputs: Sequence[InputTensor], outputs: Sequence[str],
              version: str) -> InferAnswer: ...

    def statistics(self, model: str, version: str) -> list[dict[str, Any]]: ...

    def catalog(self, labels: Sequence[tuple[str, str]], task: str) -> list[dict[str, Any]]:
        """The model catalog (an inferd extension), as ``GET v2/catalog`` gives its models."""

    def close(self) -> None: ...


def open_connection(url: str, timeout: float, connect_timeout: float) -> Connection:
    """A connection to the server at ``url`` that has answered a liveness probe within
    ``connect_timeout`` seconds; ``timeout`` bounds each later request."""
    parts = urlsplit(url if "://" in url else f"tcp://{url}")
    if parts.scheme not in SCHEMES:
        raise BadUrl(f"{url}: the scheme must be one of "
                     f"{', '.join(s + '://' for s in SCHEMES)}")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise BadUrl(f"{url}: the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise BadUrl(f"{url}: expected SCHEME://HOST[:PORT]")
    address = f"{parts.hostname}:{port}"
    connection: Connection
    if parts.scheme == "tcp":
        from inferd.plugins.cli.zmq_connection import ZmqConnection

        # The probe gets its own short-lived client: the zmq client's timeout is fixed at
        # construction and the later requests (a load) may need far longer.
        with translated_errors(url):
            probe = ZmqConnection(f"tcp://{address}", connect_timeout)
            try:
                _probe(probe, url, connect_timeout)
            finally:
                probe.close()
        return ZmqConnection(f"tcp://{address}", timeout)
    from inferd.plugins.cli.kserve_connections import GrpcConnection, HttpConnection

    if parts.scheme == "grpc":
        connection = GrpcConnection(url, address, timeout, connect_timeout)
    else:
        connection = HttpConnection(url, address, parts.scheme == "https", timeout,
                                    connect_timeout)
    try:
        _probe(connection, url, connect_timeout)
    except BaseException:
        connection.close()
        raise
    return connection


def _probe(connection: Connection, url: str, connect_timeout: float) -> None:
    try:
        with translated_errors(url):
            live = connection.is_live()
    except Refused as error:  # anything short of an answer means no usable server there
        raise CannotConnect(f"no inferd server answers at {url} within {connect_timeout:g} s "
                            f"({error})") from None
    except CannotConnect:
        raise CannotConnect(f"no inferd server answers at {url} within "
                            f"{connect_timeout:g} s") from None
    if not live:
        raise CannotConnect(f"the server at {url} is not live")


@contextlib.contextmanager
def translated_errors(url: str) -> Iterator[None]:
    """Every protocol's failures as ``Refused`` or ``CannotConnect``."""
    from tritonclient.utils import InferenceServerException

    from inferd.protocols.errors import InferdError

    try:
        yield
    except InferdError as error:
        if error.message.startswith("no reply from "):  # the zmq client's own timeout
            raise CannotConnect(error.message) from None
        raise Refused(error.message) from None
    except InferenceServerException as error:
        status = str(error.status() or "")
        if status in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED") and \
                _is_transport(error.message() or ""):
            raise CannotConnect(f"{url}: {error.message()}") from None
        raise Refused(str(error.message())) from None
    except OSError as error:  # geventhttpclient's refused or reset connections
        raise CannotConnect(f"{url}: {error.strerror or error}") from None


def _is_transport(message: str) -> bool:
    """gRPC's wording when nothing answered (not a server's own UNAVAILABLE reply)."""
    return any(words in message for words in (
        "failed to connect", "Deadline Exceeded", "Connection refused", "connection refused",
        "Socket closed", "DNS resolution failed", "Connection reset"))
