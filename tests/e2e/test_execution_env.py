"""A python model in an environment of its own (``EXECUTION_ENV_PATH``), end to end: the test
builds a venv holding a module the server's environment lacks; the model imports it, reports
which interpreter prefix it runs under, and calls ``simple`` through BLS from that process.
The environment is given as a folder (``$$TRITON_MODEL_DIRECTORY/env``) and as a tarball
(unpacked once into the cache); an environment of another Python version, or a path that is
not one, fails the load with the reason while the other models serve."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.inferd_harness import InferdHarness

PROBE = "inferd_env_probe"
MODEL = f"""\
import sys

import numpy as np
import triton_python_backend_utils as pb_utils
import {PROBE}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(
                model_name="simple",
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")],
                requested_output_names=["OUTPUT0"]).exec()
            if bls.has_error():
                responses.append(pb_utils.InferenceResponse(error=bls.error()))
                continue
            where = np.array([[({PROBE}.VALUE + "|" + sys.prefix).encode()]], dtype=object)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(bls, "OUTPUT0"),
                pb_utils.Tensor("WHERE", where)]))
        return responses
"""
CONFIG = """\
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
input [ {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{path}" }} }}
"""


def make_venv(folder: Path) -> Path:
    """A venv of this Python (its own copy of the interpreter, so it survives a tarball) with
    a module only it has."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--copies", str(folder)],
                   check=True, timeout=120)
    [site_packages] = folder.glob("lib/python*/site-packages")
    (site_packages / f"{PROBE}.py").write_text('VALUE = "from the environment"\n')
    return folder


def add_model(root: Path, name: str, path: str) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    (folder / "config.pbtxt").write_text(CONFIG.format(path=path))
    return folder


def test_python_models_run_in_the_environment_they_name(
        inferd: InferdHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = inferd.repository("simple")
    in_folder = add_model(root, "in_folder", "$$TRITON_MODEL_DIRECTORY/env")
    make_venv(in_folder / "env")
    in_tarball = add_model(root, "in_tarball", "$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    with tarfile.open(in_tarball / "env.tar.gz", "w:gz") as archive:
        archive.add(make_venv(tmp_path / "packed"), arcname=".")
    add_model(root, "nowhere", "$$TRITON_MODEL_DIRECTORY/missing")
    cache = tmp_path / "cache"
    server = inferd.start(root, "--exit-on-error=false", env={"XDG_CACHE_HOME": str(cache)})

    with httpclient.InferenceServerClient(server.http_url) as client:
        ones = np.ones((1, 16), np.int32)
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
        for tensor in inputs:
            tensor.set_data_from_numpy(ones)
        prefixes = {}
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        for name in ("in_folder", "in_tarball"):
            assert index[name]["state"] == "READY", (index[name], server.log()[-4000:])
            result = client.infer(name, inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ones * 2)  # BLS to simple
            value, prefix = result.as_numpy("WHERE")[0][0].decode().split("|")
            assert value == "from the environment"
            prefixes[name] = Path(prefix)
        assert prefixes["in_folder"] == (in_folder / "env").resolve()
        assert prefixes["in_tarball"].parent == cache / "inferd" / "execution-envs"
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert index["nowhere"]["state"] == "UNAVAILABLE"
    assert "EXECUTION_ENV_PATH" in index["nowhere"]["reason"]
    assert "is neither a folder nor a tarball" in index["nowhere"]["reason"]
    assert str(root) not in index["nowhere"]["reason"]  # the model, not the server's folder
    with pytest.raises(ImportError):
        __import__(PROBE)  # the server's own environment never had it
