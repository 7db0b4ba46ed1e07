"""Python instances forked after initialize (``INFERD_FORK_AFTER_INITIALIZE``), end to end.

``shared_weights`` (tests/plugins/python_models) holds a 200 MB float64 weight made in
``initialize`` and has ``count: 4``: instance 0 runs ``initialize``, instances 1-3 are forked
from it and take their names in ``after_fork``. The tests show that every instance answers
under its own name and process, that the four processes share the weight (their proportional
set size, PSS from /proc/<pid>/smaps_rollup, stays under a stated bound that four copies break
by far), that a fork's BLS calls reach the server (``forked_bls``) and a fork sees its
requests cancelled (``waiter``), that a dead fork brings the model back through a restart,
that the forks end with their model, and that what cannot fork is refused at load with a
clear error.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, wait_for

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
MODEL = "shared_weights"
INSTANCES = 4
WEIGHT_BYTES = 200e6
# Four private copies would hold at least 4x the weight. Shared, the four processes hold one
# copy plus an executor's own memory (about 60 MB of interpreter and imports): 2x the weight
# leaves that room twice over and is still half of what four copies take.
PSS_BOUND_BYTES = 2 * WEIGHT_BYTES


def pids(folder: Path) -> dict[str, int]:
    """Each instance's pid, by its name (it writes ``pids/<pid>`` holding its name)."""
    found = {}
    for entry in (folder / "pids").glob("*"):
        name = entry.read_text()
        if name:
            found[name] = int(entry.name)
    return found


def pss_bytes(pid: int) -> int:
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    kilobytes = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    assert kilobytes is not None, text
    return int(kilobytes.group(1)) * 1024


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def ask_all(server: ServerHandle) -> set[tuple[str, int]]:
    """(instance, pid) of 8 requests sent at once."""
    seen: set[tuple[str, int]] = set()

    def one() -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            value = httpclient.InferInput("IN", [1], "INT32")
            value.set_data_from_numpy(np.array([2], np.int32))
            result = client.infer(MODEL, [value])
            assert result.as_numpy("WEIGHT").tolist() == [3.0]
            seen.add((result.as_numpy("INSTANCE")[0].decode(),
                      int(result.as_numpy("PID")[0])))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return seen


@pytest.fixture
def repository(inferd: InferdHarness) -> Path:
    return inferd.copy_models(inferd.repository(), PYTHON_MODELS, MODEL)


def test_forked_instances_serve_under_their_own_names_and_share_the_weight(
        inferd: InferdHarness, repository: Path) -> None:
    server = inferd.start(repository)
    folder = repository / MODEL
    written = wait_for(lambda: len(found := pids(folder)) == INSTANCES and found,
                       "every instance's pid", server)
    names = sorted(written)
    assert names == [f"{MODEL}_0_{index}" for index in range(INSTANCES)]
    first = written[f"{MODEL}_0_0"]
    forks = [written[name] for name in names[1:]]
    assert len(set(forks)) == INSTANCES - 1 and first not in forks
    assert all(parent_of(pid) == first for pid in forks)  # forked from instance 0's process

    answered: set[tuple[str, int]] = set()
    wait_for(lambda: (answered.update(ask_all(server)) or len(answered) == INSTANCES),
             "an answer from every instance", server)
    assert answered == set(written.items())

    total = sum(pss_bytes(pid) for pid in written.values())
    assert total < PSS_BOUND_BYTES, f"PSS of the {INSTANCES} instances: {total / 1e6:.0f} MB"


def test_a_forks_bls_calls_reach_the_server(inferd: InferdHarness) -> None:
    """``forked_bls`` has two instances, the second a fork; two requests held at once (each
    waits for "go" once started) run one on each, and each calls ``reporter`` through BLS."""
    root = inferd.copy_models(inferd.repository(), PYTHON_MODELS, "forked_bls", "reporter")
    server = inferd.start(root)
    folder = root / "forked_bls"
    answers: list[tuple[str, int]] = []

    def ask(value: int) -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            tensor = httpclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([value], np.int32))
            result = client.infer("forked_bls", [tensor])
            answers.append((result.as_numpy("INSTANCE")[0].decode(),
                            int(result.as_numpy("OUT")[0])))

    threads = [threading.Thread(target=ask, args=(value,)) for value in (10, 20)]
    for thread in threads:
        thread.start()
    started = folder / "started.txt"
    wait_for(lambda: started.exists() and len(started.read_text().split()) == 2,
             "both requests started", server)
    assert sorted(started.read_text().split()) == ["forked_bls_0_0", "forked_bls_0_1"]
    (folder / "go").touch()
    for thread in threads:
        thread.join(60)
    assert sorted(name for name, _ in answers) == ["forked_bls_0_0", "forked_bls_0_1"]
    assert sorted(out for _, out in answers) == [20, 40]  # reporter doubled each


def test_a_fork_sees_its_request_cancelled(inferd: InferdHarness) -> None:
    """``waiter`` (tests/plugins/python_models) holds odd tags until ``is_cancelled()``; with
    two forked instances, two held requests run one on each, and both see their cancel."""
    root = inferd.copy_models(inferd.repository(), PYTHON_MODELS, "waiter")
    config = root / "waiter" / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", "count: 2") + (
        'parameters { key: "INFERD_FORK_AFTER_INITIALIZE" value { string_value: "true" } }\n'))
    server = inferd.start(root)
    record = root / "waiter" / "record.txt"

    def lines() -> list[str]:
        return record.read_text().splitlines() if record.exists() else []

    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        calls = []
        for tag in (1, 3):
            tensor = grpcclient.InferInput("TAG", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[tag]], np.int32))
            calls.append(client.async_infer("waiter", [tensor], lambda result, error: None))
        wait_for(lambda: {"1 started", "3 started"} <= set(lines()), "both held", server)
        for call in calls:
            call.cancel()
        wait_for(lambda: {"1 cancelled", "3 cancelled"} <= set(lines()),
                 "both cancellations seen", server)


def test_a_dead_fork_brings_its_model_back_through_a_restart(
        inferd: InferdHarness, repository: Path) -> None:
    server = inferd.start(repository)
    folder = repository / MODEL
    before = wait_for(lambda: len(found := pids(folder)) == INSTANCES and found,
                      "every instance's pid", server)
    for entry in (folder / "pids").glob("*"):
        entry.unlink()
    os.kill(before[f"{MODEL}_0_2"], signal.SIGKILL)
    # The executor process ends with its fork; inferd starts it again and reloads the model,
    # whose instances write their new pids.
    after = wait_for(lambda: len(found := pids(folder)) == INSTANCES and found,
                     "new instance pids", server)
    assert after.keys() == before.keys()
    assert not set(after.values()) & set(before.values())
    with httpclient.InferenceServerClient(server.http_url) as client:
        wait_for(lambda: client.is_model_ready(MODEL), "the model ready again", server)
    assert {pid for _, pid in ask_all(server)} <= set(after.values())


def test_the_forks_end_when_their_model_is_unloaded(
        inferd: InferdHarness, repository: Path) -> None:
    server = inferd.start(repository, "--model-control-mode=explicit", f"--load-model={MODEL}")
    written = wait_for(lambda: len(found := pids(repository / MODEL)) == INSTANCES and found,
                       "every instance's pid", server)
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.unload_model(MODEL)
    for pid in written.values():
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), f"pid {pid} gone", server)


@pytest.mark.parametrize(("change", "message"), [
    ('model_transaction_policy { decoupled: true }',
     "model 'shared_weights': parameter INFERD_FORK_AFTER_INITIALIZE is not available for "
     "decoupled models: their response senders cannot cross a fork"),
    ('parameters { key: "INFERD_FORK_AFTER_INITIALIZE" value { string_value: "maybe" } }',
     "model 'shared_weights': parameter INFERD_FORK_AFTER_INITIALIZE must be \"true\" or "
     "\"false\", got 'maybe'"),
])
def test_what_cannot_fork_is_refused_at_load(
        inferd: InferdHarness, repository: Path, change: str, message: str) -> None:
    config = repository / MODEL / "config.pbtxt"
    text = config.read_text()
    if "maybe" in change:
        text = text.replace('string_value: "true"', 'string_value: "maybe"')
    else:
        text += change + "\n"
    config.write_text(text)
    server = inferd.start(repository, "--model-control-mode=explicit")
    with httpclient.InferenceServerClient(server.http_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model(MODEL)
        assert message in refused.value.message()
        assert not client.is_model_ready(MODEL)


def test_a_server_without_executor_processes_refuses_forks(
        inferd: InferdHarness, repository: Path) -> None:
    server = inferd.start(repository, "--model-control-mode=explicit", "--executor-inline")
    with httpclient.InferenceServerClient(server.http_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model(MODEL)
    assert ("parameter INFERD_FORK_AFTER_INITIALIZE needs executor processes; the server runs "
            "with --executor-inline") in refused.value.message()
