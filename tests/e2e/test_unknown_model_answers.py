"""Which answer a request for a model that does not serve gets, as Triton's (its model
lifecycle knows a model once a load got past its config): one that never got that far (its
config names another model, its folder is in two repositories) is 404 "Request for unknown
model: '<m>' is not found"; one whose load failed later (``initialize`` raised) or is still
under way (warming up) is 404 "... has no available versions", and naming its version
while it loads is 503 "version 1 is not at ready state". Over HTTP and gRPC, tritonclient,
one EXPLICIT server over two roots."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

WAIT_SECS = 30.0
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}"""
ECHO = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
BROKEN = """class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no weights")
"""
# Its warm-up says it started (a file), then waits for the test to write to a FIFO.
HELD = ECHO + """
    def initialize(self, args):
        import json
        self.parameters = json.loads(args["model_config"])["parameters"]
        self.warmed = False

    def execute(self, requests, _echo=execute):
        if not self.warmed:
            self.warmed = True
            open(self.parameters["started"]["string_value"], "w").close()
            with open(self.parameters["release"]["string_value"]) as fifo:
                fifo.read()
        return _echo(self, requests)
"""
WARMUP = """model_warmup [ {{ name: "held" batch_size: 1
  inputs {{ key: "IN" value: {{ data_type: TYPE_FP32 dims: [ 2 ] zero_data: true }} }} }} ]
parameters {{ key: "started" value {{ string_value: "{started}" }} }}
parameters {{ key: "release" value {{ string_value: "{release}" }} }}
"""


def add(root: Path, folder: str, model: str, config_name: str | None = None,
        extra: str = "") -> None:
    (root / folder / "1").mkdir(parents=True)
    (root / folder / "config.pbtxt").write_text(
        CONFIG.format(name=config_name or folder, extra=extra))
    (root / folder / "1" / "model.py").write_text(model)


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> Any:
    first: Path = module_inferd.repository()
    second: Path = module_inferd.repository()
    folder: Path = module_inferd.folder
    add(first, "misnamed", ECHO, config_name="someone_else")
    add(first, "twice", ECHO)
    shutil.copytree(first / "twice", second / "twice")
    add(first, "broken", BROKEN)
    os.mkfifo(folder / "release")
    add(first, "held", HELD, extra=WARMUP.format(started=folder / "started",
                                                  release=folder / "release"))
    handle = module_inferd.start(first, "--model-repository", str(second),
                                 "--model-control-mode", "explicit")
    handle.folder = folder
    return handle


def clients(server: Any) -> list[tuple[Any, Any, str, str]]:
    """(client module, client, not-found status, unavailable status) per protocol."""
    return [(httpclient, httpclient.InferenceServerClient(server.http_url), "404", "503"),
            (grpcclient, grpcclient.InferenceServerClient(server.grpc_url),
             "StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")]


def infer(module: Any, client: Any, model: str, version: str = "") -> Any:
    tensor = module.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
    return client.infer(model, [tensor], model_version=version)


def refusal(module: Any, client: Any, model: str, version: str = "") -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as refused:
        infer(module, client, model, version)
    return refused.value.status(), refused.value.message()


@pytest.mark.parametrize("model", ["misnamed", "twice"])
def test_a_model_refused_at_its_config_is_not_found(server: Any, model: str) -> None:
    for module, client, not_found, _ in clients(server):
        with pytest.raises(InferenceServerException):
            client.load_model(model)
        assert refusal(module, client, model) == (
            not_found, f"Request for unknown model: '{model}' is not found")


def test_a_model_whose_initialize_failed_has_no_available_versions(server: Any) -> None:
    for module, client, not_found, _ in clients(server):
        with pytest.raises(InferenceServerException, match="no weights"):
            client.load_model("broken")
        assert refusal(module, client, "broken") == (
            not_found, "Request for unknown model: 'broken' has no available versions")


def test_a_model_warming_up_has_no_available_versions(server: Any) -> None:
    loaded: list[BaseException | None] = []

    def load() -> None:
        try:
            httpclient.InferenceServerClient(server.http_url, network_timeout=60).load_model(
                "held")
            loaded.append(None)
        except BaseException as error:  # noqa: BLE001 - the test reports it
            loaded.append(error)

    loading = threading.Thread(target=load)
    loading.start()
    started = server.folder / "started"
    deadline = time.monotonic() + WAIT_SECS
    while not started.exists():  # its warm-up runs, held until the FIFO is written
        assert time.monotonic() < deadline and loading.is_alive(), loaded
        time.sleep(0.02)
    try:
        for module, client, not_found, unavailable in clients(server):
            assert refusal(module, client, "held") == (
                not_found, "Request for unknown model: 'held' has no available versions")
            assert refusal(module, client, "held", "1") == (
                unavailable, "Request for unknown model: 'held' version 1 is not at ready state")
    finally:
        with open(server.folder / "release", "w") as fifo:
            fifo.write("go")
        loading.join(WAIT_SECS)
    assert loaded == [None]
    for module, client, _, _ in clients(server):
        assert infer(module, client, "held").as_numpy("OUT").tolist() == [1.0, 2.0]
