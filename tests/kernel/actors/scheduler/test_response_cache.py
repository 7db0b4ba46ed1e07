"""The response cache's scope (hits, misses and a cache that fails), the redis cache against a
real ``redis-server``, the statistics a hit and a miss add, Triton's load refusals and the
cache metrics' rendering."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.cache_key import request_key
from inferd.kernel.actors.scheduler.response_cache import (
    HASH_IN_THREAD_BYTES,
    CacheScope,
    scope_for,
)
from inferd.kernel.modelconfig.validation import validate
from inferd.kernel.observability.statistics import VersionStatistics
from inferd.kernel.sdk.caches import CacheCounters, CacheUnavailable, Sample
from inferd.plugins.caches.local import LocalCache
from inferd.plugins.caches.redis import RedisSettings
from inferd.plugins.caches.redis_client import RedisCache
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse
from inferd.protocols.prometheus import render
from inferd.protocols.tensors import from_numpy

pytestmark = pytest.mark.anyio


def config(text: str) -> ModelConfig:
    return text_format.Parse(
        'name: "m" backend: "inferd_testing" max_batch_size: 0 '
        'input [{ name: "A" data_type: TYPE_INT32 dims: [ 4 ] }] '
        'output [{ name: "A" data_type: TYPE_INT32 dims: [ 4 ] }] ' + text, ModelConfig())


REQUEST = InferRequest("m", (from_numpy("A", np.arange(4, dtype=np.int32)),), id="r1")
ANSWER = InferResponse("m", "1", (from_numpy("A", np.arange(4, dtype=np.int32) * 2),))


class BrokenCache:
    """A cache whose every call fails, as a Redis that went away does."""

    name = "broken"

    def __init__(self) -> None:
        self.counters = CacheCounters()

    def describe(self) -> str:
        return "broken"

    async def lookup(self, key: str) -> bytes | None:
        raise CacheUnavailable("connection refused")

    async def insert(self, key: str, entry: bytes) -> bool:
        raise CacheUnavailable("connection refused")

    def metrics(self) -> list[Sample]:
        return []

    async def close(self) -> None:
        pass


def scope(cache: Any) -> CacheScope:
    found = scope_for(cache, "m", 1, config("response_cache { enable: true }"))
    assert found is not None
    return found


async def test_a_miss_then_a_hit_with_triton_s_statistics() -> None:
    cache = LocalCache(1 << 20)
    statistics = VersionStatistics()
    cached = scope(cache)
    arrived = time.perf_counter_ns()
    miss = await cached.lookup(REQUEST)
    assert miss.response is None and miss.key is not None
    statistics.record_request(True, 1_000, 10)  # the request ran
    await cached.store(miss, ANSWER, statistics)
    hit = await cached.lookup(REQUEST)
    assert hit.response == InferResponse("m", "1", ANSWER.outputs, id="r1")
    cached.record_hit(statistics, hit, arrived)
    printed = statistics.as_dict("m", "1")
    inference = printed["inference_stats"]
    assert inference["cache_miss"]["count"] == 1 and inference["cache_hit"]["count"] == 1
    assert inference["success"]["count"] == 2
    assert inference["success"]["ns"] > 1_000  # the insertion's time is the request's too
    assert printed["execution_count"] == 0 and printed["inference_count"] == 0
    assert (cache.counters.lookups, cache.counters.hits, cache.counters.misses) == (2, 1, 1)


async def test_a_failed_answer_is_not_stored_nor_counted() -> None:
    cache = LocalCache(1 << 20)
    statistics = VersionStatistics()
    cached = scope(cache)
    lookup = await cached.lookup(REQUEST)
    await cached.store(lookup, InvalidArgument("bad"), statistics)
    assert len(cache.entries) == 0 and statistics.cache_miss.count == 0


async def test_a_failing_cache_never_fails_a_request(caplog: pytest.LogCaptureFixture) -> None:
    statistics = VersionStatistics()
    cached = scope(BrokenCache())
    lookup = await cached.lookup(REQUEST)  # no exception: a miss
    assert lookup.response is None
    await cached.store(lookup, ANSWER, statistics)
    assert statistics.cache_miss.count == 1
    assert "lookup for model 'm' failed, served as a miss: connection refused" in caplog.text


def test_no_scope_without_the_config_or_without_a_cache(
        caplog: pytest.LogCaptureFixture) -> None:
    assert scope_for(LocalCache(100), "m", 1, config("")) is None
    assert scope_for(None, "m", 7, config("response_cache { enable: true }")) is None
    assert "model 'm' version 7 enables response_cache, but the server has no" in caplog.text


@pytest.mark.parametrize(("text", "message"), [
    ('sequence_batching { } response_cache { enable: true }',
     "Response Cache does not currently support model m with sequence batching scheduler. "
     "Please disable the response cache."),
    ("model_transaction_policy { decoupled: true } response_cache { enable: true }",
     "Response Cache does not currently support model m with 'decoupled' transaction policy. "
     "Please disable the response cache."),
])
def test_sequence_and_decoupled_models_cannot_enable_the_cache(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        validate(config(text), folder_name="m", complete=True)
    assert raised.value.message == message
    validate(config(text.replace("enable: true", "enable: false")), folder_name="m",
             complete=True)


def test_cache_metrics_are_printed_only_when_there_are_some() -> None:
    assert "nv_cache" not in render([("nv_inference_count", {"model": "m", "version": "1"}, 1)])
    text = render([("nv_cache_num_entries", {}, 3), ("nv_cache_util", {}, 0.5)])
    lines = text.splitlines()
    assert "nv_cache_num_entries 3.0" in lines and "nv_cache_util 0.5" in lines
    assert "# TYPE nv_cache_num_entries gauge" in lines
    assert "nv_cache_num_hits_per_model" not in text


# ------------------------------------------------------------------------ redis


async def test_the_redis_cache_stores_and_fails_cleanly(redis_servers: Any) -> None:
    server = redis_servers.start()
    settings = RedisSettings(host="127.0.0.1", port=server.port, socket_timeout=500,
                             connect_timeout=500)
    cache = await RedisCache.connect(settings)
    try:
        assert await cache.lookup("inferd-test:k") is None
        assert await cache.insert("inferd-test:k", b"\x00entry")
        assert not await cache.insert("inferd-test:k", b"other")  # the first stays
        assert await cache.lookup("inferd-test:k") == b"\x00entry"
        server.stop()
        started = time.monotonic()
        with pytest.raises(CacheUnavailable, match="Failed to retrieve key: inferd-test:k"):
            await cache.lookup("inferd-test:k")
        with pytest.raises(CacheUnavailable, match="Failed to insert key"):
            await cache.insert("inferd-test:k", b"x")
        assert time.monotonic() - started < 10
    finally:
        await cache.close()
    with pytest.raises(CacheUnavailable, match="Failed to initialize RedisCache: cannot reach"):
        await RedisCache.connect(settings)


async def test_naming_every_output_is_the_same_request_as_naming_none() -> None:
    cache = LocalCache(1 << 20)
    cached = scope(cache)
    lookup = await cached.lookup(REQUEST)
    await cached.store(lookup, ANSWER, VersionStatistics())
    named = dataclasses.replace(REQUEST, outputs=("A",))
    assert (await cached.lookup(named)).response is not None


async def test_large_inputs_are_hashed_off_the_event_loop_to_the_same_key() -> None:
    big = InferRequest("m", (from_numpy("A", np.zeros(HASH_IN_THREAD_BYTES, dtype=np.uint8)),))
    lookup = await scope(LocalCache(100)).lookup(big)
    assert lookup.key == request_key("m", 1, scope(LocalCache(100)).digest,
                                     dataclasses.replace(big, outputs=("A",)))
