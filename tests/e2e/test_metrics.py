"""Prometheus metrics on --metrics-port with Triton's names (SPEC 5.5), scraped over HTTP
after real traffic from tritonclient."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient


def scrape(server: Any, path: str = "/metrics", method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.ports['metrics']}{path}",
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def value(text: str, metric: str, model: str = "simple") -> float:
    found = re.search(rf'^{metric}{{model="{model}",version="1"}} (\S+)$', text, re.MULTILINE)
    assert found, f"{metric} for {model} missing from:\n{text}"
    return float(found.group(1))


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> Any:
    return module_inferd.start(module_inferd.repository("simple", "mlp"))


def test_counters_follow_traffic(server: Any) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    rows = np.arange(32, dtype=np.int32).reshape(2, 16)
    inputs = [httpclient.InferInput(name, [2, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(rows)
    for _ in range(3):
        client.infer("simple", inputs)
    status, content_type, text = scrape(server)
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE nv_inference_request_success counter" in text
    assert "# TYPE nv_inference_pending_request_count gauge" in text
    assert value(text, "nv_inference_request_success") == 3
    assert value(text, "nv_inference_count") == 6  # batch elements
    assert value(text, "nv_inference_exec_count") == 3
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert re.search(rf'^nv_inference_request_failure{{model="simple",reason="{reason}",'
                         rf'version="1"}} 0(\.0)?$', text, re.MULTILINE), text
    assert value(text, "nv_inference_pending_request_count") == 0
    assert value(text, "nv_inference_request_duration_us") > 0
    assert value(text, "nv_inference_compute_infer_duration_us") > 0
    assert value(text, "nv_model_load_duration_secs", "mlp") > 0
    assert value(text, "nv_inference_request_success", "mlp") == 0


def test_other_paths_and_methods(server: Any) -> None:
    assert scrape(server, "/nope")[0] == 404
    assert scrape(server, method="POST")[0] == 405
    status, _, body = scrape(server, method="HEAD")
    assert status == 200 and body == ""
