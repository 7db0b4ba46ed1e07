"""POLL mode (SPEC 2.2) against one real server polling every second: new, changed, broken,
fixed and removed model folders and version folders, each acted on only once the folder has
held still for a poll period; plus the explicit ``POST v2/repository/poll``."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.client import Client
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY


POLL_SECS = 1.0
WAIT_SECS = 20.0


@pytest.fixture(scope="module")
def repository(module_inferd: Any) -> Path:
    return module_inferd.repository("simple")


@pytest.fixture(scope="module")
def server(module_inferd: Any, repository: Path) -> Any:
    return module_inferd.start(
        repository, "--model-control-mode", "poll",
        "--repository-poll-secs", str(POLL_SECS), "--exit-on-error=false",
    )


@pytest.fixture
def client(server: Any) -> Iterator[Client]:
    with server.client() as client:
        yield client


def states(client: Client, name: str) -> list[tuple[str, str, str]]:
    return [(e.version, e.state, e.reason) for e in client.index() if e.name == name]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def add_simple(repository: Path, name: str) -> Path:
    folder = repository / name
    shutil.copytree(EXAMPLE_REPOSITORY / "simple", folder)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "simple"', f'name: "{name}"'))
    return folder


def sums(client: Client, name: str, version: str = "") -> tuple[list[int], str]:
    row = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer(name, {"INPUT0": row, "INPUT1": row}, version=version)
    return result.as_numpy("OUTPUT0")[0].tolist(), result.version


def test_start_up_loads_the_repository_and_load_unload_are_refused(server: Any) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as refused:
        http.load_model("simple")
    assert refused.value.status() == "503"
    assert "explicit model load / unload is not allowed if polling is enabled" in str(refused.value)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        grpc.unload_model("simple")
    assert refused.value.status() == "StatusCode.UNAVAILABLE"


def test_a_model_copied_in_slowly_is_loaded_once_complete(client: Client, repository: Path) -> None:
    source, target = EXAMPLE_REPOSITORY / "simple", repository / "slowcopy"
    target.mkdir()
    seen_states: set[str] = set()
    # One file at a time, each gap shorter than a poll period, the whole copy several periods.
    steps = [
        lambda: (target / "config.pbtxt").write_text(
            (source / "config.pbtxt").read_text().replace('"simple"', '"slowcopy"')),
        lambda: (target / "1").mkdir(),
        lambda: (target / "1" / "model.onnx").write_bytes(
            (source / "1" / "model.onnx").read_bytes()[:40]),  # a torn write
        lambda: (target / "1" / "model.onnx").write_bytes(
            (source / "1" / "model.onnx").read_bytes()),
    ]
    for step in steps:
        step()
        for _ in range(6):
            seen_states.update(state for _, state, _ in states(client, "slowcopy"))
            time.sleep(0.1)
    assert seen_states <= {""}, f"a half-copied model was acted on: {seen_states}"
    wait_for(lambda: states(client, "slowcopy") == [("1", "READY", "")], "slowcopy READY")
    assert sums(client, "slowcopy")[0] == [2 * i for i in range(16)]


def test_a_bad_edit_keeps_the_old_version_serving_and_a_fix_is_picked_up(
    client: Client, repository: Path
) -> None:
    folder = add_simple(repository, "edited")
    wait_for(lambda: states(client, "edited") == [("1", "READY", "")], "edited READY")
    config = folder / "config.pbtxt"
    good = config.read_text()
    config.write_text(good.replace("max_batch_size: 8", "max_bach_size: 8"))
    wait_for(lambda: bool(states(client, "edited")[0][2]), "the error in the index")
    [(version, state, reason)] = states(client, "edited")
    assert (version, state) == ("1", "READY")
    assert 'edited/config.pbtxt:3:1: no field named "max_bach_size"' in reason
    assert sums(client, "edited")[0] == [2 * i for i in range(16)]
    config.write_text(good)
    wait_for(lambda: states(client, "edited") == [("1", "READY", "")], "the fix picked up")


def test_version_folders_appear_and_disappear(client: Client, repository: Path) -> None:
    folder = add_simple(repository, "versioned")
    wait_for(lambda: states(client, "versioned") == [("1", "READY", "")], "version 1")
    shutil.copytree(folder / "1", folder / "2")
    wait_for(
        lambda: states(client, "versioned") == [("1", "UNAVAILABLE", "unloaded"), ("2", "READY", "")],
        "version 2 replacing version 1 (latest 1)",
    )
    assert sums(client, "versioned")[1] == "2"
    shutil.rmtree(folder / "2")
    wait_for(lambda: ("1", "READY", "") in states(client, "versioned"), "version 1 back")
    assert sums(client, "versioned")[1] == "1"


def test_a_removed_model_is_unloaded(client: Client, repository: Path) -> None:
    folder = add_simple(repository, "doomed")
    wait_for(lambda: states(client, "doomed") == [("1", "READY", "")], "doomed READY")
    shutil.rmtree(folder)
    wait_for(lambda: states(client, "doomed") == [], "doomed gone from the index")
    with pytest.raises(Exception, match="Request for unknown model: 'doomed'"):
        sums(client, "doomed")


def test_post_repository_poll_acts_at_once(server: Any, module_inferd: Any, tmp_path: Path) -> None:
    # A second server whose period is far too long to matter: only the explicit poll acts.
    repository = module_inferd.repository("simple")
    slow = module_inferd.start(repository, "--model-control-mode", "poll",
                               "--repository-poll-secs", "3600")
    add_simple(repository, "pushed")
    started = time.monotonic()
    request = urllib.request.Request(f"http://{slow.http_url}/v2/repository/poll", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=WAIT_SECS) as response:
        assert response.status == 200
    assert time.monotonic() - started < 5
    with slow.client() as client:
        assert states(client, "pushed") == [("1", "READY", "")]


def test_post_repository_poll_outside_poll_mode_is_refused(module_inferd: Any) -> None:
    explicit = module_inferd.start(module_inferd.repository(), "--model-control-mode", "explicit")
    request = urllib.request.Request(f"http://{explicit.http_url}/v2/repository/poll", data=b"",
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=WAIT_SECS)
    assert refused.value.code == 503
    assert "only available with --model-control-mode=poll" in json.loads(refused.value.read())["error"]
