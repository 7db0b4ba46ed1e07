"""Single versions and version labels (inferd extensions, issue 37 points 1 and 2), through
tritonclient http and grpc, raw HTTP for the extensions tritonclient cannot send, and the
``inferd`` CLI: a load or unload with ``versions`` touches exactly those versions; bad values
are refused with 400 / INVALID_ARGUMENT and change nothing; ``version_labels.toml`` routes
requests that name no version to ``stable`` and a share of them to ``canary``; moving a label
under continuous traffic loses no request, and ends with the traffic on the new version and
the version left unloaded. One EXPLICIT server serves the module (the tests build on each
other, in file order)."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc as grpc_module
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.e2e.inferd_harness import INFERD, wait_for

# A python model whose initialize() waits while the file its parameter names with the
# version appended (``<hold>.<version>``) exists: the test holds a version's load open.
HELD_PY = '''\
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        held = parameters["hold"]["string_value"] + "." + args["model_version"]
        deadline = time.monotonic() + 120
        while os.path.exists(held) and time.monotonic() < deadline:
            time.sleep(0.02)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''


FAILING_PY = '''\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this version cannot start")
'''


def add_model(root: Path, name: str, hold: Path, versions: tuple[int, ...],
              labels: str = "", policy: str = "latest { num_versions: 1 }") -> Path:
    folder = root / name
    for version in versions:
        (folder / str(version)).mkdir(parents=True)
        (folder / str(version) / "model.py").write_text(HELD_PY)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
        f'parameters {{ key: "hold" value {{ string_value: "{hold}" }} }}\n'
        f"version_policy {{ {policy} }}\n")
    if labels:
        (folder / "version_labels.toml").write_text(labels)
    return folder


@pytest.fixture(scope="module")
def hold(module_inferd: Any) -> Path:
    path: Path = module_inferd.folder / "hold"
    return path


@pytest.fixture(scope="module")
def server(module_inferd: Any, hold: Path) -> Any:
    root = module_inferd.repository()
    add_model(root, "echo", hold, (1, 2, 3))
    add_model(root, "rolled", hold, (1, 2, 3), "[labels]\nstable = 1\n")
    add_model(root, "split", hold, (1, 2),
              "canary_percent = 10\n\n[labels]\nstable = 1\ncanary = 2\n")
    failing = add_model(root, "failing", hold, (1, 2), policy="specific { versions: [ 1 ] }")
    (failing / "2" / "model.py").write_text(FAILING_PY)
    return module_inferd.start(root, "--model-control-mode", "explicit")


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    yield client
    client.close()


def states(http: Any, name: str) -> list[tuple[str, str]]:
    return [(e.get("version", ""), e.get("state", ""))
            for e in http.get_model_repository_index() if e["name"] == name]


def entries(http: Any, name: str) -> list[dict[str, str]]:
    """The model's index entries, reasons included."""
    return [e for e in http.get_model_repository_index() if e["name"] == name]


def post(server: Any, path: str, body: Any) -> tuple[int, Any]:
    """A raw POST (tritonclient sends no parameter it does not know): status and JSON."""
    request = urllib.request.Request(f"http://{server.http_url}/{path}",
                                     data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def infer(client: Any, name: str, version: str = "") -> str:
    """The version that answered a request for ``name`` (``version``: "" names none)."""
    inputs = [httpclient.InferInput("IN", [2], "FP32")]
    inputs[0].set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    result = client.infer(name, inputs, model_version=version)
    assert result.as_numpy("OUT").tolist() == [1.0, 2.0]
    answered: str = result.get_response()["model_version"]
    return answered


def cli(server: Any, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERD, *arguments, "--url",
                           f"http://{server.http_url}"], capture_output=True, text=True,
                          timeout=180, check=False)


def stub(server: Any) -> Any:
    return service_pb2_grpc.GRPCInferenceServiceStub(
        grpc_module.insecure_channel(server.grpc_url))


# ------------------------------------------------------------------ single versions


def test_a_load_with_versions_loads_exactly_those(http: Any, server: Any) -> None:
    http.load_model("echo")  # Triton's request: the policy's version
    assert states(http, "echo") == [("3", "READY")]

    assert post(server, "v2/repository/models/echo/load", {"parameters": {"versions": [1]}}) \
        == (200, None)
    assert states(http, "echo") == [("1", "READY"), ("3", "READY")]
    assert infer(http, "echo", "1") == "1"
    assert infer(http, "echo") == "3"  # no version: the highest, as in Triton

    request = service_pb2.RepositoryModelLoadRequest(model_name="echo")
    request.parameters["versions"].string_param = "[2]"
    stub(server).RepositoryModelLoad(request, timeout=120)
    assert states(http, "echo") == [("1", "READY"), ("2", "READY"), ("3", "READY")]


def test_an_unload_with_versions_leaves_the_others_serving(http: Any, server: Any) -> None:
    done = cli(server, "unload", "echo", "--version", "1")
    assert done.returncode == 0, done.stderr
    assert "unloaded echo version 1" in done.stdout
    assert states(http, "echo") == [("1", "UNAVAILABLE"), ("2", "READY"), ("3", "READY")]

    request = service_pb2.RepositoryModelUnloadRequest(model_name="echo")
    request.parameters["versions"].int64_param = 2
    stub(server).RepositoryModelUnload(request, timeout=120)
    assert states(http, "echo") == [("1", "UNAVAILABLE"), ("2", "UNAVAILABLE"),
                                    ("3", "READY")]
    assert infer(http, "echo") == "3"

    done = cli(server, "load", "echo", "--version", "2")
    assert done.returncode == 0, done.stderr
    assert states(http, "echo") == [("1", "UNAVAILABLE"), ("2", "READY"), ("3", "READY")]


@pytest.mark.parametrize(("path", "parameters", "expected"), [
    ("load", {"versions": "2"}, "must be a list of 1 to 64 version numbers, not a string"),
    ("load", {"versions": []}, "must be a list of 1 to 64 version numbers"),
    ("load", {"versions": [0]}, "must hold version numbers (integers >= 1), not 0"),
    ("load", {"versions": [1.5]}, "must hold version numbers (integers >= 1), not 1.5"),
    ("load", {"versions": [2, 2]}, "names a version twice"),
    ("load", {"versions": [9]}, "model 'echo' has no version folder for version 9 "
                                "(version folders: 1, 2, 3)"),
    ("unload", {"versions": [1]}, "failed to unload 'echo': version 1 is not loaded "
                                  "(its state: UNAVAILABLE)"),
    ("unload", {"versions": [7]}, "failed to unload 'echo': version 7 is not loaded"),
    ("unload", {"versions": [2, 1]}, "version 1 is not loaded"),
])
def test_bad_versions_are_refused_and_change_nothing(
    http: Any, server: Any, path: str, parameters: dict[str, Any], expected: str
) -> None:
    before = entries(http, "echo")
    status, body = post(server, f"v2/repository/models/echo/{path}",
                        {"parameters": parameters})
    assert status == 400
    assert expected in body["error"]
    assert entries(http, "echo") == before


def test_bad_versions_over_grpc_are_invalid_argument(http: Any, server: Any) -> None:
    before = states(http, "echo")
    request = service_pb2.RepositoryModelLoadRequest(model_name="echo")
    request.parameters["versions"].string_param = "[2,"
    with pytest.raises(grpc_module.RpcError) as error:
        stub(server).RepositoryModelLoad(request, timeout=60)
    assert error.value.code() == grpc_module.StatusCode.INVALID_ARGUMENT
    assert "must be a JSON list of version numbers" in (error.value.details() or "")
    request.parameters["versions"].bool_param = True
    with pytest.raises(grpc_module.RpcError) as error:
        stub(server).RepositoryModelLoad(request, timeout=60)
    assert error.value.code() == grpc_module.StatusCode.INVALID_ARGUMENT
    assert states(http, "echo") == before


def test_a_load_without_versions_is_tritons(http: Any) -> None:
    """The whole model again, as the policy says: the versions loaded singly go."""
    http.load_model("echo")
    assert states(http, "echo") == [("1", "UNAVAILABLE"), ("2", "UNAVAILABLE"),
                                    ("3", "READY")]


# ------------------------------------------------------------------ version labels


def test_the_labels_file_routes_requests_naming_no_version(http: Any, server: Any) -> None:
    http.load_model("rolled")
    # The policy's version 3 and the labelled version 1, which takes the unversioned requests.
    assert states(http, "rolled") == [("1", "READY"), ("3", "READY")]
    assert {infer(http, "rolled") for _ in range(5)} == {"1"}
    assert infer(http, "rolled", "3") == "3"  # a version named is served as named
    assert http.is_model_ready("rolled")
    status, body = post(server, "v2/repository/models/rolled/labels", {})
    assert (status, body) == (200, {"model": "rolled", "labels": {"stable": 1},
                                    "canary_percent": 0.0})


def test_a_labelled_version_is_not_unloaded_singly(http: Any, server: Any) -> None:
    status, body = post(server, "v2/repository/models/rolled/unload",
                        {"parameters": {"versions": [1]}})
    assert status == 400
    assert "version 1 is labelled 'stable'; move the label first" in body["error"]
    assert states(http, "rolled") == [("1", "READY"), ("3", "READY")]


@pytest.mark.parametrize(("body", "expected"), [
    ({"labels": {"stable": 9}}, "model 'rolled' has no version folder for version 9"),
    ({"labels": {"Stable!": 2}}, "label name 'Stable!' must be"),
    ({"labels": {"stable": "2"}}, "label 'stable' must name a version number"),
    ({"canary_percent": 140}, "'canary_percent' must be a number from 0 to 100, not 140"),
    ({"labels": [1]}, "'labels'"),
    ({"stable": 2}, "stable"),
])
def test_bad_label_moves_are_refused_and_change_nothing(
    http: Any, server: Any, body: dict[str, Any], expected: str
) -> None:
    before = entries(http, "rolled")
    status, answer = post(server, "v2/repository/models/rolled/labels", body)
    assert status == 400
    assert expected in answer["error"]
    assert entries(http, "rolled") == before
    assert states(http, "rolled") == [("1", "READY"), ("3", "READY")]
    assert infer(http, "rolled") == "1"
    assert post(server, "v2/repository/models/rolled/labels", {})[1]["labels"] == \
        {"stable": 1}


def test_moving_a_label_under_load_fails_no_request(
    http: Any, server: Any, hold: Path
) -> None:
    """Four clients send requests naming no version without a pause while ``stable`` moves
    from 1 to 2: version 2's load is held open until the clients have been answered by
    version 1 meanwhile; once the move returns, every request goes to version 2, none
    failed, and version 1 (which neither a label nor the policy keeps) is unloaded."""
    answered: list[list[str]] = [[] for _ in range(4)]
    failures: list[BaseException] = []
    stop = threading.Event()

    def client(seen: list[str]) -> None:
        connection = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        try:
            while not stop.is_set():
                try:
                    seen.append(infer(connection, "rolled"))
                except Exception as error:  # noqa: BLE001 - counted, the test says which
                    failures.append(error)
        finally:
            connection.close()

    held = Path(f"{hold}.2")
    held.write_text("")
    threads = [threading.Thread(target=client, args=(seen,)) for seen in answered]
    for thread in threads:
        thread.start()
    moving = subprocess.Popen(
        [*INFERD, "label", "rolled", "stable=2", "--url",
         f"http://{server.http_url}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_for(lambda: ("2", "LOADING") in states(http, "rolled"), "version 2 loading")
        counts = sum(len(seen) for seen in answered)
        wait_for(lambda: sum(len(seen) for seen in answered) > counts + 20,
                 "requests answered while version 2 loads")
        assert all(seen[-1] == "1" for seen in answered if seen)
        held.unlink()
        out, err = moving.communicate(timeout=120)
        assert moving.returncode == 0, err
        after = [len(seen) for seen in answered]
        wait_for(lambda: all(len(seen) > n + 5 for seen, n in zip(answered, after,
                                                                     strict=True)),
                 "requests after the move")
    finally:
        stop.set()
        held.unlink(missing_ok=True)
        for thread in threads:
            thread.join(timeout=60)
        if moving.poll() is None:
            moving.kill()
    assert failures == []
    for seen, n in zip(answered, after, strict=True):
        assert set(seen[n:]) == {"2"}, "a request after the move went to the old version"
        assert set(seen) == {"1", "2"}
    assert "stable" in out and " 2 " in out
    assert states(http, "rolled") == [("1", "UNAVAILABLE"), ("2", "READY"), ("3", "READY")]
    stats = {s["version"]: s["inference_stats"]["success"]["count"]
             for s in http.get_inference_statistics("rolled")["model_stats"]}
    assert set(stats) == {"2", "3"} and stats["2"] > 0  # version 1's went with it


def test_the_canary_gets_its_share_per_request(http: Any, server: Any) -> None:
    http.load_model("split")
    assert states(http, "split") == [("1", "READY"), ("2", "READY")]
    answered = [infer(http, "split") for _ in range(100)]
    assert answered.count("2") == 10 and answered.count("1") == 90
    stats = {s["version"]: s["inference_stats"]["success"]["count"]
             for s in http.get_inference_statistics("split")["model_stats"]}
    assert stats == {"1": 90, "2": 10}

    done = cli(server, "label", "split", "--canary-percent", "50")
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines()[1:]] == [
        ["canary", "2", "50", "%"], ["stable", "1", "50", "%"]]
    answered = [infer(http, "split") for _ in range(20)]
    assert answered.count("2") == 10
    # Removing the canary keeps its version (the policy selects it) and ends its share.
    status, body = post(server, "v2/repository/models/split/labels",
                        {"labels": {"canary": None}})
    assert (status, body["labels"]) == (200, {"stable": 1})
    assert {infer(http, "split") for _ in range(10)} == {"1"}
    assert states(http, "split") == [("1", "READY"), ("2", "READY")]


def test_a_label_whose_target_fails_to_load_moves_nothing(http: Any, server: Any) -> None:
    http.load_model("failing")
    assert infer(http, "failing") == "1"
    status, body = post(server, "v2/repository/models/failing/labels",
                        {"labels": {"stable": 2}})
    assert status == 400
    assert "version 2 is at UNAVAILABLE state" in body["error"]
    assert "this version cannot start" in body["error"]
    assert post(server, "v2/repository/models/failing/labels", {})[1]["labels"] == {}
    assert {infer(http, "failing") for _ in range(3)} == {"1"}
    assert states(http, "failing") == [("1", "READY"), ("2", "UNAVAILABLE")]


def test_a_reload_keeps_the_labels_moved_at_run_time(http: Any) -> None:
    """The file still says stable = 1; it did not change, so the move to 2 holds."""
    http.load_model("rolled")
    assert states(http, "rolled") == [("1", "UNAVAILABLE"), ("2", "READY"), ("3", "READY")]
    assert infer(http, "rolled") == "2"


def test_inferd_check_points_at_a_bad_labels_file(module_inferd: Any, hold: Path) -> None:
    root = module_inferd.repository()
    add_model(root, "bad", hold, (1, 2), "[labels]\nstable = 1\ncanary = 5\n")
    done = subprocess.run([*INFERD, "check", str(root)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert (f"{root / 'bad' / 'version_labels.toml'}:3:1: label 'canary' names version 5, "
            "which has no version folder (version folders: 1, 2)") in done.stdout + done.stderr


def test_labels_of_a_model_not_loaded(server: Any) -> None:
    assert post(server, "v2/repository/models/nothing/labels", {}) == (
        200, {"model": "nothing", "labels": {}, "canary_percent": 0.0})
    status, body = post(server, "v2/repository/models/nothing/labels",
                        {"labels": {"stable": 1}})
    assert status == 400
    assert body["error"] == ("model 'nothing' is not loaded: load it before moving its "
                             "version labels")
