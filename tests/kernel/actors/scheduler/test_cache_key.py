"""The response cache's pure parts: ``--cache-config`` parsing, request keys, entries, and the
local cache's byte-bounded LRU (with a property test of its bound)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.cache_config import parse_cache_config
from inferd.kernel.actors.scheduler.cache_key import (
    IN_KEY_APART,
    NOT_IN_KEY,
    config_digest,
    decode_entry,
    encode_entry,
    request_key,
)
from inferd.kernel.sdk.caches import CacheConfigError
from inferd.plugins.caches.local import ByteBoundedLRU
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.plugins.caches.redis import RedisSettings
from inferd.protocols.messages import InferRequest, InferResponse
from inferd.protocols.tensors import from_numpy

# ------------------------------------------------------------------------ --cache-config

CACHES = Plugins.load().caches()  # the installed plugins' caches: local and redis


def test_local_and_redis_configs() -> None:
    local = parse_cache_config(["local,size=1048576"], CACHES)
    assert local is not None and (local.name, local.settings.size) == ("local", 1048576)
    redis = parse_cache_config(["redis,host=cache", "redis,port=6380", "redis,db=2",
                                "redis,password=p=w", "redis,tls_enabled=true",
                                "redis,wait_timeout=0"], CACHES, environ={})
    assert redis is not None and redis.settings == RedisSettings(
        host="cache", port=6380, db=2, password="p=w", tls_enabled=True, wait_timeout=0)
    assert parse_cache_config([], CACHES) is None
    deprecated = parse_cache_config([], CACHES, byte_size=2048)
    assert deprecated is not None and deprecated.settings.size == 2048


def test_redis_credentials_come_from_the_environment_unless_given() -> None:
    environ = {"TRITONCACHE_REDIS_USERNAME": "env-user", "TRITONCACHE_REDIS_PASSWORD": "env-pw"}
    config = parse_cache_config(["redis,host=h", "redis,port=1"], CACHES, environ=environ)
    assert config is not None and config.settings is not None
    assert (config.settings.user, config.settings.password) == ("env-user", "env-pw")
    config = parse_cache_config(["redis,host=h", "redis,port=1", "redis,user=flag"], CACHES,
                                environ=environ)
    assert config is not None and config.settings is not None and config.settings.user == "flag"
    assert "env-pw" not in config.settings.described()


@pytest.mark.parametrize(("flags", "message"), [
    (["size=10"], "No cache specified. --cache-config option format is"),
    (["local,size"], "--cache-config option format is '<cache name>,<setting>=<value>'. "
                     "Got local,size"),
    (["local,size="], "option format is"),
    (["disk,size=10"], "unknown cache 'disk'"),
    (["local,bytes=10"], "the local cache has no setting 'bytes' (its settings: size)"),
    (["local,size=0"], "expected a whole number of at least 1, got '0'"),
    (["local,size=-5"], "got '-5'"),
    (["local,size=1e6"], "got '1e6'"),
    (["redis,host=h", "redis,port=70000"], "expected a port from 1 to 65535"),
    (["redis,host=h", "redis,port=1", "redis,tls_enabled=maybe"], "expected true or false"),
    (["redis,port=1"], "Failed to initialize RedisCache, didn't specify address"),
    (["local,size=10", "redis,host=h"], "only a single cache is currently supported"),
])
def test_bad_cache_configs_say_why(flags: list[str], message: str) -> None:
    with pytest.raises(CacheConfigError) as raised:
        parse_cache_config(flags, CACHES, environ={})
    assert message in str(raised.value)


def test_the_deprecated_size_flag_excludes_cache_config() -> None:
    with pytest.raises(CacheConfigError, match="Incompatible flags --response-cache-byte-size"):
        parse_cache_config(["local,size=10"], CACHES, byte_size=10)


# ------------------------------------------------------------------------ keys


def request(**changes: object) -> InferRequest:
    base = InferRequest(
        model="m",
        inputs=(from_numpy("A", np.arange(4, dtype=np.int32)),
                from_numpy("B", np.array([b"x", b"yz"], dtype=object))),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


DIGEST = b"d" * 16


def key(req: InferRequest, model: str = "m", version: int = 1, digest: bytes = DIGEST) -> str:
    return request_key(model, version, digest, req)


def test_the_key_is_stable_and_ignores_what_changes_no_answer() -> None:
    same = key(request())
    assert same == key(request()) and same.startswith("inferd-cache-1:")
    assert key(request(id="other", priority=3, timeout_us=10)) == same
    swapped = request()
    assert key(dataclasses.replace(swapped, inputs=swapped.inputs[::-1])) == same


def test_the_key_holds_everything_an_answer_depends_on() -> None:
    base = key(request())
    a = np.arange(4, dtype=np.int32)
    b = from_numpy("B", np.array([b"x", b"yz"], dtype=object))
    variants = [
        key(request(), model="n"),
        key(request(), version=2),
        key(request(), digest=b"e" * 16),
        key(request(inputs=(from_numpy("A2", a), b))),  # an input's name
        key(request(inputs=(from_numpy("A", a.astype(np.uint32)), b))),  # its datatype
        key(request(inputs=(from_numpy("A", a.reshape(2, 2)), b))),  # its shape
        key(request(inputs=(from_numpy("A", a + 1), b))),  # its bytes
        key(request(inputs=(from_numpy("A", a), from_numpy("B", np.array([b"xy", b"z"],
                                                                         dtype=object))))),
        key(request(outputs=("O",))),
        key(request(outputs=("O", "P"))),
        key(request(outputs=("P", "O"))),
        key(request(parameters={"k": 1})),
        key(request(parameters={"k": True})),
        key(request(parameters={"k": "1"})),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_every_request_field_is_in_the_key_or_named_as_not() -> None:
    names = {item.name for item in dataclasses.fields(InferRequest)}
    assert IN_KEY_APART | NOT_IN_KEY <= names  # a renamed field must not slip out unnoticed


def test_the_config_digest_ignores_how_a_model_is_served() -> None:
    def digest(text: str) -> bytes:
        return config_digest(text_format.Parse('name: "m" max_batch_size: 8 ' + text,
                                               ModelConfig()))

    plain = digest("")
    assert digest("instance_group [{ count: 3 }] dynamic_batching {} "
                  "response_cache { enable: true }") == plain
    assert digest('parameters { key: "k" value { string_value: "v" } }') != plain


def test_entries_round_trip() -> None:
    response = InferResponse(
        model="m", version="1",
        outputs=(from_numpy("F", np.array([[1.5, -2.0]], dtype=np.float16)),
                 from_numpy("S", np.array([b"", b"abc"], dtype=object)),
                 from_numpy("E", np.zeros((0, 3), dtype=np.int64))),
        parameters={"p": 1})
    back = decode_entry(encode_entry(response), "m", "1", "req-9")
    assert back == dataclasses.replace(response, id="req-9")
    with pytest.raises(ValueError, match="not a response cache entry"):
        decode_entry(b"\x93garbage", "m", "1", "")


# ------------------------------------------------------------------------ the LRU


def test_the_lru_evicts_least_recently_used_first() -> None:
    lru = ByteBoundedLRU(30)
    for name in "abc":
        assert lru.put(name, b"x" * 9)  # 10 bytes each with the key
    assert lru.get("a") == b"x" * 9  # a is now the most recent
    assert lru.put("d", b"y" * 9)
    assert lru.keys() == ["c", "a", "d"] and lru.evictions == 1
    assert not lru.put("a", b"other")  # already there: the first entry stays
    assert lru.get("a") == b"x" * 9
    assert not lru.put("big", b"z" * 40)  # larger than the cache: not inserted, nothing evicted
    assert len(lru) == 3 and lru.used == 30
    with pytest.raises(ValueError):
        ByteBoundedLRU(0)


operations = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 12), st.integers(0, 60)),
    st.tuples(st.just("get"), st.integers(0, 12), st.just(0)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 120), steps=operations)
def test_the_lru_never_holds_more_than_its_bound(capacity: int,
                                                 steps: list[tuple[str, int, int]]) -> None:
    lru = ByteBoundedLRU(capacity)
    model: dict[str, bytes] = {}  # a reference: insertion/recency order of a plain dict
    for operation, number, size in steps:
        name = f"k{number}"
        if operation == "get":
            found = lru.get(name)
            assert found == model.get(name)
            if found is not None:
                model[name] = model.pop(name)
            continue
        value = bytes(size)
        inserted = lru.put(name, value)
        cost = ByteBoundedLRU.cost(name, value)
        if name in model:
            assert not inserted
            model[name] = model.pop(name)
        elif cost > capacity:
            assert not inserted
        else:
            assert inserted
            model[name] = value
            while sum(ByteBoundedLRU.cost(k, v) for k, v in model.items()) > capacity:
                del model[next(iter(model))]
        assert lru.used <= capacity
        assert lru.used == sum(ByteBoundedLRU.cost(k, v) for k, v in model.items())
        assert lru.keys() == list(model)
