"""Loading one model version in an executor: its backend, imported the first time a version
names it, and the blocking work of a load (the model, its instances, their warm-up, what the
load took from the process's memory).

``load_version`` runs on a background thread (``load_priority``); the executor actor turns
its result into instance slots. Owns the backends an executor has imported and the steps of
one load, in order; it must not touch the event loop, the actor's instances or any message
but ``LoadVersion``, and a load that fails leaves nothing behind (its instances closed, its
model unloaded).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from inferd.kernel.actors.executor.memory_return import Footprint, ProcessMemory, measured_load
from inferd.kernel.actors.executor.warmup import Execution, warm_up, warmup_samples
from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.backends import Backend, BackendRegistry, Instance, Model, ModelContext
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import LoadVersion

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedVersion:
    """A loaded version, by its load id: what an unload closes and gives back."""

    name: str
    version: int
    model: Model
    instance_ids: tuple[int, ...]
    footprint: Footprint


@dataclass(slots=True)
class LoadResult:
    """What one load made: the model, its instances and their warm-up, what it took."""

    model: Model
    instances: list[Instance]
    executions: list[Execution]
    footprint: Footprint


class Backends:
    """The backends of ``registry`` an executor has imported, each once, by name."""

    def __init__(self, registry: BackendRegistry) -> None:
        self._specs = registry
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()  # loads run in threads, possibly two at once

    def get(self, name: str) -> Backend:
        with self._lock:
            backend = self._backends.get(name)
            if backend is None:
                backend = self._backends[name] = self._import(name)
            return backend

    def _import(self, name: str) -> Backend:
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(self._specs.names()) or "none"
            raise Unavailable(
                f"backend '{name}' is not installed in this server (installed: {known})"
            )
        try:
            return spec.load_class()()
        except ImportError as error:
            raise Unavailable(
                f"backend '{name}' cannot be used on this machine: {error}"
            ) from error

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()


def load_version(backends: Backends, message: LoadVersion, context: ModelContext,
                 memory: ProcessMemory) -> LoadResult:
    """Load ``message``'s version (blocking: on a background thread), its lines naming it,
    and measure what the load took from ``memory``."""
    with log_context.bound(message.model, message.version):
        before = memory.reading()
        model, instances, executions = _load_model(backends, message, context)
        footprint = measured_load(message.model, message.version, before, memory.reading())
        return LoadResult(model, instances, executions, footprint)


def _load_model(backends: Backends, message: LoadVersion, context: ModelContext
                ) -> tuple[Model, list[Instance], list[Execution]]:
    started = time.perf_counter()
    model = backends.get(message.backend).load_model(context)
    first = message.first_instance
    instances = [model.create_instance(i) for i in range(first, first + message.instance_count)]
    samples = warmup_samples(model.config, message.version, Path(message.path))
    executions: list[Execution] = []
    if samples:
        try:
            executions = warm_up(instances, samples, model.config, first)
        except BaseException:
            for instance in instances:
                instance.close()
            model.unload()
            raise
        log.info("warmed up %s version %d with %d sample(s)", message.model,
                 message.version, len(samples))
    log.info("loaded %s version %d (%d instance%s) in %.2f s", message.model,
             message.version, len(instances), "" if len(instances) == 1 else "s",
             time.perf_counter() - started)
    return model, instances, executions
