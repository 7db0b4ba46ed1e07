"""Control's orders to the scheduler: which versions it serves, with which instances, and which
it lets go.

Owns carrying out, over the actor's ``RoutingTable``, ``ServeVersion`` (a new version set up
on its instances with its batching, sequences, classification labels and response cache, an
ensemble's warm-up run first; a reload swapping its instances, the streams of a restarted
executor failed and the replaced instances' batches waited for; a change of its version policy
alone), ``RetireVersion`` (no new request, then, when asked to wait, gone once its work in
flight is done), ``ModelKnown`` (a model whose load got past its config) and ``RouteLabels``
(where a request naming no version goes). It never admits or answers a request (the actor
does) and sends nothing itself: the batches a version can now form go out through the
actor's ``pump``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.classification import read_labels
from inferd.kernel.actors.scheduler.decoupled import DecoupledRequests
from inferd.kernel.actors.scheduler.ensembles.served import EnsembleState
from inferd.kernel.actors.scheduler.ensembles.warming import EnsembleWarmUps
from inferd.kernel.actors.scheduler.label_routing import LabelRoute
from inferd.kernel.actors.scheduler.progress import Progress
from inferd.kernel.actors.scheduler.requests import Slot
from inferd.kernel.actors.scheduler.response_cache import scope_for
from inferd.kernel.actors.scheduler.version_table import RoutingTable
from inferd.kernel.actors.scheduler.version import Version, sequences_of
from inferd.kernel.observability.latency_summary import LatencySummaries
from inferd.kernel.sdk.caches import ResponseCache
from inferd.kernel.sdk.metrics_config import MetricsConfig
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import (
    ModelKnown,
    RetireVersion,
    Retired,
    RouteLabels,
    ServeVersion,
)


class VersionServing:
    """Applies control's orders to ``table``; ``pump(version)`` sends what a version can
    start."""

    def __init__(self, table: RoutingTable, progress: Progress, streams: DecoupledRequests,
                 warm_ups: EnsembleWarmUps, pump: Callable[[Version], None],
                 cache: ResponseCache | None, metrics: MetricsConfig) -> None:
        self._table = table
        self._progress = progress
        self._streams = streams
        self._warm_ups = warm_ups
        self._pump = pump
        self._cache = cache
        self._metrics = metrics

    async def serve(self, message: ServeVersion) -> None:
        config = ModelConfig()
        config.ParseFromString(message.config)
        slots = [Slot(executor, instance) for executor, instance in message.instances]
        versions = self._table.served.setdefault(message.model, {})
        current = versions.get(message.version)
        if message.config_only and current is not None and not current.retired:
            current.config = config  # the same instances: only its version policy changed
            return
        ensemble = EnsembleState.for_config(config, current.ensemble if current else None)
        serving = current if current is not None and not current.retired else None
        warmed = None if ensemble is None else await self._warm_ups.before_serving(
            message.model, message.version, config, message.path, ensemble, serving)
        replaced: list[Slot] = []
        if current is not None and not current.retired:
            replaced = current.reconfigure(config, slots)
        else:
            versions[message.version] = current = Version.of(
                message.model, message.version, config, slots, self._progress)
            if warmed is not None:
                current.statistics = warmed
            if self._metrics.summary_latencies:
                current.statistics.summaries = LatencySummaries(self._metrics.summary_quantiles)
        current.statistics.record_warmup(message.warmup)
        current.ensemble = ensemble
        current.sequences = sequences_of(config, message.path, slots, current.sequences)
        current.decoupled = config.model_transaction_policy.decoupled
        current.labels = read_labels(config, Path(message.path)) if message.path else {}
        current.cache = scope_for(self._cache, message.model, message.version, config)
        self._table.reloading.get(message.model, {}).pop(message.version, None)
        if replaced:  # a restarted executor's instances: its streams will not go on
            self._streams.fail(current, Unavailable("the model's executor was restarted"),
                               {slot.executor for slot in replaced})
        self._table.ever_served.setdefault(message.model, set()).add(message.version)
        # Served anew: the ensembles using it warm up again before their next request.
        users = self._warm_ups.hold_users(message.model) if ensemble is None else []
        self._pump(current)
        await self._progress.wait_until(lambda: not any(slot.in_flight for slot in replaced))
        await self._warm_ups.rewarm(users)

    def known(self, message: ModelKnown) -> None:
        self._table.known.setdefault(message.model, set()).update(message.loading)
        if not message.loading:
            self._table.reloading.pop(message.model, None)  # its reload failed: not coming back

    def route_labels(self, message: RouteLabels) -> None:
        """A model's version labels moved: requests naming no version go their way from
        the next one on."""
        if message.stable or message.canary:
            self._table.labelled[message.model] = LabelRoute(
                message.stable, message.canary, message.canary_percent)
        else:
            self._table.labelled.pop(message.model, None)

    async def retire(self, message: RetireVersion) -> Retired | None:
        """Stop ``message``'s version taking requests; when ``message.wait``, wait for its
        work in flight and let it go (None), else answer at once whether it has any."""
        version = self._table.served.get(message.model, {}).get(message.version)
        reloading = self._table.reloading.setdefault(message.model, {})
        if message.reloading:
            reloading[message.version] = message.reloading
        else:
            reloading.pop(message.version, None)
        if version is None:
            return None if message.wait else Retired(False)
        version.retired = True
        if not message.wait:
            return Retired(version.busy())
        await self._progress.wait_until(lambda: not version.busy())
        versions = self._table.served[message.model]
        if versions.get(message.version) is version:
            del versions[message.version]
        self._streams.fail(version, Unavailable(f"model '{message.model}' was unloaded"))
        return None
