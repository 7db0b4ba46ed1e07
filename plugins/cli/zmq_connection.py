"""The ``inferd`` command's ``tcp://`` connection: inferd's native zmq client
(``inferd.protocols.client``) behind ``Connection``.

Owns turning that client's calls and answers into the plain forms of ``connection``; its
failures (``InferdError``) are translated there (``translated_errors``), and it never decides
which protocol a URL speaks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inferd.plugins.cli.connection import (
    IndexRow,
    InferAnswer,
    InputSpec,
    InputTensor,
    OutputTensor,
)


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
        from inferd.protocols.kserve_http.admin import catalog_document
        from inferd.protocols.messages import Catalog

        entries = self._client.catalog(dict(labels), task)
        models: list[dict[str, Any]] = catalog_document(Catalog(tuple(entries)))["models"]
        return models

    def close(self) -> None:
        self._client.close()
