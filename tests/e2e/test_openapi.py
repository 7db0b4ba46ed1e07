"""The OpenAPI description (protocols/kserve_http/openapi.json) against a live server: the server
serves it, a sample of real requests (one or more per API group, valid and invalid) get responses
that validate against it, and a bounded schemathesis run (bench/reliability/fuzz_http.py with small
numbers) finds no 5xx, no undocumented status or content type, no body off its schema, and
leaves the server serving. The repository is bench/reliability/repository.py's: two onnx
models, a python model and an ensemble of them, in EXPLICIT mode.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import requests
import schemathesis
import tritonclient.http as httpclient

from bench.reliability import fuzz_http
from bench.reliability import repository as reliability_repository
from tests.e2e.inferd_harness import PROJECT_ROOT, ServerHandle

# The bounded run: a few generated requests per operation and mode, seeded, so what it tries
# is fixed; its time budget only guards against a hang (the run takes well under a minute),
# and running out of it fails the test rather than leaving the negative pass out.
FUZZ_EXAMPLES = 2
FUZZ_SECS = 240


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> ServerHandle:
    repository = reliability_repository.build(module_inferd.folder / "reliability")
    flags = ["--model-control-mode=explicit", "--allow-client-shm=true"]
    flags += [f"--load-model={name}" for name in reliability_repository.MODELS]
    return module_inferd.start(repository, *flags)


@pytest.fixture(scope="module")
def schema() -> Any:
    return schemathesis.openapi.from_path(str(fuzz_http.DESCRIPTION))


def base(server: ServerHandle) -> str:
    return f"http://{server.http_url}"


def call(server: ServerHandle, schema: Any, method: str, template: str, *,
         expect: int, **case: Any) -> requests.Response:
    """Send one request through the description's operation and validate its response."""
    operation = schema[template][method]
    made = operation.Case(**case)
    response = made.call(base_url=base(server), timeout=30)
    assert response.status_code == expect, response.text
    made.validate_response(response, checks=fuzz_http.CHECKS)
    return response


def test_the_server_serves_its_description(server: ServerHandle) -> None:
    response = requests.get(f"{base(server)}/v2/openapi.json", timeout=30)
    assert response.status_code == 200
    assert response.json() == json.loads(fuzz_http.DESCRIPTION.read_text(encoding="utf-8"))


def test_metadata_health_config_and_statistics_validate(server: ServerHandle,
                                                        schema: Any) -> None:
    call(server, schema, "GET", "/v2", expect=200)
    call(server, schema, "GET", "/v2/health/live", expect=200)
    call(server, schema, "GET", "/v2/health/ready", expect=200)
    model = {"path_parameters": {"model": "simple"}}
    call(server, schema, "GET", "/v2/models/{model}", expect=200, **model)
    call(server, schema, "GET", "/v2/models/{model}/ready", expect=200, **model)
    call(server, schema, "GET", "/v2/models/{model}/config", expect=200, **model)
    call(server, schema, "GET", "/v2/models/{model}/stats", expect=200, **model)
    call(server, schema, "GET", "/v2/models/stats", expect=200)
    call(server, schema, "GET", "/v2/models/{model}/versions/{version}", expect=200,
         path_parameters={"model": "add_sub", "version": "1"})
    unknown = call(server, schema, "GET", "/v2/models/{model}", expect=404,
                   path_parameters={"model": "no_such_model"})
    assert unknown.json() == {"error": "Request for unknown model: 'no_such_model' is not found"}
    call(server, schema, "GET", "/v2/models/{model}/stats", expect=400,
         path_parameters={"model": "no_such_model"})


def test_json_and_binary_inference_validate(server: ServerHandle, schema: Any) -> None:
    rows = list(range(16))
    body = {"id": "r1", "inputs": [
        {"name": n, "shape": [1, 16], "datatype": "INT32", "data": rows}
        for n in ("INPUT0", "INPUT1")]}
    answer = call(server, schema, "POST", "/v2/models/{model}/infer", expect=200,
                  path_parameters={"model": "simple"}, body=body,
                  media_type="application/json").json()
    assert answer["id"] == "r1" and answer["outputs"][0]["data"] == [2 * v for v in rows]
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}],
                         "outputs": [{"name": "OUTPUT0",
                                      "parameters": {"binary_data": True}}]}).encode()
    payload = header + np.arange(4, dtype=np.float32).tobytes()
    binary = call(server, schema, "POST", "/v2/models/{model}/infer", expect=200,
                  path_parameters={"model": "identity_fp32"}, body=payload,
                  media_type="application/octet-stream",
                  headers={"Inference-Header-Content-Length": str(len(header))})
    length = int(binary.headers["inference-header-content-length"][0])
    np.testing.assert_array_equal(np.frombuffer(binary.content[length:], np.float32),
                                  np.arange(4, dtype=np.float32))
    ensemble = {"inputs": [{"name": n, "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
                           for n in ("A", "B")]}
    summed = call(server, schema, "POST", "/v2/models/{model}/infer", expect=200,
                  path_parameters={"model": reliability_repository.ENSEMBLE}, body=ensemble,
                  media_type="application/json").json()
    assert summed["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
    wrong = call(server, schema, "POST", "/v2/models/{model}/infer", expect=400,
                 path_parameters={"model": "simple"}, body={"inputs": []},
                 media_type="application/json")
    assert "expected 2 inputs but got 0 inputs" in wrong.json()["error"]
    truncated = call(server, schema, "POST", "/v2/models/{model}/infer", expect=400,
                     path_parameters={"model": "identity_fp32"}, body=payload[:-3],
                     media_type="application/octet-stream",
                     headers={"Inference-Header-Content-Length": str(len(header))})
    assert truncated.json()["error"]


def test_generate_validates(server: ServerHandle, schema: Any) -> None:
    body = {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}
    answer = call(server, schema, "POST", "/v2/models/{model}/generate", expect=200,
                  path_parameters={"model": "add_sub"}, body=body,
                  media_type="application/json").json()
    assert answer["OUTPUT0"] == [2.0, 3.0, 4.0, 5.0]
    stream = call(server, schema, "POST", "/v2/models/{model}/generate_stream", expect=200,
                  path_parameters={"model": "add_sub"}, body=body,
                  media_type="application/json")
    assert stream.text.startswith("data: {")


def test_repository_calls_validate(server: ServerHandle, schema: Any) -> None:
    index = call(server, schema, "POST", "/v2/repository/index", expect=200,
                 body={"ready": True}, media_type="application/json").json()
    assert {row["name"] for row in index} == set(reliability_repository.MODELS)
    call(server, schema, "POST", "/v2/repository/models/{model}/load", expect=200,
         path_parameters={"model": "identity_fp32"})
    bad = call(server, schema, "POST", "/v2/repository/models/{model}/load", expect=400,
               path_parameters={"model": "simple"},
               body={"parameters": {"config": "{not json"}}, media_type="application/json")
    assert "failed to load 'simple'" in bad.json()["error"]
    call(server, schema, "POST", "/v2/repository/models/{model}/load", expect=404,
         path_parameters={"model": "no_such_model"})
    call(server, schema, "POST", "/v2/repository/models/{model}/unload", expect=200,
         path_parameters={"model": "no_such_model"})
    call(server, schema, "POST", "/v2/repository/poll", expect=503)


def test_shared_memory_logging_and_trace_validate(server: ServerHandle, schema: Any) -> None:
    call(server, schema, "GET", "/v2/systemsharedmemory/status", expect=200)
    call(server, schema, "GET", "/v2/systemsharedmemory/region/{region}/status", expect=404,
         path_parameters={"region": "nowhere"})
    call(server, schema, "POST", "/v2/systemsharedmemory/region/{region}/register", expect=400,
         path_parameters={"region": "r"}, body={"key": "/no-such-object", "byte_size": 8},
         media_type="application/json")
    call(server, schema, "POST", "/v2/systemsharedmemory/unregister", expect=200)
    call(server, schema, "GET", "/v2/cudasharedmemory/status", expect=200)
    call(server, schema, "GET", "/v2/logging", expect=200)
    call(server, schema, "POST", "/v2/logging", expect=200, body={"log_verbose_level": 0},
         media_type="application/json")
    call(server, schema, "POST", "/v2/logging", expect=501, body={"log_file": "x.log"},
         media_type="application/json")
    call(server, schema, "GET", "/v2/trace/setting", expect=200)
    call(server, schema, "GET", "/v2/models/{model}/trace/setting", expect=200,
         path_parameters={"model": "simple"})
    call(server, schema, "POST", "/v2/trace/setting", expect=400,
         body={"trace_rate": "not a number"}, media_type="application/json")


def test_a_bounded_schemathesis_run_finds_nothing(server: ServerHandle, schema: Any) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.reliability.fuzz_http", "--url", base(server),
         "--max-examples", str(FUZZ_EXAMPLES), "--time-budget", str(FUZZ_SECS), "--seed", "13"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=FUZZ_SECS + 30,
    )
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert run.returncode == 0 and summary["failures"] == 0, run.stdout[-6000:] + run.stderr
    assert summary["live"]
    # Every operation was tried, valid and invalid: the budget did not cut the run short.
    assert not summary["out_of_time"], run.stdout[-6000:]
    assert summary["operations"] == len(list(schema.get_all_operations()))
    assert summary["negative"] > 0
    # The fuzzing loaded and unloaded models at random: load them back, then infer.
    for name in reliability_repository.MODELS:
        requests.post(f"{base(server)}/v2/repository/models/{name}/load", timeout=60)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        data = np.ones(4, dtype=np.float32)
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("A", "B")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        result = client.infer(reliability_repository.ENSEMBLE, inputs)
        np.testing.assert_array_equal(result.as_numpy("SUM"), data + data)
    finally:
        client.close()
