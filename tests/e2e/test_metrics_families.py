"""/metrics of a real server parsed with prometheus-client's own parser: every family has HELP
and TYPE lines and Triton's type, the counters follow traffic, failures carry Triton's
``reason`` (REJECTED for a full queue and a queue timeout, BACKEND for a model that fails,
CANCELED for a request its client gave up on), the latency summaries appear only with
``--metrics-config``, the executor processes' CPU, memory and restart count, the machine's CPU
and memory, the shared-memory gauges, and no GPU family on a machine without a GPU."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from inferd.protocols.prometheus import METRICS

WAIT_SECS = 30.0
REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
SUMMARIES = ("nv_inference_request_summary_us", "nv_inference_queue_summary_us",
             "nv_inference_compute_input_summary_us", "nv_inference_compute_infer_summary_us",
             "nv_inference_compute_output_summary_us")

LIMITED = """
name: "limited"
backend: "inferd_testing"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
dynamic_batching { default_queue_policy { max_queue_size: 1
  default_timeout_microseconds: 30000000 allow_timeout_override: true } }
parameters { key: "mode" value { string_value: "slow" } }
parameters { key: "delay_ms" value { string_value: "400" } }
"""


def scrape(server: Any) -> str:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text


def families(server: Any) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(scrape(server))}


def value(found: dict[str, Metric], family: str, **labels: str) -> float | None:
    """The value of the sample of ``family`` whose labels include ``labels`` (a summary's
    quantile only when ``labels`` names one; never its _count or _sum)."""
    for sample in found[family].samples if family in found else ():
        if (sample.name in (family, f"{family}_total")
                and labels.items() <= sample.labels.items()
                and ("quantile" in sample.labels) == ("quantile" in labels)):
            return float(sample.value)
    return None


def wait_for(check: Callable[[], bool], what: str, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {WAIT_SECS} s; log:\n{log()}")
        time.sleep(0.1)


def infer(server: Any, model: str, **options: Any) -> str:
    """'ok' or the error's status and message."""
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    try:
        client.infer(model, [tensor], **options)
        return "ok"
    except InferenceServerException as error:
        return f"{error.status()} {error.message()}"


def infer_simple(server: Any, count: int) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    rows = np.arange(32, dtype=np.int32).reshape(2, 16)
    inputs = [httpclient.InferInput(name, [2, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(rows)
    for _ in range(count):
        client.infer("simple", inputs)


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> Any:
    configs = {"limited": LIMITED,
               "failer": module_inferd.testing_config("failer", "fail"),
               "sleeper": module_inferd.testing_config("sleeper", "slow", delay_ms="1500")}
    return module_inferd.start(module_inferd.repository("simple", configs=configs),
                               "--allow-client-shm=true")


def test_every_family_has_help_and_type_and_tritons_type(server: Any) -> None:
    infer_simple(server, 3)
    found = families(server)
    for name, family in found.items():
        known = METRICS.get(name) or METRICS.get(f"{name}_total")
        assert known is not None, f"{name} is not a family inferd declares"
        assert family.type == known[0], name
        assert family.documentation, name
    for name in ("nv_inference_request_success", "nv_inference_count",
                 "nv_inference_exec_count", "nv_inference_request_duration_us"):
        assert found[name].type == "counter"
    assert found["nv_inference_pending_request_count"].type == "gauge"
    assert value(found, "nv_inference_request_success", model="simple", version="1") == 3
    assert value(found, "nv_inference_count", model="simple", version="1") == 6
    assert (value(found, "nv_inference_compute_infer_duration_us", model="simple",
                  version="1") or 0) > 0
    # Off by default, as in Triton.
    assert not any(name in found for name in SUMMARIES)


def test_failures_carry_tritons_reasons(server: Any) -> None:
    assert infer(server, "failer") == "400 testing backend: failure requested"
    outcomes: dict[str, str] = {}

    def send(name: str, timeout_us: int) -> None:
        outcomes[name] = infer(server, "limited", timeout=timeout_us or None)

    # One request runs, the next times out in the queue, the third finds the queue full.
    threads = []
    for name, timeout_us in (("running", 0), ("queued", 100_000), ("full", 0)):
        threads.append(threading.Thread(target=send, args=(name, timeout_us)))
        threads[-1].start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(timeout=WAIT_SECS)
    assert outcomes == {"running": "ok", "queued": "503 Request timeout expired",
                        "full": "503 [request id: <id_unknown>] Exceeds maximum queue size"}
    found = families(server)

    def failures(model: str) -> dict[str, float | None]:
        return {reason: value(found, "nv_inference_request_failure", model=model,
                              version="1", reason=reason) for reason in REASONS}

    assert failures("failer") == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 1, "OTHER": 0}
    assert failures("limited") == {"REJECTED": 2, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}
    assert value(found, "nv_inference_request_success", model="limited", version="1") == 1


def test_a_request_its_client_gave_up_on_is_canceled(server: Any) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    with pytest.raises(InferenceServerException, match="Deadline"):
        client.infer("sleeper", [tensor], client_timeout=0.3)
    wait_for(lambda: value(families(server), "nv_inference_request_failure", model="sleeper",
                           version="1", reason="CANCELED") == 1,
             "a CANCELED failure", server.log)


def test_processes_machine_and_shared_memory(server: Any) -> None:
    found = families(server)
    executor = {"executor": "executor/cpu0"}
    assert (value(found, "inferd_executor_cpu_seconds", **executor) or 0) > 0
    assert (value(found, "inferd_executor_resident_memory_bytes", **executor) or 0) > 1 << 20
    assert value(found, "inferd_executor_restarts", **executor) == 0
    total = value(found, "nv_cpu_memory_total_bytes")
    used = value(found, "nv_cpu_memory_used_bytes")
    assert total and used and 0 < used <= total
    utilization = value(found, "nv_cpu_utilization")
    assert utilization is not None and 0.0 <= utilization <= 1.0
    assert value(found, "inferd_system_shared_memory_bytes") == 0
    region = shm.create_shared_memory_region("metrics_region", "/inferd_metrics_test", 4096)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        client.register_system_shared_memory("metrics_region", "/inferd_metrics_test", 4096)
        found = families(server)
        assert value(found, "inferd_system_shared_memory_bytes") == 4096
        assert value(found, "inferd_system_shared_memory_regions") == 1
        client.unregister_system_shared_memory("metrics_region")
    finally:
        shm.destroy_shared_memory_region(region)
    assert value(families(server), "inferd_system_shared_memory_bytes") == 0
    assert value(found, "inferd_link_shared_memory_bytes") is not None


@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="this machine has a GPU")
def test_no_gpu_family_without_a_gpu(server: Any) -> None:
    text = scrape(server)
    assert "nv_gpu_" not in text and "nv_energy_consumption" not in text
    assert "Traceback" not in server.log() and "GPU metrics" not in server.log()


def test_summaries_with_metrics_config_and_restarts_after_a_crash(inferd: Any) -> None:
    repository = inferd.repository(
        "simple", configs={"crasher": inferd.testing_config("crasher", "crash")})
    server = inferd.start(repository, "--cpu-executor", "process",
                          "--metrics-config", "summary_latencies=true",
                          "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
                          "--metrics-config=counter_latencies=false",
                          "--allow-cpu-metrics=false")
    infer_simple(server, 4)
    found = families(server)
    labels = {"model": "simple", "version": "1"}
    for name in SUMMARIES:
        family = found[name]
        assert family.type == "summary"
        quantiles = sorted(s.labels["quantile"] for s in family.samples
                           if "quantile" in s.labels and s.labels["model"] == "simple")
        assert quantiles == ["0.5", "0.99"], name
        count = [s.value for s in family.samples
                 if s.name == f"{name}_count" and s.labels == labels]
        assert count == [4], name
    median = value(found, "nv_inference_request_summary_us", **labels, quantile="0.5")
    assert median is not None and median > 0
    assert not any(name.startswith("nv_cpu_") for name in found)  # --allow-cpu-metrics=false
    assert not found["nv_inference_request_duration_us"].samples  # counter_latencies=false
    assert value(found, "nv_inference_request_success", **labels) == 4

    executor = {"executor": "executor/cpu0"}
    first = value(found, "inferd_executor_cpu_seconds", **executor)
    assert first is not None
    assert value(found, "inferd_executor_restarts", **executor) == 0
    assert infer(server, "crasher").startswith("503 ")
    wait_for(lambda: value(families(server), "inferd_executor_restarts", **executor) == 1,
             "the restart count going up", server.log)
    with server.client() as client:
        wait_for(lambda: client.is_model_ready("simple"), "simple READY again", server.log)
    assert value(families(server), "inferd_executor_resident_memory_bytes", **executor)


@pytest.mark.parametrize(("flag", "message"), [
    ("--metrics-config=summary_latencies", "--metrics-config option format is "
                                           "<setting>=<value>. Got summary_latencies"),
    ("--metrics-config=histogram_latencies=true", "unknown setting 'histogram_latencies'"),
    ("--metrics-config=summary_quantiles=0.5", "No ':' delimiter found"),
    ("--metrics-interval-ms=0", "--metrics-interval-ms 0: expected a positive number"),
])
def test_a_bad_metrics_flag_stops_the_start(inferd: Any, flag: str, message: str) -> None:
    server = inferd.launch(inferd.repository(), flag)
    server.clean_exit = False
    assert server.wait_exit(WAIT_SECS) == 1, server.log()
    assert message in server.log()
