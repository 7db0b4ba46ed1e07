"""Model warm-up (``model_warmup``) end to end: samples run on every instance before the
version is READY (``batch_size`` requests of batch 1, ``count`` times), from zero, random
and file data; they are not counted in the statistics; a sample that fails fails the load
with Triton's message while the other models serve."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"


def simple_variant(root: Path, name: str, warmup: str) -> None:
    shutil.copytree(root / "simple", root / name)
    config = (root / name / "config.pbtxt").read_text(encoding="utf-8")
    (root / name / "config.pbtxt").write_text(
        config.replace('name: "simple"', f'name: "{name}"') + warmup, encoding="utf-8")


FROM_FILE = """
model_warmup [ {
  name: "from a file"
  batch_size: 2
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "ramp" } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
} ]
"""
WRONG_SHAPE = """
model_warmup [ {
  name: "wrong shape"
  batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } }
} ]
"""


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    root: Path = module_inferd.repository("simple")
    module_inferd.copy_models(root, PYTHON_MODELS, "warm_counter")
    simple_variant(root, "warm_file", FROM_FILE)
    (root / "warm_file" / "warmup").mkdir()
    (root / "warm_file" / "warmup" / "ramp").write_bytes(np.arange(16, dtype=np.int32).tobytes())
    simple_variant(root, "warm_wrong", WRONG_SHAPE)
    server = module_inferd.start(root, "--exit-on-error=false")
    server.root = root
    return server


def test_every_instance_runs_its_samples_before_the_model_is_ready(server: ServerHandle) -> None:
    lines = (server.root / "warm_counter" / "executions.log").read_text().splitlines()
    # 2 instances (2 processes) x count 2, each a call of batch_size 3 requests of batch 1.
    calls = [line.split(" ", 1) for line in lines]
    assert [call for _, call in calls] == ["3 [(1, 2), (1, 2), (1, 2)]"] * 4
    processes = [pid for pid, _ in calls]
    assert len(set(processes)) == 2 and all(processes.count(p) == 2 for p in processes)
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics("warm_counter")["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (0, 0)  # as Triton
    assert "warmed up warm_counter version 1 with 1 sample(s)" in server.log()


def test_file_and_zero_data_warm_a_model_that_then_serves(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_model_ready("warm_file")
    ones = np.ones((1, 16), np.int32)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(ones)
    np.testing.assert_array_equal(client.infer("warm_file", inputs).as_numpy("OUTPUT0"), ones * 2)


def test_a_failing_sample_fails_the_load_with_tritons_message(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert index["warm_wrong"]["state"] == "UNAVAILABLE"
    assert index["warm_wrong"]["reason"].startswith(
        "Invalid argument: failed to run warmup sample 'wrong shape': ")
    assert index["simple"]["state"] == "READY"
