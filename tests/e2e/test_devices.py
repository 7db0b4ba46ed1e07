"""Instance kinds on a machine without GPUs, end to end: a ``KIND_GPU`` model fails its load
with Triton's message and nothing runs on the CPU in its place, while the other models serve;
``KIND_AUTO`` and a config without ``instance_group`` run on the CPU, where a TensorRT engine
cannot."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.kernel.sdk.devices import visible_gpus
from tests.e2e.inferd_harness import InferdHarness

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"

pytestmark = pytest.mark.skipif(bool(visible_gpus()), reason="this machine has a GPU")


def simple_copy(root: Path, name: str, instance_group: str) -> None:
    shutil.copytree(EXAMPLES / "simple", root / name)
    config = (EXAMPLES / "simple" / "config.pbtxt").read_text().replace(
        'name: "simple"', f'name: "{name}"')
    (root / name / "config.pbtxt").write_text(config + instance_group)


def test_a_gpu_model_without_gpus_fails_with_tritons_message_while_the_others_serve(
        inferd: InferdHarness) -> None:
    root = inferd.repository("simple")
    simple_copy(root, "on_gpu", "instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    simple_copy(root, "on_gpu_one", "instance_group [ { kind: KIND_GPU gpus: [1] } ]\n")
    simple_copy(root, "auto", "instance_group [ { kind: KIND_AUTO count: 2 } ]\n")
    engine = root / "engine"
    (engine / "1").mkdir(parents=True)
    (engine / "1" / "model.plan").write_bytes(b"not a real engine")  # no config.pbtxt at all
    server = inferd.start(root, "--exit-on-error=false")
    with server.client() as client:
        index = {entry.name: entry for entry in client.index()}
    assert index["on_gpu"].state == "UNAVAILABLE"
    assert ("instance group on_gpu_0 of model on_gpu has kind KIND_GPU but no GPUs are "
            "available") in index["on_gpu"].reason
    assert ("instance group on_gpu_one_0 of model on_gpu_one specifies invalid or unsupported"
            " gpu id 1. GPUs this server can use are: none") in index["on_gpu_one"].reason
    assert index["auto"].state == index["simple"].state == "READY"
    # A TensorRT engine: KIND_AUTO is the CPU here, and TensorRT refuses it before anything.
    assert index["engine"].state == "UNAVAILABLE"
    assert "is KIND_CPU, but TensorRT engines run on GPUs only" in index["engine"].reason

    with httpclient.InferenceServerClient(server.http_url) as http:
        config = http.get_model_config("auto")
        assert [g["kind"] for g in config["instance_group"]] == ["KIND_CPU"]
        assert http.get_model_config("simple")["instance_group"][0]["kind"] == "KIND_CPU"
        ones = np.ones((1, 16), np.int32)
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
        for tensor in inputs:
            tensor.set_data_from_numpy(ones)
        for model in ("simple", "auto"):
            result = http.infer(model, inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ones * 2)
        assert not http.is_model_ready("on_gpu")
