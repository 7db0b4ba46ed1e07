"""The repository actor: the kernel's window onto the model repository folders.

It answers ``ListModels``, ``FingerprintModels`` and ``ResolveModel`` by running
``inferd.kernel.actors.repository.folders``'s synchronous reading, parsing and validation in a
worker thread, and ``DescribeModels`` and ``ReadCatalogs`` (the model catalog) through
``inferd.kernel.actors.repository.catalog_listing`` the same way, so a slow disk never stalls the
event loop. It holds no model state; control decides what to do with what it reads. Remote roots
(``inferd.kernel.actors.repository.mirror``) are read the same way; their fetch counters are its
metrics.
"""

from __future__ import annotations

import anyio

from inferd.kernel.sdk.agents import AgentRegistry
from inferd.kernel.actors.repository.catalog import CatalogFilter
from inferd.kernel.actors.repository.catalog_listing import CatalogReader
from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.sdk.storage import StorageRegistry
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import REPOSITORY
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.backends import BackendRegistry
from inferd.protocols.messages import (
    Catalog,
    Catalogs,
    DescribeModels,
    Envelope,
    FingerprintModels,
    Fingerprints,
    ListModels,
    Metrics,
    MetricsRequest,
    ModelList,
    ReadCatalogs,
    ResolvedModel,
    ResolveModel,
)


class RepositoryActor(Actor):
    address = REPOSITORY

    def __init__(
        self,
        router: Router,
        roots: tuple[str, ...],
        backends: BackendRegistry,
        *,
        auto_complete: bool,
        config_name: str = "",
        cache_dir: str = "",
        remote_timeout: float = 30.0,
        agents: AgentRegistry | None = None,
        storages: StorageRegistry | None = None,
    ) -> None:
        super().__init__(router)
        self._repository = ModelRepository(roots, backends, auto_complete=auto_complete,
                                           config_name=config_name, cache_dir=cache_dir or None,
                                           remote_timeout=remote_timeout, agents=agents,
                                           storages=storages)
        self._catalog = CatalogReader(self._repository, backends, auto_complete=auto_complete)

    async def on_list_models(self, message: ListModels, envelope: Envelope) -> ModelList:
        names, problems = await anyio.to_thread.run_sync(self._repository.list_models)
        return ModelList(names, problems)

    async def on_fingerprint_models(
        self, message: FingerprintModels, envelope: Envelope
    ) -> Fingerprints:
        fingerprints, problems = await anyio.to_thread.run_sync(self._repository.fingerprints)
        return Fingerprints(fingerprints, problems)

    async def on_resolve_model(self, message: ResolveModel, envelope: Envelope) -> ResolvedModel:
        def resolve() -> ResolvedModel:
            return self._repository.resolve(
                message.model,
                config_override=message.config_override,
                path_override=message.path_override,
                cached_ok=message.cached_ok,
                versions=message.versions,
                exact=message.exact,
            )

        return await anyio.to_thread.run_sync(resolve)

    async def on_describe_models(self, message: DescribeModels, envelope: Envelope) -> Catalog:
        wanted = CatalogFilter(message.labels, message.task)
        entries = await anyio.to_thread.run_sync(self._catalog.describe, wanted)
        return Catalog(tuple(entries))

    async def on_read_catalogs(self, message: ReadCatalogs, envelope: Envelope) -> Catalogs:
        return Catalogs(await anyio.to_thread.run_sync(self._catalog.metadata))

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        """What the remote roots' loads fetched (none for local roots)."""
        return Metrics(tuple(self._repository.remote.samples()))

    def check_remote_roots(self) -> list[str]:
        """Why each remote root cannot be listed now (a start-up check, in a worker
        thread); empty when all answer or there are none."""
        return [why for mirror in self._repository.remote.mirrors if (why := mirror.check())]
