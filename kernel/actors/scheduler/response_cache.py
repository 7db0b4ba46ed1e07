"""The response cache: one small interface, and the per-version step the scheduler takes.

``ResponseCache`` (its contract is in ``inferd.kernel.actors.scheduler.cache_config``) is what a
cache plugin gives (the built-in ``inferd.plugins.caches.local`` and
``inferd.plugins.caches.redis``, registered by name through ``inferd_register_caches``): look a key
up, insert an entry, its server-level metrics. ``open_cache`` makes the one the server's
``--cache-config`` names, found in the plugins' registry (a cache that cannot open, such as a Redis
that does not answer, fails the start, as Triton's redis cache does). ``scope_for`` gives a served
version its ``CacheScope`` when its config has ``response_cache { enable: true }`` and the server
has a cache (as in Triton, a model that enables it on a server without one is served uncached; a
warning says so), and ``CacheScope`` does what Triton does around a request: build its key,
look it up, answer a hit (counted as a success and a ``cache_hit``, with no execution and no
inference counted), or let it run and store a successful answer (a ``cache_miss`` whose time
is the lookup's and the insertion's, added to the request's). A cache that fails (Redis down,
a broken entry) never fails a request: the lookup is a miss, the failure is logged (at most
once every ``ERROR_LOG_INTERVAL_SECS``). Decoupled and sequence models are refused at load
(``inferd.kernel.modelconfig.validation``), as in Triton.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.cache_config import CacheConfig
from inferd.kernel.actors.scheduler.cache_key import (
    config_digest,
    decode_entry,
    encode_entry,
    request_key,
)
from inferd.kernel.observability.statistics import VersionStatistics
from inferd.kernel.sdk.caches import (
    CacheRegistry,
    CacheUnavailable,
    ResponseCache,
    Sample,
)
from inferd.protocols.messages import InferRequest, InferResponse

log = logging.getLogger(__name__)

ERROR_LOG_INTERVAL_SECS = 10.0
# Inputs (outputs) from this size up are hashed (encoded) in a worker thread rather than in
# the event loop.
HASH_IN_THREAD_BYTES = 1 << 20


async def open_cache(config: CacheConfig | None, caches: CacheRegistry
                     ) -> ResponseCache | None:
    """The cache ``config`` describes, one of the server's ``caches``, ready to use;
    ``CacheUnavailable`` if it cannot be."""
    if config is None:
        return None
    try:
        spec = caches.require(config.name)
    except LookupError as error:
        raise CacheUnavailable(f"--cache-config: {error}") from None
    return await spec.open(config.settings)


class _Throttle:
    """Logs an error at most once per interval, saying how many were left out."""

    def __init__(self) -> None:
        self._next = 0.0
        self._left_out = 0

    def error(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._left_out += 1
            return
        suffix = f" ({self._left_out} more since the last report)" if self._left_out else ""
        log.error(message + suffix, *args)
        self._next, self._left_out = now + ERROR_LOG_INTERVAL_SECS, 0


_errors = _Throttle()


@dataclass(slots=True)
class CacheLookup:
    """One request's lookup: its key (None: not cacheable), when it started, how long it
    took, and the cached answer on a hit."""

    key: str | None
    started_ns: int
    lookup_ns: int = 0
    response: InferResponse | None = None


@dataclass(eq=False, slots=True)
class CacheScope:
    """The response cache as one served version uses it."""

    cache: ResponseCache
    model: str
    version: int
    digest: bytes
    outputs: tuple[str, ...]  # the config's, in its order: what a request naming none gets
    version_text: str = field(init=False)

    def __post_init__(self) -> None:
        self.version_text = str(self.version)

    async def lookup(self, request: InferRequest) -> CacheLookup:
        started_ns = time.perf_counter_ns()
        if not request.outputs:  # the same answer as naming every output: the same key
            request = dataclasses.replace(request, outputs=self.outputs)
        try:
            if sum(tensor.data.nbytes for tensor in request.inputs) < HASH_IN_THREAD_BYTES:
                key = request_key(self.model, self.version, self.digest, request)
            else:  # hashlib lets go of the GIL: the event loop serves others meanwhile
                key = await anyio.to_thread.run_sync(
                    request_key, self.model, self.version, self.digest, request)
        except Exception as error:  # noqa: BLE001 - an odd request is served uncached
            log.warning("model '%s': request not cacheable: %s", self.model, error)
            return CacheLookup(None, started_ns)
        counters = self.cache.counters
        response = None
        try:
            entry = await self.cache.lookup(key)
            if entry is not None:
                response = decode_entry(entry, self.model, self.version_text, request.id)
        except Exception as error:  # noqa: BLE001 - a cache never fails a request
            _errors.error("response cache (%s): lookup for model '%s' failed, served as a "
                          "miss: %s", self.cache.name, self.model, error)
        lookup_ns = time.perf_counter_ns() - started_ns
        counters.lookups += 1
        counters.lookup_ns += lookup_ns
        if response is not None:
            counters.hits += 1
        return CacheLookup(key, started_ns, lookup_ns, response)

    def record_hit(self, statistics: VersionStatistics, lookup: CacheLookup,
                   arrived_ns: int) -> None:
        statistics.record_cache_hit(time.perf_counter_ns() - arrived_ns,
                                    lookup.started_ns - arrived_ns, lookup.lookup_ns)

    async def store(self, lookup: CacheLookup, response: InferResponse | object,
                    statistics: VersionStatistics) -> None:
        """After a miss: store a successful ``response`` and count the miss."""
        if lookup.key is None or not isinstance(response, InferResponse):
            return
        started_ns = time.perf_counter_ns()
        try:
            if sum(tensor.data.nbytes for tensor in response.outputs) < HASH_IN_THREAD_BYTES:
                entry = encode_entry(response)
            else:
                entry = await anyio.to_thread.run_sync(encode_entry, response)
            await self.cache.insert(lookup.key, entry)
        except Exception as error:  # noqa: BLE001 - a cache never fails a request
            _errors.error("response cache (%s): insertion for model '%s' failed: %s",
                          self.cache.name, self.model, error)
        insertion_ns = time.perf_counter_ns() - started_ns
        counters = self.cache.counters
        counters.misses += 1
        counters.insertion_ns += insertion_ns
        statistics.record_cache_miss(lookup.lookup_ns, insertion_ns)


def cache_samples(labels: dict[str, str], statistics: VersionStatistics) -> list[Sample]:
    """Triton's per-model cache metrics of a version whose responses are cached."""
    return [
        ("nv_cache_num_hits_per_model", labels, statistics.cache_hit.count),
        ("nv_cache_num_misses_per_model", labels, statistics.cache_miss.count),
        ("nv_cache_hit_duration_per_model", labels, statistics.cache_hit.ns // 1000),
        ("nv_cache_miss_duration_per_model", labels, statistics.cache_miss.ns // 1000),
    ]


_warned: set[tuple[str, int]] = set()


def scope_for(cache: ResponseCache | None, model: str, version: int,
              config: ModelConfig) -> CacheScope | None:
    """The cache scope of a served version, or None when its responses are not cached."""
    if not config.response_cache.enable:
        return None
    if cache is None:
        if (model, version) not in _warned:
            _warned.add((model, version))
            log.warning("model '%s' version %d enables response_cache, but the server has no "
                        "response cache (--cache-config): its responses are not cached",
                        model, version)
        return None
    return CacheScope(cache, model, version, config_digest(config),
                      tuple(output.name for output in config.output))
