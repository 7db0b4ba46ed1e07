"""What a load changes, through tritonclient http and grpc (issue 12, points 6 and 8): a
version-policy change (in config.pbtxt or a config override) or a new version folder brings
up only the new versions, keeping the others' instances (a python model logs each
``initialize()`` call to a file outside the repository); any other config change loads every
version again; a new version that fails to initialize leaves the old one serving; a model
folder that appears in a second repository root keeps its loaded version serving while the
index says why it cannot load (in POLL mode, as Triton, it is unloaded until it is unique);
config fields inferd ignores show in the index. One EXPLICIT
server over two roots serves the module (the tests build on each other, in file order), and
one POLL server the POLL tests."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import InferenceServerException

WAIT_SECS = 30.0
TWO_ROOTS = "model appears in two or more repositories"

COUNTED_PY = '''\
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        with open(parameters["initialize_log"]["string_value"], "a") as log:
            log.write(args["model_version"] + "\\n")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''

FAILING_PY = '''\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no weights in this version")
'''


def counted_config(name: str, log: Path, policy: str, extra: str = "") -> str:
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
            f'parameters {{ key: "initialize_log" value {{ string_value: "{log}" }} }}\n'
            f"version_policy {{ {policy} }}\n{extra}")


def add_counted(root: Path, name: str, log: Path, policy: str, *versions: int) -> Path:
    folder = root / name
    for version in versions:
        (folder / str(version)).mkdir(parents=True)
        (folder / str(version) / "model.py").write_text(COUNTED_PY)
    (folder / "config.pbtxt").write_text(counted_config(name, log, policy))
    return folder


def initialized(log: Path) -> list[str]:
    """The versions whose initialize() ran, in order, one line per instance created."""
    return log.read_text().split() if log.exists() else []


def versions(http: Any, name: str) -> list[tuple[str, str, str]]:
    return [(e.get("version", ""), e.get("state", ""), e.get("reason", ""))
            for e in http.get_model_repository_index() if e["name"] == name]


def echo(module: Any, url: str, name: str, version: str = "") -> list[float]:
    client = module.InferenceServerClient(url)
    data = np.array([1.5, -2.0], dtype=np.float32)
    inputs = [module.InferInput("IN", [2], "FP32")]
    inputs[0].set_data_from_numpy(data)
    result = client.infer(name, inputs, model_version=version)
    got: list[float] = result.as_numpy("OUT").tolist()
    return got


def refused(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call()
    return error.value


@pytest.fixture(scope="module")
def roots(module_inferd: Any) -> tuple[Path, Path]:
    first: Path = module_inferd.repository()
    second: Path = module_inferd.repository()
    return first, second


@pytest.fixture(scope="module")
def log(module_inferd: Any) -> Path:
    path: Path = module_inferd.folder / "explicit-initialize.log"
    return path


@pytest.fixture(scope="module")
def server(module_inferd: Any, roots: tuple[Path, Path], log: Path) -> Any:
    first, second = roots
    add_counted(first, "counted", log, "latest { num_versions: 1 }", 1, 2)
    add_counted(first, "twin", log.with_name("twin.log"), "latest { num_versions: 1 }", 1)
    tagged = add_counted(first, "tagged", log.with_name("tagged.log"),
                         "latest { num_versions: 1 }", 1)
    config = tagged / "config.pbtxt"
    config.write_text(config.read_text() + 'metric_tags { key: "team" value: "vision" }\n')
    return module_inferd.start(first, "--model-repository", str(second),
                               "--model-control-mode", "explicit")


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server: Any) -> Iterator[Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


# ------------------------------------------------------------------ version policy (EXPLICIT)


def test_a_version_policy_change_loads_only_the_new_versions(
    http: Any, server: Any, roots: tuple[Path, Path], log: Path
) -> None:
    http.load_model("counted")
    assert versions(http, "counted") == [("2", "READY", "")]
    assert initialized(log) == ["2"]
    config = roots[0] / "counted" / "config.pbtxt"
    config.write_text(counted_config("counted", log, "all { }"))

    http.load_model("counted")

    assert versions(http, "counted") == [("1", "READY", ""), ("2", "READY", "")]
    assert initialized(log) == ["2", "1"], "version 2 was initialized again"
    assert echo(httpclient, server.http_url, "counted", "1") == [1.5, -2.0]
    assert echo(grpcclient, server.grpc_url, "counted", "2") == [1.5, -2.0]
    # The kept version serves with the new policy (GET config says so), as in Triton.
    assert http.get_model_config("counted", "2")["version_policy"] == {"all": {}}


def test_a_config_override_changing_only_the_policy_keeps_the_versions(
    http: Any, grpc: Any, log: Path
) -> None:
    text = counted_config("counted", log, "specific { versions: [ 2 ] }")
    override = json_format.MessageToJson(text_format.Parse(text, ModelConfig()))

    grpc.load_model("counted", config=override)

    assert versions(http, "counted") == [("1", "UNAVAILABLE", "unloaded"), ("2", "READY", "")]
    assert initialized(log) == ["2", "1"], "an unchanged version was initialized again"
    assert http.get_model_config("counted")["version_policy"] == {
        "specific": {"versions": [2]}}
    grpc.load_model("counted")  # config.pbtxt again: version 1 is new, 2 is kept
    assert versions(http, "counted") == [("1", "READY", ""), ("2", "READY", "")]
    assert initialized(log) == ["2", "1", "1"]


def test_any_other_config_change_loads_every_version_again(
    http: Any, grpc: Any, roots: tuple[Path, Path], log: Path
) -> None:
    config = roots[0] / "counted" / "config.pbtxt"
    config.write_text(counted_config(
        "counted", log, "all { }", 'parameters { key: "tag" value { string_value: "b" } }\n'))

    http.load_model("counted")

    assert versions(http, "counted") == [("1", "READY", ""), ("2", "READY", "")]
    assert sorted(initialized(log)[3:]) == ["1", "2"]
    assert http.get_model_config("counted")["parameters"]["tag"] == {"string_value": "b"}
    before = initialized(log)
    grpc.load_model("counted")  # nothing changed: nothing is loaded again (as Triton)
    assert initialized(log) == before


# ------------------------------------------------------------------ a failing new version


def test_a_new_version_that_fails_to_initialize_keeps_the_old_one_serving(
    http: Any, grpc: Any, server: Any, roots: tuple[Path, Path], log: Path
) -> None:
    folder = roots[0] / "counted"
    (folder / "config.pbtxt").write_text(
        counted_config("counted", log, "latest { num_versions: 1 }"))
    http.load_model("counted")
    assert versions(http, "counted") == [("1", "UNAVAILABLE", "unloaded"), ("2", "READY", "")]
    before = initialized(log)
    (folder / "3").mkdir()
    (folder / "3" / "model.py").write_text(FAILING_PY)

    error = refused(lambda: http.load_model("counted"))
    assert error.status() == "400"
    opening = "load failed for model 'counted': version 3 is at UNAVAILABLE state: "
    assert error.message().startswith(opening), error.message()
    assert "no weights in this version" in error.message()
    error = refused(lambda: grpc.load_model("counted"))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message().startswith(opening), error.message()

    [one, two, three] = versions(http, "counted")
    assert one == ("1", "UNAVAILABLE", "unloaded")
    assert two == ("2", "READY", "")  # as Triton's: the failure is version 3's
    assert three[:2] == ("3", "UNAVAILABLE") and "no weights in this version" in three[2]
    assert http.is_model_ready("counted") and grpc.is_model_ready("counted", "2")
    assert http.is_server_ready() and grpc.is_server_ready()
    assert echo(httpclient, server.http_url, "counted") == [1.5, -2.0]
    assert echo(grpcclient, server.grpc_url, "counted") == [1.5, -2.0]
    assert initialized(log) == before, "the version serving was initialized again"

    shutil.rmtree(folder / "3")
    http.load_model("counted")
    assert versions(http, "counted")[1] == ("2", "READY", "")


# ------------------------------------------------------------------ two repository roots


def test_a_model_that_appears_in_a_second_root_keeps_serving(
    http: Any, grpc: Any, server: Any, roots: tuple[Path, Path], log: Path
) -> None:
    first, second = roots
    log = log.with_name("twin.log")
    http.load_model("twin")
    assert versions(http, "twin") == [("1", "READY", "")]
    shutil.copytree(first / "twin", second / "twin")

    assert versions(http, "twin") == [("1", "READY", TWO_ROOTS)]
    [entry] = [e for e in grpc.get_model_repository_index(as_json=True)["models"]
               if e["name"] == "twin"]
    assert (entry["state"], entry["reason"]) == ("READY", TWO_ROOTS)
    error = refused(lambda: http.load_model("twin"))
    assert (error.status(), error.message()) == ("400", f"failed to load 'twin': {TWO_ROOTS}")
    error = refused(lambda: grpc.load_model("twin"))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message() == f"failed to load 'twin': {TWO_ROOTS}"
    assert versions(http, "twin") == [("1", "READY", TWO_ROOTS)]
    assert echo(httpclient, server.http_url, "twin") == [1.5, -2.0]
    assert http.is_server_ready()

    shutil.rmtree(second / "twin")
    assert versions(http, "twin") == [("1", "READY", "")]
    before = initialized(log)
    grpc.load_model("twin")
    assert initialized(log) == before  # the folder is as it was: nothing to load again

    # A model never loaded: one UNAVAILABLE entry, as Triton's, until the copy goes.
    add_counted(first, "stray", log, "latest { num_versions: 1 }", 1)
    shutil.copytree(first / "stray", second / "stray")
    assert versions(http, "stray") == [("", "UNAVAILABLE", TWO_ROOTS)]
    error = refused(lambda: http.load_model("stray"))
    assert error.message() == f"failed to load 'stray': {TWO_ROOTS}"
    assert versions(http, "stray") == [("", "UNAVAILABLE", TWO_ROOTS)]
    shutil.rmtree(second / "stray")
    assert versions(http, "stray") == [("", "", "")]


# ------------------------------------------------------------------ index warnings


def test_config_fields_inferd_ignores_are_warnings_in_the_index(http: Any, grpc: Any) -> None:
    http.load_model("tagged")
    warning = "model 'tagged': metric_tags is ignored: inferd's metrics carry no custom tags"
    [entry] = [e for e in http.get_model_repository_index() if e["name"] == "tagged"]
    assert entry == {"name": "tagged", "version": "1", "state": "READY", "warnings": [warning]}
    [entry] = [e for e in grpc.get_model_repository_index(as_json=True)["models"]
               if e["name"] == "tagged"]
    assert (entry["state"], entry["reason"]) == ("READY", warning)
    counted = [e for e in http.get_model_repository_index() if e["name"] == "counted"]
    assert counted and not any("warnings" in e for e in counted)


# ------------------------------------------------------------------ POLL mode


@pytest.fixture(scope="module")
def poll_roots(module_inferd: Any) -> tuple[Path, Path]:
    first: Path = module_inferd.repository()
    second: Path = module_inferd.repository()
    return first, second


@pytest.fixture(scope="module")
def poll_log(module_inferd: Any) -> Path:
    path: Path = module_inferd.folder / "poll-initialize.log"
    return path


@pytest.fixture(scope="module")
def poll_server(module_inferd: Any, poll_roots: tuple[Path, Path], poll_log: Path) -> Any:
    first, second = poll_roots
    add_counted(first, "polled", poll_log, "all { }", 1)
    # Polls come from the tests (POST v2/repository/poll): the period never matters.
    return module_inferd.start(first, "--model-repository", str(second),
                               "--model-control-mode", "poll", "--repository-poll-secs", "3600")


def poll(server: Any) -> None:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/poll",
                                     data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=WAIT_SECS) as response:
        assert response.status == 200


def test_a_new_version_folder_in_poll_mode_initializes_only_it(
    poll_server: Any, poll_roots: tuple[Path, Path], poll_log: Path
) -> None:
    http = httpclient.InferenceServerClient(poll_server.http_url)
    assert versions(http, "polled") == [("1", "READY", "")]
    assert initialized(poll_log) == ["1"]
    folder = poll_roots[0] / "polled"
    shutil.copytree(folder / "1", folder / "2")

    poll(poll_server)

    assert versions(http, "polled") == [("1", "READY", ""), ("2", "READY", "")]
    assert initialized(poll_log) == ["1", "2"], "version 1 was initialized again"
    assert echo(grpcclient, poll_server.grpc_url, "polled", "2") == [1.5, -2.0]
    poll(poll_server)  # nothing changed since: nothing happens
    assert initialized(poll_log) == ["1", "2"]


def test_in_poll_mode_a_model_in_a_second_root_is_unloaded_until_it_is_unique(
    poll_server: Any, poll_roots: tuple[Path, Path], poll_log: Path
) -> None:
    """Triton's duplicate rule: the model unloads, the index has its one UNAVAILABLE entry
    with Triton's reason, its requests hear "has no available versions"; once the second
    copy goes, the next polls load it again."""
    first, second = poll_roots
    http = httpclient.InferenceServerClient(poll_server.http_url)
    grpc = grpcclient.InferenceServerClient(poll_server.grpc_url)
    before = initialized(poll_log)
    shutil.copytree(first / "polled", second / "polled")
    poll(poll_server)

    assert versions(http, "polled") == [("", "UNAVAILABLE", TWO_ROOTS)]
    assert not http.is_model_ready("polled") and not grpc.is_model_ready("polled")
    for module, url, status in ((httpclient, poll_server.http_url, "404"),
                                (grpcclient, poll_server.grpc_url, "StatusCode.NOT_FOUND")):
        error = refused(lambda: echo(module, url, "polled"))  # noqa: B023 - called at once
        assert (error.status(), error.message()) == (
            status, "Request for unknown model: 'polled' has no available versions")
    assert ("failed to poll model 'polled': not unique across all model repositories"
            in poll_server.log())
    assert http.is_server_live()

    shutil.rmtree(second / "polled")
    poll(poll_server)
    poll(poll_server)
    assert versions(http, "polled") == [("1", "READY", ""), ("2", "READY", "")]
    assert sorted(initialized(poll_log)[len(before):]) == ["1", "2"]
    assert echo(httpclient, poll_server.http_url, "polled") == [1.5, -2.0]


def test_in_poll_mode_a_new_version_that_fails_leaves_the_others_serving(
    poll_server: Any, poll_roots: tuple[Path, Path], poll_log: Path
) -> None:
    http = httpclient.InferenceServerClient(poll_server.http_url)
    folder = poll_roots[0] / "polled"
    before = initialized(poll_log)
    (folder / "3").mkdir()
    (folder / "3" / "model.py").write_text(FAILING_PY)

    poll(poll_server)

    [one, two, three] = versions(http, "polled")
    assert (one, two) == (("1", "READY", ""), ("2", "READY", ""))  # as Triton's
    assert three[:2] == ("3", "UNAVAILABLE") and "no weights in this version" in three[2]
    assert echo(grpcclient, poll_server.grpc_url, "polled") == [1.5, -2.0]  # version 2
    assert http.is_server_ready()
    assert initialized(poll_log) == before

    shutil.rmtree(folder / "3")  # the fix: the others were never loaded again
    poll(poll_server)
    assert versions(http, "polled")[:2] == [("1", "READY", ""), ("2", "READY", "")]
    assert initialized(poll_log) == before
