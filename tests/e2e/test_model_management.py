"""Model management under traffic, through tritonclient http and grpc: reloads that drop
nothing, failed reloads that leave the old version serving, and loads that time out."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import pending, started_batches, wait_for

RELOADS = 20
CLIENTS = 4


def simple_inputs(module: Any, value: int) -> list[Any]:
    row = np.full((1, 16), value, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(row)
    inputs[1].set_data_from_numpy(np.ones_like(row))
    return inputs


def sender(module: Any, url: str, stop: threading.Event, outcomes: list[str],
           spans: list[tuple[float, float]]) -> Callable[[], None]:
    """A client sending ``simple`` requests back to back until ``stop``, recording each
    outcome ("ok" or the error) in ``outcomes`` and its (start, end) in ``spans``."""

    def run() -> None:
        client = module.InferenceServerClient(url)
        value = 0
        while not stop.is_set():
            value += 1
            start = time.monotonic()
            try:
                result = client.infer("simple", simple_inputs(module, value))
                got = result.as_numpy("OUTPUT0")[0].tolist()
                outcomes.append("ok" if got == [value + 1] * 16 else f"wrong sums {got}")
            except InferenceServerException as error:
                outcomes.append(f"{error.status()}: {error.message()}")
            spans.append((start, time.monotonic()))

    return run


def readiness_watcher(url: str, stop: threading.Event, unready: list[float]) -> Callable[[], None]:
    """Asks ``v2/health/ready`` until ``stop``, recording when the server said not ready."""

    def run() -> None:
        client = httpclient.InferenceServerClient(url)
        while not stop.is_set():
            if not client.is_server_ready():
                unready.append(time.monotonic())
            time.sleep(0.02)

    return run


def test_reloads_under_load_fail_no_request(inferd: Any) -> None:
    repository = inferd.repository("simple")
    model_file = repository / "simple" / "1" / "model.onnx"
    server = inferd.start(repository, "--model-control-mode", "explicit",
                          "--load-model", "simple")
    stop = threading.Event()
    outcomes: list[str] = []
    spans: list[tuple[float, float]] = []
    loads: list[tuple[float, float]] = []
    unready: list[float] = []
    targets = [(httpclient, server.http_url), (grpcclient, server.grpc_url)] * (CLIENTS // 2)
    threads = [threading.Thread(target=sender(module, url, stop, outcomes, spans))
               for module, url in targets]
    threads.append(threading.Thread(target=readiness_watcher(server.http_url, stop, unready)))
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(spans) >= CLIENTS, "the clients' first requests", server)
        controls = [httpclient.InferenceServerClient(server.http_url),
                    grpcclient.InferenceServerClient(server.grpc_url)]
        for reload in range(RELOADS):
            # A new mtime on the model file: the version has changed, so each load really
            # loads it again (a load that changes nothing keeps the version, as Triton).
            stamp = time.time_ns() + reload
            os.utime(model_file, ns=(stamp, stamp))
            start = time.monotonic()
            controls[reload % 2].load_model("simple")
            loads.append((start, time.monotonic()))
        answered = len(spans)
        wait_for(lambda: len(spans) >= answered + CLIENTS, "requests after the reloads", server)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    failures = [outcome for outcome in outcomes if outcome != "ok"]
    assert not failures, f"{len(failures)} of {len(outcomes)} requests failed: {failures[:5]}"
    # Every reload had requests in flight: started before it ended, answered after it began.
    overlapped = sum(any(start < end_ and end > start_ for start, end in spans)
                     for start_, end_ in loads)
    assert overlapped == RELOADS, f"only {overlapped} of {RELOADS} reloads had requests"
    assert not unready, "a reload made the server unready (SPEC 6.2)"
    with server.client() as client:
        assert [(e.version, e.state) for e in client.index() if e.name == "simple"] == [("1", "READY")]


def test_a_reload_with_a_bad_config_override_keeps_the_old_version(inferd: Any) -> None:
    server = inferd.start(inferd.repository("simple"), "--model-control-mode", "explicit",
                          "--load-model", "simple")
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        http.load_model("simple", config='{"max_batch_size": -3}')
    assert refused.value.status() == "400"
    assert "'max_batch_size' must be >= 0, got -3" in refused.value.message()
    assert http.is_model_ready("simple")
    result = http.infer("simple", simple_inputs(httpclient, 4))
    assert result.as_numpy("OUTPUT0")[0].tolist() == [5] * 16
    # The log says what the index says: the version serving stays READY.
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException):
        grpc.load_model("simple", config='{"backend": "no_such_backend"}')
    assert [(e["version"], e["state"]) for e in http.get_model_repository_index()
            if e["name"] == "simple"] == [("1", "READY")]
    log = server.log()
    assert "model 'simple' UNAVAILABLE" not in log
    assert "model 'simple' version 1 UNAVAILABLE" not in log
    assert log.count("model 'simple' READY: the load failed, version(s) 1 serving stay READY") \
        + log.count("model 'simple' version 1 READY: the reload failed") == 2
    http.load_model("simple")  # the next load finds it serving, and it serves on
    assert http.is_model_ready("simple", "1")
    assert http.infer("simple", simple_inputs(httpclient, 2)).as_numpy("OUTPUT0")[0][0] == 3


def test_a_load_that_outlives_the_load_timeout_is_unavailable(inferd: Any) -> None:
    release = inferd.folder / "sleepy.release"  # the load is held until it exists
    sleepy = inferd.testing_config("sleepy", "slow_load", load_delay_ms="30000",
                                   release_file=str(release))
    server = inferd.start(
        inferd.repository("simple", configs={"sleepy": sleepy}),
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--model-load-timeout-secs", "1",
    )
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:  # refused while the load is held: at the timeout, not at the load's end
        with pytest.raises(InferenceServerException) as refused:
            grpc.load_model("sleepy")
    finally:
        release.touch()
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "did not finish within 1 s (--model-load-timeout-secs)" in refused.value.message()
    entries = grpc.get_model_repository_index(as_json=True)["models"]
    sleepy_entry = next(e for e in entries if e["name"] == "sleepy")
    assert sleepy_entry["state"] == "UNAVAILABLE"
    assert "--model-load-timeout-secs" in sleepy_entry["reason"]
    result = grpc.infer("simple", simple_inputs(grpcclient, 1))
    assert result.as_numpy("OUTPUT0")[0].tolist() == [2] * 16


def test_readiness_survives_unloads_and_failed_loads_of_models_not_serving(inferd: Any) -> None:
    broken = 'name: "broken"\nbackend: "onnxruntime"\nmax_bach_size: 1\n'
    server = inferd.start(inferd.repository("simple", "mlp", configs={"broken": broken}),
                          "--model-control-mode", "explicit", "--load-model", "simple",
                          "--load-model", "mlp")
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.is_server_ready()
    with pytest.raises(InferenceServerException):
        http.load_model("broken")
    assert http.is_server_ready(), "a failed load of a model that was not serving"
    http.unload_model("mlp")
    assert http.is_server_ready(), "an unload on request"
    assert http.is_model_ready("simple") and not http.is_model_ready("mlp")


VERSIONED = """
name: "versioned"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: {policy}
"""


@pytest.mark.parametrize(
    ("policy", "ready"),
    [("{ all { } }", ["1", "2", "3"]),
     ("{ latest { num_versions: 2 } }", ["2", "3"]),
     ("{ specific { versions: [ 1, 3 ] } }", ["1", "3"])],
    ids=["all", "latest-2", "specific"],
)
def test_version_policies(inferd: Any, policy: str, ready: list[str]) -> None:
    repository = inferd.repository("simple")
    folder = repository / "simple"
    (folder / "config.pbtxt").write_text(
        VERSIONED.format(policy=policy).replace("versioned", "simple"))
    for version in ("2", "3"):
        shutil.copytree(folder / "1", folder / version)
    server = inferd.start(repository)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    index = grpc.get_model_repository_index(as_json=True)["models"]
    assert sorted(e["version"] for e in index if e.get("state") == "READY") == ready
    assert grpc.get_model_metadata("simple", as_json=True)["versions"] == ready
    # Without a version, the highest READY one answers.
    assert grpc.infer("simple", simple_inputs(grpcclient, 1)).get_response().model_version == ready[-1]
    for version in ready:
        result = grpc.infer("simple", simple_inputs(grpcclient, 1), model_version=version)
        assert result.get_response().model_version == version


PRIORITIZED = """
name: "prioritized"
backend: "inferd_testing"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
dynamic_batching { priority_levels: 2 default_priority_level: 2 }
parameters { key: "mode" value { string_value: "slow" } }
parameters { key: "delay_ms" value { string_value: "30000" } }
parameters { key: "release_file" value { string_value: "FOLDER/release" } }
parameters { key: "started_file" value { string_value: "FOLDER/started" } }
"""


def test_higher_priority_requests_leave_the_queue_first(inferd: Any) -> None:
    config = PRIORITIZED.replace("FOLDER", str(inferd.folder))
    server = inferd.start(inferd.repository(configs={"prioritized": config}))
    finished: set[str] = set()

    def send(name: str, priority: int) -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
        client.infer("prioritized", [tensor], priority=priority, request_id=name)
        finished.add(name)

    # One request runs (held until released), one waits (under priority levels nothing is
    # sent to a busy instance); then a low- and a high-priority request queue up, the low one
    # first (each sent once the one before is in the server).
    threads = []
    for number, (name, priority) in enumerate(
            (("first", 2), ("second", 2), ("low", 2), ("high", 1)), 1):
        threads.append(threading.Thread(target=send, args=(name, priority)))
        threads[-1].start()
        wait_for(lambda n=number: pending(server, "prioritized") >= n, f"{name} queued", server)
    (inferd.folder / "release").touch()
    for thread in threads:
        thread.join(timeout=30)
    assert finished == {"first", "second", "low", "high"}
    # The order the model ran them in: the high-priority one ahead of both that waited at the
    # lower level, those two in their order.
    assert started_batches(inferd.folder / "started") == ["first", "high", "second", "low"]


QUEUE_LIMITED = """
name: "limited"
backend: "inferd_testing"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
dynamic_batching { default_queue_policy { max_queue_size: 1
  default_timeout_microseconds: 30000000 allow_timeout_override: true } }
parameters { key: "mode" value { string_value: "slow" } }
parameters { key: "delay_ms" value { string_value: "30000" } }
parameters { key: "release_file" value { string_value: "FOLDER/release" } }
parameters { key: "started_file" value { string_value: "FOLDER/started" } }
"""


def test_queue_size_and_request_timeouts_refuse_with_triton_messages(inferd: Any) -> None:
    config = QUEUE_LIMITED.replace("FOLDER", str(inferd.folder))
    server = inferd.start(inferd.repository(configs={"limited": config}))
    outcomes: dict[str, str] = {}

    def send(name: str, timeout_us: int) -> None:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
        try:
            client.infer("limited", [tensor], timeout=timeout_us or None)
            outcomes[name] = "ok"
        except InferenceServerException as error:
            outcomes[name] = f"{error.status()} {error.message()}"

    # One request runs (under a queue policy nothing is sent to a busy instance, as in
    # Triton), the second waits in the queue of one with a 1 s timeout (shorter than the
    # default, which allow_timeout_override lets it shorten), the third finds the queue full.
    # Each is sent once the one before is in the server (pending, or answered: the queued one
    # may time out first); the running one is held until the other two are answered.
    threads = []
    for number, (name, timeout_us) in enumerate(
            (("running", 0), ("queued", 1_000_000), ("full", 0)), 1):
        threads.append(threading.Thread(target=send, args=(name, timeout_us)))
        threads[-1].start()
        wait_for(lambda n=number: pending(server, "limited") + len(outcomes) >= n,
                 f"{name} in the server", server)
    wait_for(lambda: len(outcomes) == 2, "the queued and the full one answered", server)
    (inferd.folder / "release").touch()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes["running"] == "ok"
    assert outcomes["full"] == "503 [request id: <id_unknown>] Exceeds maximum queue size"
    assert outcomes["queued"] == "503 Request timeout expired"
