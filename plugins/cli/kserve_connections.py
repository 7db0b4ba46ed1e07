"""The ``inferd`` command's KServe connections: tritonclient.http (``http://``, ``https://``)
and tritonclient.grpc (``grpc://``) behind ``Connection``.

Owns each protocol's differences: what tritonclient cannot send (inferd's ``versions`` of a
load or unload, version labels, the catalog) goes as a raw call with tritonclient's own error
handling, and every answer comes back in the plain forms of ``connection`` (gRPC's
string-encoded int64 fields as ints). Failures are translated by ``connection``'s
``translated_errors``; it never decides which protocol a URL speaks.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import numpy as np

from inferd.plugins.cli.connection import (
    BadUrl,
    IndexRow,
    InferAnswer,
    InputSpec,
    InputTensor,
    OutputTensor,
    Refused,
)


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
