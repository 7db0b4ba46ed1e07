"""The response cache end to end through tritonclient HTTP and gRPC (issue 12, point 2):
``response_cache { enable: true }`` with ``--cache-config=local,size=...`` on one server for the
module, and Redis (a real ``redis-server`` on loopback) shared by two servers, as inferd's
replicas share it. Statistics (``cache_hit``/``cache_miss``, execution counts) and the
``nv_cache_*`` metrics are read back from the servers. The local-cache tests share one server
and count on from each other, so they run in file order.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.e2e.inferd_harness import wait_started

CACHE_BYTES = 4096
CACHED = "response_cache { enable: true }\n"
WAIT_SECS = 30.0


def ensemble_config(name: str, model: str) -> str:
    tensors = ", ".join(f'{{ name: "{n}" data_type: TYPE_INT32 dims: [ 16 ] }}'
                        for n in ("IN0", "IN1"))
    outputs = ", ".join(f'{{ name: "{n}" data_type: TYPE_INT32 dims: [ 16 ] }}'
                        for n in ("SUM", "DIFF"))
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            f"input [ {tensors} ]\noutput [ {outputs} ]\n"
            f'ensemble_scheduling {{ step [ {{ model_name: "{model}" model_version: -1 '
            'input_map [ { key: "INPUT0" value: "IN0" }, { key: "INPUT1" value: "IN1" } ] '
            'output_map [ { key: "OUTPUT0" value: "SUM" }, { key: "OUTPUT1" value: "DIFF" } ] '
            "} ] }\n" + CACHED)


def cached_repository(harness: Any) -> Path:
    """``simple`` (not cached), ``cached`` (simple with the cache), ``cached_identity`` (an
    identity with the cache, for entries larger than the cache), ``cached_ensemble`` (an
    ensemble over ``simple`` with the cache) and ``plain_ensemble`` (an ensemble without the
    cache over ``cached``)."""
    root = harness.repository("simple", "identity_fp32")
    for source, name in (("simple", "cached"), ("identity_fp32", "cached_identity")):
        folder = root / name
        shutil.copytree(root / source, folder)
        config = (root / source / "config.pbtxt").read_text(encoding="utf-8")
        (folder / "config.pbtxt").write_text(
            config.replace(f'name: "{source}"', f'name: "{name}"') + CACHED, encoding="utf-8")
    (root / "cached_ensemble" / "1").mkdir(parents=True)
    (root / "cached_ensemble" / "config.pbtxt").write_text(
        ensemble_config("cached_ensemble", "simple"), encoding="utf-8")
    (root / "plain_ensemble" / "1").mkdir(parents=True)
    (root / "plain_ensemble" / "config.pbtxt").write_text(
        ensemble_config("plain_ensemble", "cached").replace(CACHED, ""), encoding="utf-8")
    return root


def pair(seed: int, batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(-1000, 1000, (batch, 16), dtype=np.int32),
            rng.integers(-1000, 1000, (batch, 16), dtype=np.int32))


def http_infer(server: Any, model: str, seed: int, *, binary: bool = True,
               outputs: tuple[str, ...] = (), names: tuple[str, str] = ("INPUT0", "INPUT1"),
               ) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url)
    a, b = pair(seed)
    inputs = []
    for name, data in zip(names, (a, b), strict=True):
        tensor = httpclient.InferInput(name, list(data.shape), "INT32")
        tensor.set_data_from_numpy(data, binary_data=binary)
        inputs.append(tensor)
    requested = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs]
    result = client.infer(model, inputs, outputs=requested or None)
    produced = [o["name"] for o in result.get_response()["outputs"]]
    return {name: result.as_numpy(name) for name in produced}


def grpc_infer(server: Any, model: str, seed: int) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    a, b = pair(seed)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = grpcclient.InferInput(name, list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def stats(server: Any, model: str) -> dict[str, Any]:
    """The model's statistics over HTTP, checked against the gRPC answer."""
    over_http = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        model)["model_stats"][0]
    over_grpc = grpcclient.InferenceServerClient(server.grpc_url).get_inference_statistics(
        model, as_json=True)["model_stats"][0]
    for field in ("cache_hit", "cache_miss", "success"):
        assert int(over_grpc["inference_stats"][field].get("count", 0)) == \
            over_http["inference_stats"][field]["count"], field
    assert int(over_grpc.get("execution_count", 0)) == over_http["execution_count"]
    return over_http


def counts(server: Any, model: str) -> tuple[int, int, int, int]:
    """(cache hits, cache misses, successes, executions) of ``model``."""
    found = stats(server, model)
    inference = found["inference_stats"]
    return (inference["cache_hit"]["count"], inference["cache_miss"]["count"],
            inference["success"]["count"], found["execution_count"])


def scrape(server: Any) -> str:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text


def metric(text: str, name: str, model: str | None = None) -> float | None:
    labels = rf'\{{model="{model}",version="1"\}}' if model else ""
    found = re.search(rf"^{name}{labels} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def expected(seed: int) -> dict[str, np.ndarray]:
    a, b = pair(seed)
    return {"OUTPUT0": a + b, "OUTPUT1": a - b}


# ------------------------------------------------------------------------ the local cache


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> Any:
    return module_inferd.start(cached_repository(module_inferd),
                               f"--cache-config=local,size={CACHE_BYTES}", "--allow-client-shm")


def test_a_repeated_request_is_answered_from_the_cache(server: Any) -> None:
    first = http_infer(server, "cached", 1)
    assert counts(server, "cached") == (0, 1, 1, 1)
    for answer in (http_infer(server, "cached", 1), grpc_infer(server, "cached", 1)):
        for name, value in expected(1).items():
            np.testing.assert_array_equal(answer[name], value)
            np.testing.assert_array_equal(answer[name], first[name])
    hits, misses, successes, executions = counts(server, "cached")
    assert (hits, misses, successes, executions) == (2, 1, 3, 1)  # no execution for a hit
    found = stats(server, "cached")
    assert found["inference_count"] == 1  # as Triton: a hit is no inference
    assert found["inference_stats"]["cache_hit"]["ns"] > 0
    assert found["inference_stats"]["cache_miss"]["ns"] > 0


def test_different_inputs_miss(server: Any) -> None:
    before = counts(server, "cached")
    answer = grpc_infer(server, "cached", 2)
    np.testing.assert_array_equal(answer["OUTPUT0"], expected(2)["OUTPUT0"])
    hits, misses, _, executions = counts(server, "cached")
    assert (hits, misses, executions) == (before[0], before[1] + 1, before[3] + 1)


def test_the_output_encoding_is_the_frontends_and_requested_outputs_are_the_keys(
        server: Any) -> None:
    http_infer(server, "cached", 3, binary=False)  # JSON outputs
    before = counts(server, "cached")
    binary = http_infer(server, "cached", 3, binary=True)  # the same request, binary outputs
    np.testing.assert_array_equal(binary["OUTPUT1"], expected(3)["OUTPUT1"])
    assert counts(server, "cached")[0] == before[0] + 1
    only = http_infer(server, "cached", 3, outputs=("OUTPUT1",))  # another answer: a miss
    assert list(only) == ["OUTPUT1"]
    np.testing.assert_array_equal(only["OUTPUT1"], expected(3)["OUTPUT1"])
    hits, misses, _, _ = counts(server, "cached")
    assert (hits, misses) == (before[0] + 1, before[1] + 1)
    again = http_infer(server, "cached", 3, outputs=("OUTPUT1",))
    assert list(again) == ["OUTPUT1"]
    assert counts(server, "cached")[0] == before[0] + 2


def test_a_model_without_response_cache_is_never_cached(server: Any) -> None:
    for _ in range(3):
        answer = http_infer(server, "simple", 4)
        np.testing.assert_array_equal(answer["OUTPUT0"], expected(4)["OUTPUT0"])
    hits, misses, _, executions = counts(server, "simple")
    assert (hits, misses) == (0, 0)
    assert executions >= 3


def test_the_ensemble_is_cached_at_the_top_level(server: Any) -> None:
    names = ("IN0", "IN1")
    first = http_infer(server, "cached_ensemble", 5, names=names)
    np.testing.assert_array_equal(first["SUM"], expected(5)["OUTPUT0"])
    steps_before = counts(server, "simple")[3]
    second = http_infer(server, "cached_ensemble", 5, names=names)
    np.testing.assert_array_equal(second["DIFF"], expected(5)["OUTPUT1"])
    hits, misses, successes, _ = counts(server, "cached_ensemble")
    assert (hits, misses, successes) == (1, 1, 2)
    assert counts(server, "simple")[3] == steps_before  # the hit ran no step


def test_a_composing_model_keeps_its_own_cache(server: Any) -> None:
    http_infer(server, "cached", 6)  # stored by the model itself
    before = counts(server, "cached")
    answer = http_infer(server, "plain_ensemble", 6, names=("IN0", "IN1"))
    np.testing.assert_array_equal(answer["SUM"], expected(6)["OUTPUT0"])
    assert counts(server, "cached")[0] == before[0] + 1  # the step was a hit
    assert counts(server, "cached")[3] == before[3]
    hits, misses, successes, _ = counts(server, "plain_ensemble")
    assert (hits, misses, successes) == (0, 0, 1)


def test_shared_memory_inputs_and_outputs_are_cached_as_triton_caches_them(
        server: Any) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    a, b = pair(12)
    names = [f"/inferd-cache-test-{server.ports['http']}-{n}" for n in ("in", "out")]
    regions = [shm.create_shared_memory_region(f"cache_{n}", key, 128)
               for n, key in zip(("in", "out"), names, strict=True)]
    try:
        shm.set_shared_memory_region(regions[0], [a, b])
        client.register_system_shared_memory("cache_in", names[0], 128)
        client.register_system_shared_memory("cache_out", names[1], 128)
        inputs = []
        for offset, name in ((0, "INPUT0"), (64, "INPUT1")):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_shared_memory("cache_in", 64, offset)
            inputs.append(tensor)
        outputs = []
        for offset, name in ((0, "OUTPUT0"), (64, "OUTPUT1")):
            output = httpclient.InferRequestedOutput(name)
            output.set_shared_memory("cache_out", 64, offset)
            outputs.append(output)
        before = counts(server, "cached")
        for _ in range(2):
            shm.set_shared_memory_region(regions[1], [np.zeros(32, dtype=np.int32)])
            client.infer("cached", inputs, outputs=outputs)
            total = shm.get_contents_as_numpy(regions[1], np.int32, [1, 16])
            difference = shm.get_contents_as_numpy(regions[1], np.int32, [1, 16], offset=64)
            np.testing.assert_array_equal(total, a + b)
            np.testing.assert_array_equal(difference, a - b)
        hits, misses, _, _ = counts(server, "cached")
        assert (hits, misses) == (before[0] + 1, before[1] + 1)
    finally:
        client.unregister_system_shared_memory()
        for region in regions:
            shm.destroy_shared_memory_region(region)


def test_the_size_bound_evicts_and_an_entry_larger_than_the_cache_is_not_kept(
        server: Any) -> None:
    http_infer(server, "cached", 100)
    for seed in range(101, 131):  # far more entries than 4096 bytes hold
        http_infer(server, "cached", seed)
    before = counts(server, "cached")
    http_infer(server, "cached", 100)  # the oldest: evicted, so a miss
    assert counts(server, "cached")[1] == before[1] + 1
    text = scrape(server)
    assert (metric(text, "nv_cache_num_evictions") or 0) > 0
    utilization = metric(text, "nv_cache_util")
    assert utilization is not None and 0 < utilization <= 1
    large = np.arange(2048, dtype=np.float32)  # 8 KiB of output: more than the whole cache
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [2048], "FP32")
    tensor.set_data_from_numpy(large)
    for _ in range(2):
        result = client.infer("cached_identity", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), large)
    hits, misses, _, executions = counts(server, "cached_identity")
    assert (hits, misses, executions) == (0, 2, 2)


def test_metrics_show_the_cache(server: Any) -> None:
    http_infer(server, "cached", 77)
    http_infer(server, "cached", 77)  # at least one hit and one miss, whatever ran before
    hits, misses, _, _ = counts(server, "cached")
    durations = stats(server, "cached")["inference_stats"]
    text = scrape(server)
    assert "# TYPE nv_cache_num_hits_per_model counter" in text
    assert metric(text, "nv_cache_num_hits_per_model", "cached") == hits
    assert metric(text, "nv_cache_num_misses_per_model", "cached") == misses
    # The durations are the statistics extension's, in microseconds (and never absent).
    assert metric(text, "nv_cache_hit_duration_per_model", "cached") == \
        durations["cache_hit"]["ns"] // 1000 > 0
    assert metric(text, "nv_cache_miss_duration_per_model", "cached") == \
        durations["cache_miss"]["ns"] // 1000 > 0
    assert metric(text, "nv_cache_num_hits_per_model", "simple") is None  # not cached
    assert metric(text, "nv_cache_num_hits_per_model", "cached_ensemble") == 1
    entries = metric(text, "nv_cache_num_entries")
    assert entries is not None and entries >= 1
    total_hits = metric(text, "nv_cache_num_hits")
    assert total_hits is not None and total_hits >= hits + 1  # the ensemble's hit too
    lookups = metric(text, "nv_cache_num_lookups")
    total_misses = metric(text, "nv_cache_num_misses")
    assert lookups is not None and total_misses is not None
    assert lookups >= total_hits + total_misses


# ------------------------------------------------------------------------ without a cache


def test_a_model_enabling_the_cache_on_a_server_without_one_is_served_uncached(
        inferd: Any) -> None:
    server = inferd.start(cached_repository(inferd))
    for _ in range(2):
        http_infer(server, "cached", 1)
    assert counts(server, "cached") == (0, 0, 2, 2)
    assert ("model 'cached' version 1 enables response_cache, but the server has no response "
            "cache") in server.log()
    assert "nv_cache_" not in scrape(server)


@pytest.mark.parametrize(("flags", "message"), [
    (("--cache-config=memcached,size=10",), "unknown cache 'memcached'"),
    (("--cache-config=local,size=lots",), "--cache-config=local,size=lots: expected a whole"),
    (("--cache-config=local,colour=blue",), "the local cache has no setting 'colour'"),
    (("--cache-config=redis,host=127.0.0.1",), "Must at a minimum specify 'host' and 'port'"),
])
def test_a_bad_cache_config_stops_the_start(inferd: Any, flags: tuple[str, ...],
                                            message: str) -> None:
    server = inferd.launch(inferd.repository("simple"), *flags)
    server.clean_exit = False
    assert server.wait_exit(WAIT_SECS) == 1
    assert message in server.log()


# ------------------------------------------------------------------------ redis


def redis_flags(port: int) -> tuple[str, ...]:
    return ("--cache-config=redis,host=127.0.0.1", f"--cache-config=redis,port={port}",
            "--cache-config=redis,socket_timeout=500")


@pytest.fixture(scope="module")
def shared_redis(redis_servers: Any) -> Any:
    return redis_servers.start()


@pytest.fixture(scope="module")
def replicas(module_inferd: Any, shared_redis: Any) -> tuple[Any, Any]:
    flags = redis_flags(shared_redis.port)
    return (module_inferd.start(cached_repository(module_inferd), *flags),
            module_inferd.start(cached_repository(module_inferd), *flags))


def test_servers_sharing_redis_share_answers(replicas: tuple[Any, Any]) -> None:
    first, second = replicas
    answer = http_infer(first, "cached", 7)
    assert counts(first, "cached") == (0, 1, 1, 1)
    shared = grpc_infer(second, "cached", 7)  # never computed on the second server
    np.testing.assert_array_equal(shared["OUTPUT0"], answer["OUTPUT0"])
    np.testing.assert_array_equal(shared["OUTPUT1"], expected(7)["OUTPUT1"])
    assert counts(second, "cached") == (1, 0, 1, 0)
    ensemble = http_infer(second, "cached_ensemble", 8, names=("IN0", "IN1"))
    again = http_infer(first, "cached_ensemble", 8, names=("IN0", "IN1"))
    np.testing.assert_array_equal(again["SUM"], ensemble["SUM"])
    assert counts(first, "cached_ensemble")[:2] == (1, 0)
    assert metric(scrape(second), "nv_cache_num_misses_per_model", "cached_ensemble") == 1


def test_a_redis_that_goes_away_turns_lookups_into_misses_until_it_is_back(
        inferd: Any, redis_servers: Any) -> None:
    redis = redis_servers.start()
    server = inferd.start(cached_repository(inferd), *redis_flags(redis.port))
    http_infer(server, "cached", 9)
    http_infer(server, "cached", 9)
    assert counts(server, "cached")[:2] == (1, 1)
    redis.stop()
    for seed in (9, 10):  # served, uncached, while Redis is down
        answer = grpc_infer(server, "cached", seed)
        np.testing.assert_array_equal(answer["OUTPUT0"], expected(seed)["OUTPUT0"])
    hits, misses, successes, _ = counts(server, "cached")
    assert (hits, misses, successes) == (1, 3, 4)
    deadline = time.monotonic() + WAIT_SECS
    while "response cache (redis): lookup for model 'cached' failed" not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.1)
    redis_servers.start(port=redis.port)  # back, empty: the cache works again
    http_infer(server, "cached", 9)
    http_infer(server, "cached", 9)
    assert counts(server, "cached")[:2] == (2, 4)


def test_an_unreachable_redis_stops_the_start(inferd: Any, redis_servers: Any) -> None:
    redis = redis_servers.start()
    redis.stop()  # its port is free now: nothing answers there
    server = inferd.launch(inferd.repository("simple"), *redis_flags(redis.port),
                           "--cache-config=redis,connect_timeout=500")
    server.clean_exit = False
    assert server.wait_exit(WAIT_SECS) == 1
    assert "Failed to initialize RedisCache: cannot reach Redis at 127.0.0.1:" in server.log()


def test_a_hit_keeps_its_place_under_preserve_ordering(inferd: Any) -> None:
    """As Triton: a hit answers after the requests already sent to an instance."""
    started = inferd.folder / "ordered_cached.started"
    config = inferd.testing_config("ordered_cached", "slow", delay_ms="1500",
                                   started_file=str(started)) + (
        "dynamic_batching { preserve_ordering: true }\n" + CACHED)
    server = inferd.start(inferd.repository(configs={"ordered_cached": config}),
                          f"--cache-config=local,size={CACHE_BYTES}")
    finished: dict[str, Any] = {}

    def infer(name: str, value: float) -> None:
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.full(4, value, dtype=np.float32))
        try:  # a client each: tritonclient's clients are not shared across threads
            with httpclient.InferenceServerClient(server.http_url) as client:
                client.infer("ordered_cached", [tensor])
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            finished[f"{name} failed"] = error
        finished[name] = time.monotonic()

    infer("first", 1.0)  # now in the cache (the model's first batch)
    slow = threading.Thread(target=infer, args=("slow", 2.0))  # a miss: 1.5 s
    slow.start()
    wait_started(started, 2, server)  # it is running on its instance
    infer("hit", 1.0)
    slow.join(WAIT_SECS)
    assert not [key for key in finished if key.endswith("failed")], finished
    assert finished["hit"] >= finished["slow"] - 0.2, finished
    assert counts(server, "ordered_cached")[:2] == (1, 2), stats(server, "ordered_cached")
