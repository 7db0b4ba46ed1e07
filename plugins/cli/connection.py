"""The client side of the ``inferd`` command: one ``Connection`` interface over the three
protocols a server speaks, chosen by the URL's scheme.

``tcp://`` is inferd's native zmq client, ``http://`` and ``https://`` tritonclient.http,
``grpc://`` tritonclient.grpc. Each answer comes back in one plain form (``IndexRow``,
``OutputTensor``, KServe statistics dicts with integer counts), and every failure as one of
two errors: ``CannotConnect`` (nothing answers: exit code 3) or ``Refused`` (the server
answered no: exit code 1). This module owns the protocol differences and nothing of how a
command presents its result.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

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


def _integers(value: Any) -> Any:
    """A JSON tree with gRPC's string-encoded int64 fields (counts, nanoseconds, shapes)
    turned back into ints; names and versions stay strings."""
    if isinstance(value, dict):
        return {key: item if key in _TEXT_FIELDS else _integers(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_integers(item) for item in value]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


_TEXT_FIELDS = frozenset({"name", "version", "versions", "platform", "datatype"})


class ZmqConnection:
    """inferd's own client (``inferd.protocols.client``)."""

    def __init__(self, url: str, timeout: float) -> None:
        from inferd.protocols.client import Client

        self.url = url
        self._client = Client(url, timeout=timeout)

    def is_live(self) -> bool:
        return bool(self._client.is_live())

    def index(self, ready_only: bool = False) -> list[IndexRow]:
        return [IndexRow(e.name, e.version, e.state, e.reason, e.memory_bytes, e.last_used_ms)
                for e in self._client.index(ready_only)]

    def load(self, model: str, config: str | None, files: Mapping[str, bytes],
             versions: Sequence[int] = ()) -> None:
        self._client.load(model, config=config, files=dict(files), versions=versions)

    def unload(self, model: str, dependents: bool, versions: Sequence[int] = ()) -> None:
        self._client.unload(model, unload_dependents=dependents, versions=versions)

    def labels(self, model: str, moved: Mapping[str, int | None],
               canary_percent: float | None) -> dict[str, Any]:
        reply = self._client.labels(
            model, {k: v for k, v in moved.items() if v is not None},
            remove=[k for k, v in moved.items() if v is None], canary_percent=canary_percent)
        return {"model": reply.model, "labels": dict(sorted(reply.labels.items())),
                "canary_percent": reply.canary_percent}

    def inputs(self, model: str, version: str) -> list[InputSpec]:
        metadata = self._client.model_metadata(model, version)
        return [InputSpec(spec.name, spec.datatype, tuple(spec.shape))
                for spec in metadata.inputs]

    def infer(self, model: str, inputs: Sequence[InputTensor], outputs: Sequence[str],
              version: str) -> InferAnswer:
        from inferd.protocols.messages import Tensor

        tensors = [Tensor(t.name, t.datatype, tuple(t.data.shape), t.data) for t in inputs]
        result = self._client.infer(model, tensors, outputs=outputs, version=version)
        return InferAnswer(result.model, result.version, tuple(
            OutputTensor(t.name, t.datatype, tuple(t.shape), t.data)
            for t in result.outputs.values()))

    def statistics(self, model: str, version: str) -> list[dict[str, Any]]:
        return list(self._client.statistics(model, version))

    def catalog(self, labels: Sequence[tuple[str, str]], task: str) -> list[dict[str, Any]]:
        from inferd.protocols.kserve_http_admin import catalog_document
        from inferd.protocols.messages import Catalog

        entries = self._client.catalog(dict(labels), task)
        models: list[dict[str, Any]] = catalog_document(Catalog(tuple(entries)))["models"]
        return models

    def close(self) -> None:
        self._client.close()


class HttpConnection:
    """tritonclient.http against the KServe HTTP frontend."""

    def __init__(self, url: str, address: str, ssl: bool, timeout: float,
                 connect_timeout: float) -> None:
        import tritonclient.http as http

        self.url = url
        self._http = http
        self._client = http.InferenceServerClient(
            address, ssl=ssl, connection_timeout=connect_timeout, network_timeout=timeout)

    def is_live(self) -> bool:
        return bool(self._client.is_server_live())

    def index(self, ready_only: bool = False) -> list[IndexRow]:
        # tritonclient cannot ask for ready models only: filter here
        index = self._client.get_model_repository_index()
        rows = [IndexRow(row.get("name", ""), row.get("version", ""), row.get("state", ""),
                         row.get("reason", ""), int(row.get("memory_bytes", 0)),
                         int(row.get("last_used_ms", 0))) for row in index]
        return [row for row in rows if row.state == "READY"] if ready_only else rows

    def load(self, model: str, config: str | None, files: Mapping[str, bytes],
             versions: Sequence[int] = ()) -> None:
        if not versions:
            self._client.load_model(model, config=config, files=_prefixed(files))
            return
        # tritonclient sends no parameter it does not know: the same body, with 'versions'.
        parameters: dict[str, Any] = {"versions": list(versions)}
        if config is not None:
            parameters["config"] = config
        for path, content in files.items():
            parameters[f"file:{path}"] = base64.b64encode(content).decode("ascii")
        self._post(f"v2/repository/models/{quote(model)}/load", {"parameters": parameters})

    def unload(self, model: str, dependents: bool, versions: Sequence[int] = ()) -> None:
        if not versions:
            self._client.unload_model(model, unload_dependents=dependents)
            return
        self._post(f"v2/repository/models/{quote(model)}/unload",
                   {"parameters": {"unload_dependents": dependents,
                                   "versions": list(versions)}})

    def labels(self, model: str, moved: Mapping[str, int | None],
               canary_percent: float | None) -> dict[str, Any]:
        body: dict[str, Any] = {"labels": dict(moved)}
        if canary_percent is not None:
            body["canary_percent"] = canary_percent
        return self._post(f"v2/repository/models/{quote(model)}/labels", body)

    def _post(self, uri: str, body: dict[str, Any]) -> dict[str, Any]:
        """An inferd extension's POST, with tritonclient's error handling."""
        from tritonclient.http._utils import _raise_if_error

        response = self._client._post(uri, json.dumps(body), None, None)
        _raise_if_error(response)
        text = response.read()
        answer: dict[str, Any] = json.loads(text) if text else {}
        return answer

    def inputs(self, model: str, version: str) -> list[InputSpec]:
        metadata = self._client.get_model_metadata(model, version)
        return [InputSpec(spec["name"], spec["datatype"], tuple(int(d) for d in spec["shape"]))
                for spec in metadata.get("inputs", [])]

    def infer(self, model: str, inputs: Sequence[InputTensor], outputs: Sequence[str],
              version: str) -> InferAnswer:
        requested = []
        for tensor in inputs:
            request = self._http.InferInput(tensor.name, list(tensor.data.shape),
                                            tensor.datatype)
            request.set_data_from_numpy(tensor.data, binary_data=True)
            requested.append(request)
        wanted = [self._http.InferRequestedOutput(name, binary_data=True) for name in outputs]
        result = self._client.infer(model, requested, model_version=version,
                                    outputs=wanted or None)
        response = result.get_response()
        return InferAnswer(response.get("model_name", model), response.get("model_version", ""),
                           tuple(_output(o["name"], o["datatype"], o["shape"],
                                         result.as_numpy(o["name"]))
                                 for o in response.get("outputs", [])))

    def statistics(self, model: str, version: str) -> list[dict[str, Any]]:
        stats = self._client.get_inference_statistics(model, version)
        return list(stats.get("model_stats", []))

    def catalog(self, labels: Sequence[tuple[str, str]], task: str) -> list[dict[str, Any]]:
        # tritonclient knows no inferd extension: its plain GET, with its error handling.
        from tritonclient.http._utils import _raise_if_error

        query: dict[str, Any] = {"label": [f"{key}={value}" for key, value in labels]}
        if task:
            query["task"] = task
        response = self._client._get("v2/catalog", None, query)
        _raise_if_error(response)
        models: list[dict[str, Any]] = json.loads(response.read())["models"]
        return models

    def close(self) -> None:
        self._client.close()


class GrpcConnection:
    """tritonclient.grpc against the KServe gRPC frontend."""

    def __init__(self, url: str, address: str, timeout: float, connect_timeout: float) -> None:
        import tritonclient.grpc as grpc

        self.url = url
        self._grpc = grpc
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._client = grpc.InferenceServerClient(address)

    def is_live(self) -> bool:
        return bool(self._client.is_server_live(client_timeout=self._connect_timeout))

    def index(self, ready_only: bool = False) -> list[IndexRow]:
        reply = self._client.get_model_repository_index(as_json=True,
                                                        client_timeout=self._timeout)
        rows = [IndexRow(row.get("name", ""), row.get("version", ""), row.get("state", ""),
                         row.get("reason", "")) for row in reply.get("models", [])]
        return [row for row in rows if row.state == "READY"] if ready_only else rows

    def load(self, model: str, config: str | None, files: Mapping[str, bytes],
             versions: Sequence[int] = ()) -> None:
        if not versions:
            self._client.load_model(model, config=config, files=_prefixed(files),
                                    client_timeout=self._timeout)
            return
        from tritonclient.grpc import service_pb2

        request = service_pb2.RepositoryModelLoadRequest(model_name=model)
        request.parameters["versions"].string_param = json.dumps(list(versions))
        if config is not None:
            request.parameters["config"].string_param = config
        for path, content in files.items():
            request.parameters[f"file:{path}"].bytes_param = content
        self._call(self._client._client_stub.RepositoryModelLoad, request)

    def unload(self, model: str, dependents: bool, versions: Sequence[int] = ()) -> None:
        if not versions:
            self._client.unload_model(model, unload_dependents=dependents,
                                      client_timeout=self._timeout)
            return
        from tritonclient.grpc import service_pb2

        request = service_pb2.RepositoryModelUnloadRequest(model_name=model)
        request.parameters["versions"].string_param = json.dumps(list(versions))
        request.parameters["unload_dependents"].bool_param = dependents
        self._call(self._client._client_stub.RepositoryModelUnload, request)

    def labels(self, model: str, moved: Mapping[str, int | None],
               canary_percent: float | None) -> dict[str, Any]:
        raise Refused("version labels are an HTTP extension: use an http:// or tcp:// --url")

    def _call(self, method: Any, request: Any) -> None:
        """A raw stub call (tritonclient sends no parameter it does not know), with
        tritonclient's error translation."""
        import grpc
        from tritonclient.grpc._utils import raise_error_grpc

        try:
            method(request=request, timeout=self._timeout)
        except grpc.RpcError as error:
            raise_error_grpc(error)

    def inputs(self, model: str, version: str) -> list[InputSpec]:
        metadata = _integers(self._client.get_model_metadata(
            model, version, as_json=True, client_timeout=self._timeout))
        return [InputSpec(spec["name"], spec["datatype"], tuple(spec.get("shape", ())))
                for spec in metadata.get("inputs", [])]

    def infer(self, model: str, inputs: Sequence[InputTensor], outputs: Sequence[str],
              version: str) -> InferAnswer:
        requested = []
        for tensor in inputs:
            request = self._grpc.InferInput(tensor.name, list(tensor.data.shape),
                                            tensor.datatype)
            request.set_data_from_numpy(tensor.data)
            requested.append(request)
        wanted = [self._grpc.InferRequestedOutput(name) for name in outputs]
        result = self._client.infer(model, requested, model_version=version,
                                    outputs=wanted or None, client_timeout=self._timeout)
        response = result.get_response()
        return InferAnswer(response.model_name, response.model_version, tuple(
            _output(o.name, o.datatype, list(o.shape), result.as_numpy(o.name))
            for o in response.outputs))

    def statistics(self, model: str, version: str) -> list[dict[str, Any]]:
        stats = _integers(self._client.get_inference_statistics(
            model, version, as_json=True, client_timeout=self._timeout))
        return list(stats.get("model_stats", []))

    def catalog(self, labels: Sequence[tuple[str, str]], task: str) -> list[dict[str, Any]]:
        raise BadUrl(f"{self.url}: the model catalog is not served over gRPC (Triton's "
                     "protocol has no call for it): use the server's http:// or tcp:// URL")

    def close(self) -> None:
        self._client.close()


def _prefixed(files: Mapping[str, bytes]) -> dict[str, bytes] | None:
    """KServe's parameter names for file overrides: ``file:<version>/<path>``."""
    return {f"file:{path}": content for path, content in files.items()} or None


def _output(name: str, datatype: str, shape: Sequence[Any], data: np.ndarray | None
            ) -> OutputTensor:
    array = np.asarray(data) if data is not None else np.empty(0)
    return OutputTensor(name, datatype, tuple(int(d) for d in shape), array)


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
        # The probe gets its own short-lived client: the zmq client's timeout is fixed at
        # construction and the later requests (a load) may need far longer.
        with translated_errors(url):
            probe = ZmqConnection(f"tcp://{address}", connect_timeout)
            try:
                _probe(probe, url, connect_timeout)
            finally:
                probe.close()
        return ZmqConnection(f"tcp://{address}", timeout)
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
