"""Model management under traffic, through tritonclient http and grpc: reloads that drop
nothing, failed reloads that leave the old version serving, and loads that time out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

RELOADS = 20
CLIENTS = 4


def simple_inputs(module: Any, value: int) -> list[Any]:
    row = np.full((1, 16), value, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(row)
    inputs[1].set_data_from_numpy(np.ones_like(row))
    return inputs


def sender(module: Any, url: str, stop: threading.Event, outcomes: list[str]) -> Callable[[], None]:
    """A client sending ``simple`` requests back to back until ``stop``, recording each
    outcome ("ok" or the error) in ``outcomes``."""

    def run() -> None:
        client = module.InferenceServerClient(url)
        value = 0
        while not stop.is_set():
            value += 1
            try:
                result = client.infer("simple", simple_inputs(module, value))
                got = result.as_numpy("OUTPUT0")[0].tolist()
                outcomes.append("ok" if got == [value + 1] * 16 else f"wrong sums {got}")
            except InferenceServerException as error:
                outcomes.append(f"{error.status()}: {error.message()}")

    return run


def test_reloads_under_load_fail_no_request(inferd: Any) -> None:
    server = inferd.start(inferd.repository("simple"), "--model-control-mode", "explicit",
                          "--load-model", "simple")
    stop = threading.Event()
    outcomes: list[str] = []
    targets = [(httpclient, server.http_url), (grpcclient, server.grpc_url)] * (CLIENTS // 2)
    threads = [threading.Thread(target=sender(module, url, stop, outcomes)) for module, url in targets]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        controls = [httpclient.InferenceServerClient(server.http_url),
                    grpcclient.InferenceServerClient(server.grpc_url)]
        for reload in range(RELOADS):
            controls[reload % 2].load_model("simple")
        time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    failures = [outcome for outcome in outcomes if outcome != "ok"]
    assert not failures, f"{len(failures)} of {len(outcomes)} requests failed: {failures[:5]}"
    assert len(outcomes) > 4 * RELOADS, "the clients hardly sent anything during the reloads"
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


def test_a_load_that_outlives_the_load_timeout_is_unavailable(inferd: Any) -> None:
    sleepy = inferd.testing_config("sleepy", "slow_load", load_delay_ms="4000")
    server = inferd.start(
        inferd.repository("simple", configs={"sleepy": sleepy}),
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--model-load-timeout-secs", "1",
    )
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as refused:
        grpc.load_model("sleepy")
    assert time.monotonic() - started < 3.5
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "did not finish within 1 s (--model-load-timeout-secs)" in refused.value.message()
    entries = grpc.get_model_repository_index(as_json=True)["models"]
    sleepy_entry = next(e for e in entries if e["name"] == "sleepy")
    assert sleepy_entry["state"] == "UNAVAILABLE"
    assert "--model-load-timeout-secs" in sleepy_entry["reason"]
    result = grpc.infer("simple", simple_inputs(grpcclient, 1))
    assert result.as_numpy("OUTPUT0")[0].tolist() == [2] * 16
