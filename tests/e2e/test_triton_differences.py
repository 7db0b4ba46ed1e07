"""The last answers a black-box suite run against Triton 2.51 and inferd found different
(issue 37, point 7), and Triton's model-name check on loads (point 6), end to end over raw
HTTP, tritonclient and raw gRPC:

- a model folder in two repository roots is loaded from neither, is no start-up failure,
  has one index entry without a version, and the server stays ready; in POLL mode that entry
  is all the index shows while the served copy unloads (never UNLOADING);
- under strict readiness, a start-up model whose ``initialize`` raises or that has no
  version folder makes ``v2/health/ready`` 400 (gRPC ServerReady false), and its requests
  hear "has no available versions";
- generate's refusals of a key of its nested ``parameters`` object open with Triton's
  "Converting keyword: 'parameters': "; generate_stream sends each response as the model
  sends it;
- an ``int64_param`` sequence id over gRPC is read as Triton reads it, as a uint64;
- a warm-up sample without the model's inputs (naming only one it does not have) fails the
  load with Triton's missing-input words;
- a name Triton refuses to load is refused with Triton's words.
"""

from __future__ import annotations

import http.client
import json
import shutil
import threading
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

from tests.e2e.inferd_harness import (
    EXAMPLE_REPOSITORY,
    InferdHarness,
    ServerHandle,
    copy_models,
    wait_for,
)

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
TWO_ROOTS = "model appears in two or more repositories"
WAIT_SECS = 30.0
CONFIG = """backend: "python"
max_batch_size: 0
input [ {{ name: "{input}" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}"""
ECHO = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
# Decoupled: sends IN, then waits for a file named "release" in its folder before sending
# IN + 1 and the final flag (it gives up waiting after a minute).
GATED = """import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.release = Path(args["model_repository"]) / "release"

    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
            deadline = time.monotonic() + 60
            while not self.release.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value + 1)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
BROKEN = """class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no weights")
"""


def add_python_model(root: Path, name: str, source: str | None, *, input_name: str = "IN",
                     extra: str = "") -> Path:
    """A python model folder under ``root``; without ``source``, no version folder."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG.format(input=input_name, extra=extra),
                                         encoding="utf-8")
    if source is not None:
        (folder / "1").mkdir()
        (folder / "1" / "model.py").write_text(source, encoding="utf-8")
    return folder


def raw(server: ServerHandle, method: str, path: str, body: Any = None
        ) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", method=method,
        data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=WAIT_SECS) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def index(server: ServerHandle) -> dict[str, list[tuple[str, str, str]]]:
    """Each model's index entries as (version, state, reason)."""
    entries: dict[str, list[tuple[str, str, str]]] = {}
    client = httpclient.InferenceServerClient(server.http_url)
    for entry in client.get_model_repository_index():
        entries.setdefault(entry["name"], []).append(
            (entry.get("version", ""), entry.get("state", ""), entry.get("reason", "")))
    return entries


def infer_refusals(server: ServerHandle, model: str) -> list[tuple[str, str]]:
    """(status, message) of an inference of ``model`` over HTTP and over gRPC."""
    refusals = []
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        tensor = module.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], np.int32))
        with pytest.raises(InferenceServerException) as refused:
            module.InferenceServerClient(url).infer(model, [tensor])
        refusals.append((str(refused.value.status()), refused.value.message()))
    return refusals


# ------------------------------------------------------------------ one root too many


@pytest.fixture(scope="module")
def roots(module_inferd: InferdHarness) -> tuple[Path, Path]:
    first, second = module_inferd.folder / "first", module_inferd.folder / "second"
    copy_models(first, EXAMPLE_REPOSITORY, "simple")
    copy_models(first, PYTHON_MODELS, "sequence_echo")
    add_python_model(first, "gated", GATED, extra="model_transaction_policy { decoupled: true }")
    add_python_model(first, "takes_parameters", ECHO, input_name="parameters")
    copy_models(second, EXAMPLE_REPOSITORY, "simple")
    return first, second


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, roots: tuple[Path, Path]) -> ServerHandle:
    """EXPLICIT, every model loaded at start-up, strict readiness and exit on error (the
    defaults): ``simple`` is in both roots."""
    first, second = roots
    return module_inferd.start(first, "--model-repository", str(second),
                               "--model-control-mode", "explicit", "--load-model", "*")


def test_a_model_in_two_roots_is_no_start_up_failure_and_the_server_is_ready(
    server: ServerHandle,
) -> None:
    assert index(server)["simple"] == [("", "UNAVAILABLE", TWO_ROOTS)]
    assert raw(server, "GET", "/v2/health/ready") == (200, b"")
    assert grpcclient.InferenceServerClient(server.grpc_url).is_server_ready()
    assert ("failed to poll model 'simple': not unique across all model repositories"
            in server.log())
    ones = np.ones((1, 16), np.int32)
    for module, url, status in ((httpclient, server.http_url, "404"),
                                (grpcclient, server.grpc_url, "StatusCode.NOT_FOUND")):
        inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(ones)
        with pytest.raises(InferenceServerException) as refused:
            module.InferenceServerClient(url).infer("simple", inputs)
        assert (refused.value.status(), refused.value.message()) == (
            status, "Request for unknown model: 'simple' is not found")


# ------------------------------------------------------------------ model names on load


@pytest.mark.parametrize(("name", "message"), [
    (" ", "Model name cannot be empty. Please enter a valid name to deploy."),
    ("\t\n", "Model name cannot be empty. Please enter a valid name to deploy."),
    ("..", "invalid model name '..', model name must not contain path traversal characters"),
    (" .. ", "invalid model name ' .. ', model name must not contain path traversal "
             "characters"),
    ("a/../b", "invalid model name 'a/../b', model name must not contain path traversal "
               "characters"),
    ("model/", "invalid model name 'model/', model name must not contain path traversal "
               "characters"),
])
def test_a_name_triton_refuses_to_load_is_refused_in_its_words(
    server: ServerHandle, name: str, message: str,
) -> None:
    before = index(server)
    status, body = raw(server, "POST", f"/v2/repository/models/{quote(name, safe='')}/load")
    assert (status, json.loads(body)) == (400, {"error": message})
    with pytest.raises(InferenceServerException) as refused:
        grpcclient.InferenceServerClient(server.grpc_url).load_model(name)
    assert (refused.value.status(), refused.value.message()) == (
        "StatusCode.INVALID_ARGUMENT", message)
    assert index(server) == before


def test_an_empty_name_over_grpc_is_refused_in_tritons_words(server: ServerHandle) -> None:
    with pytest.raises(InferenceServerException) as refused:
        grpcclient.InferenceServerClient(server.grpc_url).load_model("")
    assert (refused.value.status(), refused.value.message()) == (
        "StatusCode.INVALID_ARGUMENT",
        "Model name cannot be empty. Please enter a valid name to deploy.")


def test_names_triton_loads_pass_its_check(server: ServerHandle) -> None:
    """Dots inside a name are no traversal (Triton 2.68); such a model is simply not in the
    repository. An unload is not checked by Triton's rule (inferd's own rule still refuses
    a name that could leave a folder)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for name in ("model..1", "model....1", "a..b"):
        with pytest.raises(InferenceServerException) as refused:
            client.load_model(name)
        assert refused.value.message().startswith(f"failed to load '{name}'")
        assert "traversal" not in refused.value.message()
    status, body = raw(server, "POST", "/v2/repository/models/..%2Fetc/unload")
    assert status == 400 and "is not a valid model name" in json.loads(body)["error"]


# ------------------------------------------------------------------ generate


def test_a_nested_parameter_is_refused_in_tritons_full_words(server: ServerHandle) -> None:
    for document, message in [
        ({"IN": 1, "parameters": {"nested": {"a": 1}}},
         "Converting keyword: 'parameters': parameter 'nested' has invalid type. It should "
         "be either 'int', 'bool', or 'string'."),
        ({"IN": 1, "parameters": {"IN": [1, 2]}},
         "Converting keyword: 'parameters': The schema can not convert input 'IN' to tensor "
         "with proper shape"),
        ({"IN": 1, "parameters": 5},
         "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object "
         "as object"),
        ({"IN": 1, "top": [1]},
         "parameter 'top' has invalid type. It should be either 'int', 'bool', or 'string'."),
    ]:
        for endpoint in ("generate", "generate_stream"):
            status, body = raw(server, "POST", f"/v2/models/gated/{endpoint}", document)
            assert (status, json.loads(body)) == (400, {"error": message}), endpoint


def test_an_input_named_parameters_clashes_only_when_the_request_has_the_key(
    server: ServerHandle,
) -> None:
    status, body = raw(server, "POST", "/v2/models/takes_parameters/generate",
                       {"parameters": 3})
    assert (status, json.loads(body)) == (400, {
        "error": "Keyword 'parameters' for nested schema also given as input tensor name"})
    status, body = raw(server, "POST", "/v2/models/takes_parameters/generate",
                       {"top": 1})  # no 'parameters' key: an input missing
    assert status == 400 and "missing required input(s) ['parameters']" in json.loads(
        body)["error"]


def read_event(response: http.client.HTTPResponse) -> dict[str, Any]:
    """The next Server-Sent Event of ``response`` (a ``data: ...`` line, then a blank one)."""
    line = response.readline()
    assert line.startswith(b"data: "), line
    assert response.readline() == b"\n"
    event: dict[str, Any] = json.loads(line[len(b"data: "):])
    return event


def test_generate_stream_sends_each_response_as_the_model_sends_it(
    server: ServerHandle, roots: tuple[Path, Path],
) -> None:
    """The model holds its second response until the test has read the first: a stream
    that buffered would time the read out (the model waits a minute, the read half that)."""
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_SECS)
    try:
        connection.request("POST", "/v2/models/gated/generate_stream",
                           body=json.dumps({"IN": 7, "id": "g"}))
        response = connection.getresponse()
        assert response.status == 200
        first = read_event(response)
        (roots[0] / "gated" / "release").touch()
        second = read_event(response)
        assert response.read() == b""
    finally:
        connection.close()
        (roots[0] / "gated" / "release").unlink(missing_ok=True)
    # No "parameters" key: the model set none.
    assert first == {"id": "g", "model_name": "gated", "model_version": "1", "OUT": 7}
    assert second == {"id": "g", "model_name": "gated", "model_version": "1", "OUT": 8}


# ------------------------------------------------------------------ sequence ids over gRPC


def sequence_step(server: ServerHandle, sequence_id: int, *, start: bool, end: bool
                  ) -> dict[str, Any]:
    """One raw ModelInfer of sequence_echo with an ``int64_param`` sequence id: its
    CORRID_SEEN (as text) and START_SEEN."""
    request = service_pb2.ModelInferRequest(model_name="sequence_echo")
    request.parameters["sequence_id"].int64_param = sequence_id
    request.parameters["sequence_start"].bool_param = start
    request.parameters["sequence_end"].bool_param = end
    tensor = request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 1])
    tensor.contents.fp32_contents.append(1.0)
    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            request, timeout=WAIT_SECS)
    outputs = {output.name: reply.raw_output_contents[index]
               for index, output in enumerate(reply.outputs)}
    return {"CORRID_SEEN": deserialize_bytes_tensor(outputs["CORRID_SEEN"])[0].decode(),
            "START_SEEN": int(np.frombuffer(outputs["START_SEEN"], np.int32)[0])}


def test_a_negative_int64_sequence_id_is_the_uint64_triton_reads(server: ServerHandle) -> None:
    assert sequence_step(server, -5, start=True, end=False) == {
        "CORRID_SEEN": "18446744073709551611", "START_SEEN": 1}
    # The same sequence goes on, ended by the same id.
    assert sequence_step(server, -5, start=False, end=True) == {
        "CORRID_SEEN": "18446744073709551611", "START_SEEN": 0}


# ------------------------------------------------------------------ warm-up samples


def test_a_warmup_sample_without_the_models_input_fails_the_load_in_tritons_words(
    server: ServerHandle, roots: tuple[Path, Path],
) -> None:
    add_python_model(roots[0], "warm_unknown", ECHO, extra="""model_warmup [ {
  name: "s" batch_size: 1
  inputs { key: "NOPE" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]""")
    reason = ("Invalid argument: [request id: <id_unknown>] expected 1 inputs but got 0 "
              "inputs for model 'warm_unknown'. Got input(s) [], but missing required "
              "input(s) ['IN']. Please provide all required input(s).")
    with pytest.raises(InferenceServerException) as refused:
        httpclient.InferenceServerClient(server.http_url).load_model("warm_unknown")
    assert (refused.value.status(), refused.value.message()) == (
        "400", f"load failed for model 'warm_unknown': version 1 is at UNAVAILABLE state: "
               f"{reason}")
    assert index(server)["warm_unknown"] == [("1", "UNAVAILABLE", reason)]
    # A failed explicit load of a model that never served leaves the server ready (SPEC 6.2).
    assert raw(server, "GET", "/v2/health/ready") == (200, b"")


# ------------------------------------------------------------------ strict readiness


@pytest.mark.parametrize(("model", "source", "reason"), [
    ("broken", BROKEN, "no weights"),
    ("versionless", None,
     "at least one version must be available under the version policy of model "
     "'versionless'"),
])
def test_a_start_up_model_that_cannot_serve_keeps_a_strict_server_unready(
    inferd: InferdHarness, model: str, source: str | None, reason: str,
) -> None:
    root = inferd.folder / "models"
    add_python_model(root, "echo", ECHO)
    add_python_model(root, model, source)
    server = inferd.start(root, "--exit-on-error=false")

    [(_, state, why)] = index(server)[model]
    assert state == "UNAVAILABLE" and reason in why
    assert raw(server, "GET", "/v2/health/ready") == (400, b"")
    assert grpcclient.InferenceServerClient(server.grpc_url).is_server_ready() is False
    assert not httpclient.InferenceServerClient(server.http_url).is_model_ready(model)
    message = f"Request for unknown model: '{model}' has no available versions"
    assert infer_refusals(server, model) == [("404", message),
                                              ("StatusCode.NOT_FOUND", message)]
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([5], np.int32))
    result = httpclient.InferenceServerClient(server.http_url).infer("echo", [tensor])
    assert result.as_numpy("OUT").tolist() == [5]  # the other model serves


# ------------------------------------------------------------------ POLL mode


def test_in_poll_mode_a_model_unloading_for_a_second_root_shows_only_tritons_entry(
    inferd: InferdHarness,
) -> None:
    """``waiter`` holds a request while its folder appears in a second root; the poll then
    unloads it, waiting for that request: meanwhile the index shows Triton's one entry (no
    version, never UNLOADING), the server stays ready, and the held request succeeds."""
    first, second = inferd.folder / "first", inferd.folder / "second"
    copy_models(first, PYTHON_MODELS, "waiter")
    second.mkdir()
    server = inferd.start(first, "--model-repository", str(second),
                          "--model-control-mode", "poll", "--repository-poll-secs", "3600")
    client = httpclient.InferenceServerClient(server.http_url)
    record = first / "waiter" / "record.txt"
    held: dict[str, Any] = {}

    def hold() -> None:
        tensor = httpclient.InferInput("TAG", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], np.int32))
        held["result"] = httpclient.InferenceServerClient(
            server.http_url, network_timeout=WAIT_SECS * 2).infer("waiter", [tensor])

    holder = threading.Thread(target=hold)
    holder.start()
    wait_for(lambda: record.exists() and "1 started" in record.read_text(), "the held request")
    shutil.copytree(first / "waiter", second / "waiter")
    poller = threading.Thread(target=raw, args=(server, "POST", "/v2/repository/poll"))
    poller.start()
    try:
        wait_for(lambda: "model 'waiter' version 1 UNLOADING" in server.log(),
                 "the unload to start", server)
        assert index(server)["waiter"] == [("", "UNAVAILABLE", TWO_ROOTS)]
        assert client.is_server_ready()
    finally:
        (first / "waiter" / "release").touch()
        holder.join(WAIT_SECS * 2)
        poller.join(WAIT_SECS * 2)
    assert held["result"].as_numpy("OUT").tolist() == [[1]]
    assert index(server)["waiter"] == [("", "UNAVAILABLE", TWO_ROOTS)]
    assert client.is_server_ready()


# ------------------------------------------------------------------ trace settings


def test_an_unparsable_trace_setting_body_is_refused_and_changes_nothing(
    server: ServerHandle,
) -> None:
    """Triton answers 500 (its JSON parser's error); a client's mistake is a 400 here."""
    for path in ("/v2/trace/setting", "/v2/models/sequence_echo/trace/setting"):
        before = raw(server, "GET", path)
        for body in (b"{not json", b'{"trace_level": ["TIMESTAMPS"]', b"[1]"):
            request = urllib.request.Request(f"http://{server.http_url}{path}", data=body,
                                             method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=WAIT_SECS)
            assert refused.value.code == 400, body
            assert json.loads(refused.value.read())["error"], body
        assert raw(server, "GET", path) == before
        assert before[0] == 200
