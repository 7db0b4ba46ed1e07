"""The repository actor: the kernel's window onto the model repository folders.

It answers ``ListModels``, ``FingerprintModels`` and ``ResolveModel`` by running
``inferd.kernel.repository``'s synchronous reading, parsing and validation in a worker
thread, and ``DescribeModels`` and ``ReadCatalogs`` (the model catalog) through
``inferd.kernel.catalog_listing`` the same way, so a slow disk never stalls the event loop.
It holds no model state; control decides what to do with what it reads.
"""

from __future__ import annotations

import anyio

from inferd.kernel.actor import Actor
from inferd.kernel.backend import BackendRegistry
from inferd.kernel.catalog import CatalogFilter
from inferd.kernel.catalog_listing import CatalogReader
from inferd.kernel.repository import ModelRepository
from inferd.kernel.router import Router
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import (
    Catalog,
    Catalogs,
    DescribeModels,
    Envelope,
    FingerprintModels,
    Fingerprints,
    ListModels,
    ModelList,
    ReadCatalogs,
    ResolvedModel,
    ResolveModel,
)


class RepositoryActor(Actor):
    address = "repository"

    def __init__(
        self,
        router: Router,
        roots: tuple[str, ...],
        backends: BackendRegistry,
        *,
        auto_complete: bool,
        config_name: str = "",
    ) -> None:
        super().__init__(router)
        self._repository = ModelRepository(roots, backends, auto_complete=auto_complete,
                                           config_name=config_name)
        self._catalog = CatalogReader(self._repository, backends, auto_complete=auto_complete)

    async def on_list_models(self, message: ListModels, envelope: Envelope) -> ModelList:
        names, problems = await anyio.to_thread.run_sync(self._repository.list_models)
        return ModelList(names, problems)

    async def on_fingerprint_models(
        self, message: FingerprintModels, envelope: Envelope
    ) -> Fingerprints:
        def fingerprint_all() -> Fingerprints:
            names, problems = self._repository.list_models()
            fingerprints = {}
            for name in names:
                if name in problems:
                    continue
                try:
                    fingerprints[name] = self._repository.fingerprint(name)
                except InferdError:
                    continue  # removed while we looked: the next poll sees it gone
            return Fingerprints(fingerprints, problems)

        return await anyio.to_thread.run_sync(fingerprint_all)

    async def on_resolve_model(self, message: ResolveModel, envelope: Envelope) -> ResolvedModel:
        def resolve() -> ResolvedModel:
            return self._repository.resolve(
                message.model,
                config_override=message.config_override,
                path_override=message.path_override,
            )

        return await anyio.to_thread.run_sync(resolve)

    async def on_describe_models(self, message: DescribeModels, envelope: Envelope) -> Catalog:
        wanted = CatalogFilter(message.labels, message.task)
        entries = await anyio.to_thread.run_sync(self._catalog.describe, wanted)
        return Catalog(tuple(entries))

    async def on_read_catalogs(self, message: ReadCatalogs, envelope: Envelope) -> Catalogs:
        return Catalogs(await anyio.to_thread.run_sync(self._catalog.metadata))
