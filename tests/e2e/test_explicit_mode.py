"""EXPLICIT mode end to end: nothing loads at start-up; load, unload and index through the
API; a bad config or a failing backend fails only its own load, with the real cause, and the
server and the other models keep serving. One server serves the whole module; the first
test reads the index before any load, so it must stay first."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.client import Client
from inferd.protocols.errors import InvalidArgument, NotFound
from inferd.protocols.messages import IndexEntry
from tests.e2e.inferd_harness import wait_for, wait_started

# The typo is on line 2, column 1.
BAD_CONFIG = 'name: "misspelt"\nmax_bach_size: 8\nplatform: "onnxruntime_onnx"\n'
BAD_CONFIG_ERROR = 'misspelt/config.pbtxt:2:1: no field named "max_bach_size"'
BACKEND_FAILURE = "the weights are missing"


@pytest.fixture(scope="module")
def repository(module_inferd: Any) -> Path:
    configs = {
        "misspelt": BAD_CONFIG,
        "flaky": module_inferd.testing_config("flaky", "fail_load", message=BACKEND_FAILURE),
    }
    root: Path = module_inferd.repository("simple", "identity_fp32", configs=configs)
    return root


@pytest.fixture(scope="module")
def client(module_inferd: Any, repository: Path) -> Iterator[Client]:
    server = module_inferd.start(repository, "--model-control-mode", "explicit")
    with server.client(timeout=30) as client:
        yield client


def index_entry(client: Client, name: str) -> list[IndexEntry]:
    """The index rows of one model (a model has one per known version)."""
    return [entry for entry in client.index() if entry.name == name]


def assert_simple_serves(client: Client) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.full((1, 16), 5, dtype=np.int32)
    result = client.infer("simple", {"INPUT0": first, "INPUT1": second})
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(5, 21))]
    assert result.as_numpy("OUTPUT1").tolist() == [list(range(-5, 11))]


def test_nothing_is_loaded_at_start_up(client: Client) -> None:
    assert client.index() == [
        IndexEntry("flaky"),
        IndexEntry("identity_fp32"),
        IndexEntry("misspelt"),
        IndexEntry("simple"),
    ]
    assert client.index(ready_only=True) == []
    assert client.is_model_ready("simple") is False
    assert client.is_live() is True


def test_load_infer_unload(client: Client) -> None:
    client.load("simple")
    assert index_entry(client, "simple") == [IndexEntry("simple", "1", "READY", "")]
    assert client.is_model_ready("simple") is True
    assert_simple_serves(client)

    client.unload("simple")

    assert index_entry(client, "simple") == [IndexEntry("simple", "1", "UNAVAILABLE", "unloaded")]
    assert client.is_model_ready("simple") is False
    with pytest.raises(NotFound) as error:
        assert_simple_serves(client)
    assert error.value.message == "Request for unknown model: 'simple' has no available versions"
    client.unload("simple")  # unloading an unloaded model succeeds
    client.unload("never-heard-of-it")  # as does unloading an unknown one
    assert index_entry(client, "never-heard-of-it") == []


def test_a_bad_config_fails_its_load_with_line_and_column(client: Client) -> None:
    client.load("simple")

    with pytest.raises(InvalidArgument) as error:
        client.load("misspelt")

    # Triton's opening (clients match on it), then the real cause; the index has the cause.
    assert error.value.message == f"failed to load 'misspelt': {BAD_CONFIG_ERROR}"
    assert index_entry(client, "misspelt") == [
        IndexEntry("misspelt", "", "UNAVAILABLE", BAD_CONFIG_ERROR)
    ]
    assert client.is_live() is True
    assert client.is_model_ready("simple") is True
    assert_simple_serves(client)


def test_a_backend_load_failure_carries_the_backend_message(client: Client) -> None:
    with pytest.raises(InvalidArgument) as error:
        client.load("flaky")

    assert error.value.message == (
        f"load failed for model 'flaky': version 1 is at UNAVAILABLE state: {BACKEND_FAILURE}"
    )
    assert index_entry(client, "flaky") == [
        IndexEntry("flaky", "1", "UNAVAILABLE", BACKEND_FAILURE)
    ]
    assert client.is_live() is True
    client.load("simple")
    assert_simple_serves(client)


def test_index_ready_only_lists_only_ready_models(client: Client) -> None:
    client.load("simple")
    client.load("identity_fp32")
    client.unload("identity_fp32")

    assert client.index(ready_only=True) == [IndexEntry("simple", "1", "READY", "")]


def test_a_fixed_config_loads_on_the_next_load(
    client: Client, repository: Path, module_inferd: Any
) -> None:
    folder = repository / "fixable"
    (folder / "1").mkdir(parents=True)
    good_config = module_inferd.testing_config("fixable", "echo")
    (folder / "config.pbtxt").write_text(
        good_config.replace("max_batch_size: 0", "max_batch_size: -1")
    )
    with pytest.raises(InvalidArgument) as error:
        client.load("fixable")
    invalid = "model 'fixable': 'max_batch_size' must be >= 0, got -1"
    assert error.value.message == f"failed to load 'fixable': {invalid}"
    assert index_entry(client, "fixable") == [IndexEntry("fixable", "", "UNAVAILABLE", invalid)]

    (folder / "config.pbtxt").write_text(good_config)
    client.load("fixable")

    assert index_entry(client, "fixable") == [IndexEntry("fixable", "1", "READY", "")]
    result = client.infer("fixable", {"INPUT0": np.array([1, 2, 3, 4], np.float32)})
    assert result.as_numpy("OUTPUT0").tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_failed_reload_keeps_the_old_version_serving(client: Client, repository: Path) -> None:
    client.load("simple")
    config_path = repository / "simple" / "config.pbtxt"
    good_config = config_path.read_text()
    config_path.write_text(BAD_CONFIG.replace("misspelt", "simple"))
    try:
        with pytest.raises(InvalidArgument) as error:
            client.load("simple")
    finally:
        config_path.write_text(good_config)

    assert error.value.message == "failed to load 'simple': " + BAD_CONFIG_ERROR.replace(
        "misspelt", "simple")
    # Still READY, with what the reload failed on next to it (SPEC 2.2, better than Triton).
    assert index_entry(client, "simple") == [
        IndexEntry("simple", "1", "READY", BAD_CONFIG_ERROR.replace("misspelt", "simple"))]
    assert_simple_serves(client)
    client.load("simple")  # the good config again: the reason goes away
    assert index_entry(client, "simple") == [IndexEntry("simple", "1", "READY", "")]


def test_loading_an_unknown_model_is_not_found(client: Client) -> None:
    with pytest.raises(NotFound) as error:
        client.load("not-in-the-repository")
    assert error.value.message == ("failed to load 'not-in-the-repository': model "
                                   "'not-in-the-repository' is not in the model repository")


def test_a_failed_load_of_an_unknown_model_leaves_no_index_entry(client: Client) -> None:
    with pytest.raises(NotFound):
        client.load("typo-in-the-name")
    assert index_entry(client, "typo-in-the-name") == []


def test_an_unload_answers_while_a_request_is_in_flight_and_the_index_says_unloading(
        inferd: Any) -> None:
    """As Triton's: the unload returns once the model takes no new request, its version
    UNLOADING in the index (over HTTP and gRPC) until the request in flight has its answer;
    then UNAVAILABLE, "unloaded". A new request meanwhile hears "has no available
    versions". The request is held in the model (the testing backend's release_file)."""
    started, release = inferd.folder / "slowpoke.started", inferd.folder / "slowpoke.release"
    slow = inferd.testing_config("slowpoke", "slow", delay_ms="30000", started_file=str(started),
                                 release_file=str(release))
    server = inferd.start(inferd.repository(configs={"slowpoke": slow}),
                          "--model-control-mode", "explicit", "--load-model", "slowpoke")
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answered: list[Any] = []

    def infer() -> None:
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        answered.append(client.infer("slowpoke", [tensor]).as_numpy("OUTPUT0").tolist())

    def states() -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
        over_http = [(e["version"], e["state"], e.get("reason", ""))
                     for e in http.get_model_repository_index() if e["name"] == "slowpoke"]
        over_grpc = [(e.version, e.state) for e in grpc.get_model_repository_index().models
                     if e.name == "slowpoke"]
        return over_http, over_grpc

    running = threading.Thread(target=infer)
    running.start()
    wait_started(started, 1, server)  # the request is in the model, held there

    http.unload_model("slowpoke")

    assert running.is_alive(), "the unload waited for the request in flight"
    assert states() == ([("1", "UNLOADING", "")], [("1", "UNLOADING")])
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    with pytest.raises(InferenceServerException) as refused:
        grpc.infer("slowpoke", [tensor])
    assert (refused.value.status(), refused.value.message()) == (
        "StatusCode.NOT_FOUND", "Request for unknown model: 'slowpoke' has no available versions")
    release.touch()
    running.join(30)
    assert answered == [[1.0, 1.0, 1.0, 1.0]]
    wait_for(lambda: states()[0] == [("1", "UNAVAILABLE", "unloaded")],
             "the index to say UNAVAILABLE, unloaded", server)
