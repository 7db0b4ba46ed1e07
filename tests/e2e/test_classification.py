"""The classification extension end to end: a requested output with ``class_count`` comes back
as its top classes, ``"<value>:<index>[:<label>]"`` (labels from the output's
``label_filename``), per batch element for a batching model, over HTTP, gRPC and gRPC
streaming, for a model and for an ensemble (the ensemble's own labels); Triton's refusals; a
missing label file fails the load while the other models serve."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.errors import InferdError
from tests.e2e.inferd_harness import InferdHarness, ServerHandle


LABELS = ["zero", "one", "", "three"]  # index 2 has an empty label: none is shown

ECHO = """
name: "echo_labels"
backend: "inferd_testing"
max_batch_size: 4
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" }]
"""
ECHO_UNBATCHED = """
name: "echo_ints"
backend: "inferd_testing"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT64 dims: [ 5 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 5 ] }]
"""
ECHO_BYTES = """
name: "echo_bytes"
backend: "inferd_testing"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_STRING dims: [ 2 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [ 2 ] }]
"""
ENSEMBLE = """
name: "ensemble_labels"
platform: "ensemble"
max_batch_size: 4
input [{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "names.txt" }]
ensemble_scheduling { step [ {
  model_name: "echo_labels" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" }
} ] }
"""
MISSING_LABELS = """
name: "missing_labels"
backend: "inferd_testing"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "nowhere.txt" }]
"""

SCORES = np.array([[0.1, 0.7, 0.5, 0.2], [0.9, 0.05, 0.3, 0.6]], dtype=np.float32)
# std::to_string's six decimals of each float32 value, as Triton prints them.
TOP2 = [[f"{np.float32(0.7).item():f}:1:one", f"{np.float32(0.5).item():f}:2"],
        [f"{np.float32(0.9).item():f}:0:zero", f"{np.float32(0.6).item():f}:3:three"]]


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    configs = (ECHO, ECHO_UNBATCHED, ECHO_BYTES, ENSEMBLE, MISSING_LABELS)
    root: Path = module_inferd.repository(
        configs={config.split('"')[1]: config for config in configs})
    (root / "echo_labels" / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (root / "ensemble_labels" / "names.txt").write_text("a\nb\nc\nd\n")
    return module_inferd.start(root, "--exit-on-error=false")


def texts(array: np.ndarray) -> list[Any]:
    """BYTES elements as text (JSON outputs arrive as str, binary ones as bytes)."""
    return np.vectorize(lambda item: item if isinstance(item, str) else item.decode())(
        array).tolist()


def test_http_returns_the_top_classes_of_each_batch_element_with_their_labels(
        server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    given = httpclient.InferInput("INPUT0", list(SCORES.shape), "FP32")
    given.set_data_from_numpy(SCORES)
    for binary in (False, True):
        wanted = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=2)
        result = client.infer("echo_labels", [given], outputs=[wanted])
        output = result.get_output("OUTPUT0")
        assert (output["datatype"], output["shape"]) == ("BYTES", [2, 2])
        assert texts(result.as_numpy("OUTPUT0")) == TOP2


def test_grpc_and_its_stream_return_the_same_classes(server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    given = grpcclient.InferInput("INPUT0", list(SCORES.shape), "FP32")
    given.set_data_from_numpy(SCORES)
    wanted = grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)
    result = client.infer("echo_labels", [given], outputs=[wanted])
    assert texts(result.as_numpy("OUTPUT0")) == TOP2

    answers: list[Any] = []
    client.start_stream(callback=lambda result, error: answers.append(error or result))
    try:
        client.async_stream_infer("echo_labels", [given], outputs=[wanted])
        client.stop_stream()  # waits for the answer
    finally:
        client.close()
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
    assert texts(answers[0].as_numpy("OUTPUT0")) == TOP2


def test_an_unbatched_integer_output_without_labels_gives_value_and_index(
        server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    values = np.array([3, 9, -2, 9, 4], dtype=np.int64)
    given = httpclient.InferInput("INPUT0", [5], "INT64")
    given.set_data_from_numpy(values)
    # More classes than elements: every element, highest first, ties in index order.
    wanted = httpclient.InferRequestedOutput("OUTPUT0", class_count=9)
    result = client.infer("echo_ints", [given], outputs=[wanted])
    assert result.get_output("OUTPUT0")["shape"] == [5]
    assert texts(result.as_numpy("OUTPUT0")) == ["9:1", "9:3", "4:4", "3:0", "-2:2"]
    # Other outputs, and this one asked without class_count, keep their values.
    plain = client.infer("echo_ints", [given])
    assert plain.as_numpy("OUTPUT0").tolist() == values.tolist()


def test_an_ensemble_classifies_with_its_own_labels(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    given = httpclient.InferInput("IN", list(SCORES.shape), "FP32")
    given.set_data_from_numpy(SCORES)
    wanted = httpclient.InferRequestedOutput("OUT", class_count=1)
    result = client.infer("ensemble_labels", [given], outputs=[wanted])
    assert texts(result.as_numpy("OUT")) == [[f"{np.float32(0.7).item():f}:1:b"],
                                             [f"{np.float32(0.9).item():f}:0:a"]]


def raw_http(server: ServerHandle, model: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/{model}/infer", json.dumps(body).encode(),
        {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())["error"]


def test_refusals_match_triton(server: ServerHandle) -> None:
    strings = {"name": "INPUT0", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}
    status, error = raw_http(server, "echo_bytes", {
        "inputs": [strings], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 1}}]})
    assert (status, error) == (
        400, "class result not available for output due to unsupported type 'BYTES'")

    scores = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    status, error = raw_http(server, "echo_labels", {
        "inputs": [scores], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -1}}]})
    assert status == 400
    assert error == ("'classification' of requested output 'OUTPUT0' must be a non-negative "
                     "integer, got -1")
    status, error = raw_http(server, "echo_labels", {
        "inputs": [scores], "outputs": [{"name": "OUTPUT0", "parameters": {
            "classification": 1, "shared_memory_region": "r", "shared_memory_byte_size": 64}}]})
    assert (status, error) == (
        400, "Output can't set both 'shared_memory_region' and 'classification'")

    client = grpcclient.InferenceServerClient(server.grpc_url)
    given = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    given.set_data_from_numpy(SCORES[:1])
    with pytest.raises(InferenceServerException) as refused:
        client.infer("echo_labels", [given],
                     outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=-1)])
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == (
        "invalid value for 'classification' parameter, expected >= 0")


def test_a_missing_label_file_fails_the_load_naming_it(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    entries = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert entries["missing_labels"]["state"] == "UNAVAILABLE"
    assert ("unable to read label_filename of output 'OUTPUT0' 'nowhere.txt'"
            in entries["missing_labels"]["reason"]), entries["missing_labels"]
    assert entries["echo_labels"]["state"] == "READY"


def test_server_metadata_lists_the_extension(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert "classification" in client.get_server_metadata()["extensions"]


def test_the_native_client_asks_for_classes_too(server: ServerHandle) -> None:
    with server.client() as client:
        result = client.infer("echo_labels", {"INPUT0": SCORES},
                              classification={"OUTPUT0": 2})
        assert texts(result.as_numpy("OUTPUT0")) == TOP2
        with pytest.raises(InferdError, match="unexpected inference output 'NOPE'"):
            client.infer("echo_labels", {"INPUT0": SCORES}, classification={"NOPE": 1})
