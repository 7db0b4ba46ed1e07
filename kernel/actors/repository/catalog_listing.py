"""The model catalog as the repository can tell it: each model described without loading it.

Owns ``CatalogReader``: for every model folder, its platform and backend, version folders,
the versions its policy loads, its inputs and outputs (from the config as
``ModelRepository.resolve`` reads it, completed from the model file by the backend's
``BackendSpec.completion`` where the config leaves them out and the backend can do so
without running the model's own code, e.g. an ONNX file's signature), and its
``catalog.toml`` metadata; plus the metadata alone for the repository index. A description
is cached until the model's folder changes (its fingerprint), so a model file is opened once.
Synchronous (the repository actor runs it in a worker thread); it never starts an executor,
and the states of loaded models are control's to add.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from inferd.kernel.actors.repository.catalog import (
    CATALOG_FILENAME,
    CatalogFilter,
    ModelCatalog,
    read_catalog,
)
from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.actors.scheduler.request_validation import ModelSignature
from inferd.kernel.modelconfig.reading import ModelConfig, backend_can_auto_complete
from inferd.kernel.modelconfig.sequence_plan import client_config, execution_config
from inferd.kernel.sdk.backends import BackendRegistry, ModelContext
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import CatalogEntry

log = logging.getLogger(__name__)


def tensor_specs(config: ModelConfig) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(inputs, outputs) of a config as model metadata shows them (batch dimension first)."""
    signature = ModelSignature.from_config(config)
    return signature.metadata(signature.inputs), signature.metadata(signature.outputs)


class CatalogReader:
    def __init__(self, repository: ModelRepository, backends: BackendRegistry,
                 *, auto_complete: bool = True) -> None:
        self._repository = repository
        self._backends = backends
        self._auto_complete = auto_complete
        # model -> (folder fingerprint, its entry, its metadata)
        self._cache: dict[str, tuple[str, CatalogEntry, ModelCatalog | None]] = {}

    def metadata(self) -> dict[str, Any]:
        """model -> its valid ``catalog.toml`` as JSON (models without one, or with a broken
        one, are left out: the catalog endpoint and ``inferd check`` say what is wrong)."""
        names, problems = self._repository.list_models()
        found: dict[str, Any] = {}
        for name in names:
            if name in problems:
                continue
            try:
                catalog = read_catalog(self._repository.folder(name),
                                       f"{name}/{CATALOG_FILENAME}")
            except InferdError:
                continue
            if catalog is not None:
                found[name] = catalog.to_json()
        return found

    def describe(self, wanted: CatalogFilter) -> list[CatalogEntry]:
        """Every model the filter keeps, by name."""
        names, problems = self._repository.list_models()
        entries = []
        for name in names:
            entry, catalog = self._describe(name, problems.get(name, ""))
            if wanted.keeps(catalog):
                entries.append(entry)
        for gone in set(self._cache) - set(names):
            self._cache.pop(gone, None)
        return entries

    def _describe(self, name: str, problem: str) -> tuple[CatalogEntry, ModelCatalog | None]:
        if problem:
            return CatalogEntry(name, error=problem), None
        try:
            fingerprint = self._repository.fingerprint(name)
        except InferdError as error:
            return CatalogEntry(name, error=error.message), None
        cached = self._cache.get(name)
        if cached is not None and cached[0] == fingerprint:
            return cached[1], cached[2]
        entry, catalog = self._read(name)
        self._cache[name] = (fingerprint, entry, catalog)
        return entry, catalog

    def _read(self, name: str) -> tuple[CatalogEntry, ModelCatalog | None]:
        folder = self._repository.folder(name)
        entry = CatalogEntry(name, versions=tuple(map(str, self._repository.versions(folder))))
        catalog: ModelCatalog | None = None
        try:
            catalog = read_catalog(folder, f"{name}/{CATALOG_FILENAME}")
        except InferdError as error:
            entry = replace(entry, error=error.message)
        if catalog is not None:
            entry = replace(entry, metadata=catalog.to_json())
        try:
            resolved = self._repository.resolve(name, log_warnings=False)
        except InferdError as error:
            return replace(entry, error=entry.error or error.message), catalog
        config = ModelConfig.FromString(resolved.config)
        entry = replace(entry, platform=config.platform, backend=config.backend,
                        loadable=tuple(map(str, resolved.versions)))
        if not (config.input and config.output):
            config = self._completed(name, folder, config, max(resolved.versions))
        inputs, outputs = tensor_specs(config)
        return replace(entry, inputs=inputs, outputs=outputs), catalog

    def _completed(self, name: str, folder: Any, config: ModelConfig, version: int
                   ) -> ModelConfig:
        """The config completed from the model file, where that needs no model code."""
        spec = self._backends.get(config.backend) if config.backend else None
        if (spec is None or not spec.completion or spec.completion_runs_model_code
                or not self._auto_complete
                or not backend_can_auto_complete(config, self._backends)):
            return config
        context = ModelContext(name=name, version=version, model_dir=folder,
                               config=execution_config(config))
        try:
            completion = spec.load_completion()
            assert completion is not None
            return client_config(completion(context), config)
        except Exception as error:  # the load will say it again; the catalog lists the rest
            log.info("catalog: the inputs and outputs of %s could not be read from its model "
                     "file: %s", name, error)
            return config
