"""Model warm-up (``model_warmup``) end to end: samples run on every instance before the
version is READY (``batch_size`` requests of batch 1, ``count`` times), from zero, random
and file data; they count in the version's statistics as Triton counts them; a sample that
fails fails the load with Triton's message (a batch above ``max_batch_size``, a python
model's exception with its "At:" lines, a missing ``input_data_file``) while the other models
serve; while a version warms up, its requests hear Triton's "has no available versions"."""

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
TOO_BIG = """
model_warmup [ {
  name: "too big"
  batch_size: 9
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
} ]
"""
MISSING_FILE = """
model_warmup [ {
  name: "missing file"
  batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "absent" } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
} ]
"""
RAISING_WARMUP = """
model_warmup [ {
  name: "raising"
  batch_size: 2
  inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } }
} ]
"""
RAISING_MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self.check(request)
        return []

    def check(self, request):
        raise ValueError("no warm-up for me")
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
    simple_variant(root, "warm_too_big", TOO_BIG)
    simple_variant(root, "warm_missing", MISSING_FILE)
    (root / "warm_missing" / "warmup").mkdir()
    raising = root / "warm_raising"
    (raising / "1").mkdir(parents=True)
    config = (PYTHON_MODELS / "raiser" / "config.pbtxt").read_text(encoding="utf-8")
    (raising / "config.pbtxt").write_text(
        config.replace('name: "raiser"', 'name: "warm_raising"') + RAISING_WARMUP)
    (raising / "1" / "model.py").write_text(RAISING_MODEL)
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
    # As Triton counts them: 2 instances x count 2 executions of 3 requests of batch 1.
    stats = client.get_inference_statistics("warm_counter")["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (12, 4)
    assert stats["inference_stats"]["success"]["count"] == 12
    assert stats["inference_stats"]["fail"]["count"] == 0
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
        (3, 4)]
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


def reasons(server: ServerHandle) -> dict[str, str]:
    client = httpclient.InferenceServerClient(server.http_url)
    return {entry["name"]: entry.get("reason", "") for entry in client.get_model_repository_index()}


def test_a_sample_above_max_batch_size_fails_the_load(server: ServerHandle) -> None:
    """Each of the 9 requests gets what Triton's backends answer a batch too big."""
    too_big = "batch size 9 for 'warm_too_big_0_0', max allowed is 8; "
    assert reasons(server)["warm_too_big"] == (
        "Invalid argument: failed to run warmup sample 'too big': " + too_big * 9)


def test_a_python_models_exception_is_the_reason_as_tritons_python_backend_gives_it(
        server: ServerHandle) -> None:
    failed = ("Failed to process the request(s) for model 'warm_raising_0_0', message: "
              "ValueError: no warm-up for me\n\nAt:\n"
              "  warm_raising/1/model.py(11): check\n"
              "  warm_raising/1/model.py(7): execute\n; ")
    assert reasons(server)["warm_raising"] == (
        "Invalid argument: failed to run warmup sample 'raising': " + failed * 2)


def test_a_missing_input_data_file_is_named_in_tritons_words(server: ServerHandle) -> None:
    assert reasons(server)["warm_missing"] == (
        "failed to open text file for read warm_missing/warmup/absent: No such file or "
        "directory (the input_data_file of warmup input 'INPUT0')")
