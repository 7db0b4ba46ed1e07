"""Warm ensembles end to end (an inferd extension: Triton refuses ``model_warmup`` on an
ensemble): the samples run through the whole pipeline when the ensemble loads, again when a
composing model is reloaded or brought back (an unload then a request, an eviction from the
memory budget), and a failing sample fails the ensemble's load with Triton's message.

The composing model is a python model with a slow start made visible instead of timed: the
first ``execute`` after its ``initialize`` answers ``COLD = 1``, every later one ``COLD = 0``.
So "the first request after a (re)load is as fast as the following ones" is asserted as "the
first client request sees ``COLD = 0``", and the warm-up is shown to have gone through the
pipeline by the composing model's execution count in the statistics extension. A twin
ensemble without ``model_warmup`` shows that the first request would otherwise be cold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import InferdHarness, ServerHandle

COLD_START_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        cold = self.executions == 0
        self.executions += 1
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()),
            pb_utils.Tensor("COLD", np.array([int(cold)], np.int32))]) for r in requests]
"""
SAMPLE_COUNT = 2
WARMUP = f"""model_warmup [ {{
  name: "zeros"
  batch_size: 1
  count: {SAMPLE_COUNT}
  inputs {{ key: "X" value: {{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }} }}
}} ]
"""
X = np.arange(4, dtype=np.float32)


def cold_start_config(name: str, memory_bytes: int = 100) -> str:
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },'
            ' { name: "COLD" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
            'parameters { key: "INFERD_MEMORY_BYTES" value { string_value: '
            f'"{memory_bytes}" }} }}\n')


def pipe_config(name: str, step: str, warmup: str = "") -> str:
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] },'
            ' { name: "COLD" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            f'ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1 '
            'input_map { key: "IN" value: "X" } '
            'output_map [ { key: "OUT" value: "Y" }, { key: "COLD" value: "COLD" } ] } ] }\n'
            + warmup)


FAILING_PIPE = ('name: "bad_pipe"\nplatform: "ensemble"\nmax_batch_size: 0\n'
                'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                'ensemble_scheduling { step [ { model_name: "failing" model_version: -1 '
                'input_map { key: "INPUT0" value: "X" } '
                'output_map { key: "OUTPUT0" value: "Y" } } ] }\n' + WARMUP)


def echo_config(name: str, memory_bytes: int = 100) -> str:
    return InferdHarness.testing_config(name, "echo", INFERD_MEMORY_BYTES=str(memory_bytes))


def add_python_model(root: Path, name: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(cold_start_config(name), encoding="utf-8")
    (root / name / "1" / "model.py").write_text(COLD_START_MODEL, encoding="utf-8")


def repository(harness: InferdHarness, **others: str) -> Path:
    root: Path = harness.repository(configs={
        "warm_pipe": pipe_config("warm_pipe", "cold_start", WARMUP),
        "cold_pipe": pipe_config("cold_pipe", "cold_start_b"),
        **others,
    })
    add_python_model(root, "cold_start")
    add_python_model(root, "cold_start_b")
    return root


def cold(client: httpclient.InferenceServerClient, ensemble: str) -> int:
    """``COLD`` of one request to ``ensemble``: 1 when the composing model's first execute
    since its initialize served it."""
    tensor = httpclient.InferInput("X", [4], "FP32")
    tensor.set_data_from_numpy(X)
    result = client.infer(ensemble, [tensor])
    np.testing.assert_array_equal(result.as_numpy("Y"), X)
    return int(result.as_numpy("COLD")[0])


def executions(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"]
    return sum(int(version["execution_count"]) for version in stats)


def state(client: httpclient.InferenceServerClient, model: str) -> str:
    index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    return str(index[model].get("state", ""))


def reload_with_a_new_config(client: httpclient.InferenceServerClient, root: Path,
                             model: str, generation: int) -> None:
    """A changed config: the model loads again, in a new python process (a new initialize)."""
    config = root / model / "config.pbtxt"
    config.write_text(cold_start_config(model) + 'parameters { key: "generation" value { '
                      f'string_value: "{generation}" }} }}\n', encoding="utf-8")
    client.load_model(model)


@pytest.fixture(scope="module")
def served(module_inferd: InferdHarness) -> tuple[ServerHandle, Path]:
    root = repository(module_inferd, failing=InferdHarness.testing_config("failing", "fail"),
                      bad_pipe=FAILING_PIPE)
    server = module_inferd.start(root, "--model-control-mode", "explicit",
                                 "--model-load-on-demand")
    return server, root


@pytest.fixture(scope="module")
def client(served: tuple[ServerHandle, Path]) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(served[0].http_url, network_timeout=120)
    yield client
    client.close()


def test_the_first_request_after_the_load_is_warm(
        served: tuple[ServerHandle, Path], client: httpclient.InferenceServerClient) -> None:
    client.load_model("warm_pipe")
    client.load_model("cold_pipe")

    # The warm-up went through the pipeline: the composing model ran each sample...
    assert executions(client, "cold_start") == SAMPLE_COUNT
    assert executions(client, "cold_start_b") == 0
    # ...so the first request finds it warm, where the twin without warm-up pays the start.
    assert cold(client, "warm_pipe") == 0
    assert cold(client, "cold_pipe") == 1
    assert cold(client, "cold_pipe") == 0
    assert "warmed up ensemble warm_pipe version 1 with 1 sample(s)" in served[0].log()


def test_the_first_request_after_a_composing_models_reload_is_warm(
        served: tuple[ServerHandle, Path], client: httpclient.InferenceServerClient) -> None:
    before = executions(client, "cold_start")

    reload_with_a_new_config(client, served[1], "cold_start", 2)
    reload_with_a_new_config(client, served[1], "cold_start_b", 2)

    assert client.is_model_ready("warm_pipe")
    assert executions(client, "cold_start") == before + SAMPLE_COUNT
    assert cold(client, "warm_pipe") == 0
    assert cold(client, "cold_pipe") == 1


def test_the_first_request_that_brings_a_composing_model_back_is_warm(
        client: httpclient.InferenceServerClient) -> None:
    client.unload_model("cold_start")
    assert state(client, "warm_pipe") == "UNAVAILABLE"  # (a ready request would load it)
    before = executions(client, "cold_start")

    assert cold(client, "warm_pipe") == 0  # loads cold_start on demand, then warms the pipe

    # Warmed once: the ensemble served again as it was is not warmed a second time.
    assert executions(client, "cold_start") == before + SAMPLE_COUNT + 1


def test_a_failing_sample_fails_the_ensembles_load_with_tritons_message(
        client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("bad_pipe")

    failed = ("in ensemble 'bad_pipe', step 'failing' failed: testing backend: failure "
              "requested; ")
    reason = "Invalid argument: failed to run warmup sample 'zeros': " + failed
    assert reason in str(refused.value)
    index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert (index["bad_pipe"]["state"], index["bad_pipe"]["reason"]) == ("UNAVAILABLE", reason)
    assert index["warm_pipe"]["state"] == "READY"


def test_an_ensemble_evicted_with_its_composing_model_comes_back_warm(
        inferd: Any) -> None:
    root = repository(inferd, a=echo_config("a"), b=echo_config("b"))
    server: ServerHandle = inferd.start(root, "--model-control-mode", "explicit",
                                        "--model-load-on-demand",
                                        "--model-memory-budget", "cpu=250B")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    ones = httpclient.InferInput("INPUT0", [4], "FP32")
    ones.set_data_from_numpy(X)
    try:
        assert cold(client, "warm_pipe") == 0  # its first request loads it, warm
        client.infer("a", [ones])
        client.infer("b", [ones])  # evicts cold_start, the least recently used, and the pipe
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index["cold_start"]["reason"].startswith("unloaded: evicted to make room for 'b'")
        assert index["warm_pipe"]["state"] == "UNAVAILABLE"

        assert cold(client, "warm_pipe") == 0  # brought back on demand, warmed first
        assert executions(client, "cold_start") == SAMPLE_COUNT + 1
    finally:
        client.close()
