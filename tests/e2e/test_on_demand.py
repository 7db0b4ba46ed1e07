"""``--model-load-on-demand`` and ``--model-memory-budget`` end to end (inferd extensions):
a request for a model of the repository that is not loaded loads it; concurrent first
requests share one load; a failing load answers every waiter and is not tried again at once;
an explicit unload holds until a request loads the model again; an ensemble brings its
composing models; a budget unloads the least recently used idle model to make room, never a
pinned or a busy one nor a composing model of an ensemble in use (an idle ensemble goes with
its composing model), and says so in the index, the metrics and ``inferd models``; a measured
footprint matches what the process grew by. Real servers and models; every
wait is for an event (a metric, a started batch), never a sleep."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from inferd.protocols.client import Client
from inferd.protocols.errors import NotFound, Unavailable
from inferd.protocols.messages import IndexEntry
from tests.e2e import inferd_harness
from tests.e2e.inferd_harness import (
    INFERD,
    ServerHandle,
    add_model,
    metric,
    wait_for,
    wait_started,
)

FAILURE = "the weights are missing"
model_config = inferd_harness.testing_config
X = np.arange(4, dtype=np.float32)


def echo(name: str, **parameters: str) -> str:
    return model_config(name, "echo", **parameters)


def pipe_ensemble(name: str, step: str) -> str:
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
            'input [{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
            'output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
            f'ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1 '
            'input_map { key: "INPUT0" value: "IN" } '
            'output_map { key: "OUTPUT0" value: "OUT" } } ] }\n')


def infer(client: Client, name: str) -> list[float]:
    result = client.infer(name, {"INPUT0": X})
    values: list[float] = result.as_numpy("OUTPUT0").tolist()
    return values


def rows(client: Client, name: str) -> list[IndexEntry]:
    return [entry for entry in client.index() if entry.name == name]


def state(client: Client, name: str) -> str:
    entries = rows(client, name)
    return entries[0].state if entries else ""


def counter(server: ServerHandle, name: str, **labels: str) -> float:
    return metric(server, name, **labels) or 0.0


# ---------------------------------------------------------------------- on demand


@pytest.fixture(scope="module")
def on_demand(module_inferd: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[ServerHandle, Path]]:
    files = tmp_path_factory.mktemp("files")
    configs = {
        "echo_a": echo("echo_a"),
        "echo_b": echo("echo_b"),
        "slow_first": model_config("slow_first", "slow_load", load_delay_ms="20000",
                                     release_file=str(files / "release")),
        "broken": model_config("broken", "fail_load", message=FAILURE),
        "step": echo("step"),
        "pipe": pipe_ensemble("pipe", "step"),
    }
    root: Path = module_inferd.repository(configs=configs)
    server = module_inferd.start(root, "--model-control-mode", "explicit",
                                 "--model-load-on-demand")
    yield server, files


@pytest.fixture
def client(on_demand: tuple[ServerHandle, Path]) -> Iterator[Client]:
    with on_demand[0].client(timeout=60) as client:
        yield client


def test_nothing_loads_before_a_request_and_the_first_one_loads_it(client: Client) -> None:
    assert [entry for entry in client.index() if entry.state] == []

    assert infer(client, "echo_a") == X.tolist()

    assert rows(client, "echo_a") == [IndexEntry("echo_a", "1", "READY", "")]
    assert state(client, "echo_b") == ""


def test_ready_and_metadata_requests_load_too(client: Client) -> None:
    assert client.is_model_ready("echo_b") is True
    assert state(client, "echo_b") == "READY"
    client.unload("echo_b")
    assert client.model_metadata("echo_b").name == "echo_b"
    assert state(client, "echo_b") == "READY"


def test_a_model_not_in_the_repository_is_still_not_found(client: Client) -> None:
    with pytest.raises(NotFound) as error:
        infer(client, "no_such_model")
    assert error.value.message == "Request for unknown model: 'no_such_model' is not found"
    assert client.is_model_ready("no_such_model") is False
    assert rows(client, "no_such_model") == []


def test_concurrent_first_requests_share_one_load(
        on_demand: tuple[ServerHandle, Path], client: Client) -> None:
    server, files = on_demand
    waiters = 6
    with ThreadPoolExecutor(waiters) as pool:
        def one() -> list[float]:
            with server.client(timeout=60) as own:
                return infer(own, "slow_first")

        futures = [pool.submit(one) for _ in range(waiters)]
        wait_for(lambda: counter(server, "inferd_model_load_waits_total",
                                 model="slow_first") >= waiters,
                 "every request waiting for the load", server)
        (files / "release").write_text("")
        assert [future.result() for future in futures] == [X.tolist()] * waiters
    assert counter(server, "inferd_model_on_demand_loads_total", model="slow_first",
                   outcome="success") == 1


def test_a_failing_load_answers_every_waiter_and_is_not_retried_at_once(
        on_demand: tuple[ServerHandle, Path]) -> None:
    server, _ = on_demand

    def one() -> str:
        with server.client(timeout=60) as own:
            try:
                infer(own, "broken")
            except Unavailable as error:
                return error.message
            return "served"

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: one(), range(4)))
    later = one()

    assert all(FAILURE in answer and "failed to load on demand" in answer
               for answer in [*answers, later]), answers
    assert "tried again in" in later
    assert counter(server, "inferd_model_on_demand_loads_total", model="broken",
                   outcome="failure") == 1
    with server.client() as client:
        assert rows(client, "broken") == [IndexEntry("broken", "1", "UNAVAILABLE", FAILURE)]


def test_an_unload_holds_until_a_request_loads_the_model_again(client: Client) -> None:
    infer(client, "echo_a")
    client.unload("echo_a")
    assert rows(client, "echo_a") == [IndexEntry("echo_a", "1", "UNAVAILABLE", "unloaded")]

    assert infer(client, "echo_a") == X.tolist()

    assert state(client, "echo_a") == "READY"


def test_an_ensembles_first_request_loads_its_steps(client: Client) -> None:
    assert state(client, "step") == ""
    result = client.infer("pipe", {"IN": X})
    assert result.as_numpy("OUT").tolist() == X.tolist()
    assert state(client, "step") == "READY"
    assert state(client, "pipe") == "READY"


def test_poll_mode_loads_on_request_and_a_poll_loads_no_new_folder(inferd: Any) -> None:
    root: Path = inferd.repository(configs={"p1": echo("p1"), "p2": echo("p2")})
    server: ServerHandle = inferd.start(root, "--model-control-mode", "poll",
                                        "--model-load-on-demand",
                                        "--repository-poll-secs", "3600")
    with server.client(timeout=60) as client:
        assert [entry for entry in client.index() if entry.state] == []
        assert infer(client, "p1") == X.tolist()
        add_model(root, "p3", echo("p3"))

        client.poll()

        assert [entry.name for entry in client.index()] == ["p1", "p2", "p3"]
        assert (state(client, "p1"), state(client, "p2"), state(client, "p3")) == ("READY", "", "")
        assert infer(client, "p3") == X.tolist()


# ---------------------------------------------------------------------- budget


def sized(name: str, size: int, mode: str = "echo", **parameters: str) -> str:
    return model_config(name, mode, INFERD_MEMORY_BYTES=str(size), **parameters)


@pytest.fixture
def budgeted(inferd: Any, tmp_path: Path) -> Callable[..., tuple[ServerHandle, Client]]:
    def start(*flags: str, **configs: str) -> tuple[ServerHandle, Client]:
        root: Path = inferd.repository(configs=configs)
        server: ServerHandle = inferd.start(
            root, "--model-control-mode", "explicit", "--model-load-on-demand",
            "--model-memory-budget", "cpu=250B", *flags)
        client = server.client(timeout=60)
        return server, client

    return start


def test_a_budget_for_two_of_three_unloads_the_least_recently_used(
        budgeted: Callable[..., tuple[ServerHandle, Client]]) -> None:
    server, client = budgeted(m1=sized("m1", 100), m2=sized("m2", 100), m3=sized("m3", 100))
    with client:
        infer(client, "m1")
        infer(client, "m2")
        infer(client, "m1")  # m2 is now the least recently used

        infer(client, "m3")

        assert state(client, "m1") == "READY"
        assert state(client, "m3") == "READY"
        assert rows(client, "m2") == [IndexEntry(
            "m2", "1", "UNAVAILABLE",
            "unloaded: evicted to make room for 'm3' (cpu budget 250 B)")]
        assert metric(server, "inferd_model_memory_used_bytes", device="cpu") == 200
        assert metric(server, "inferd_model_memory_budget_bytes", device="cpu") == 250
        assert metric(server, "inferd_model_evictions_total", device="cpu") == 1

        infer(client, "m2")  # it comes back, and the least recently used now goes
        assert state(client, "m1") == "UNAVAILABLE"
        held = {e.name: (e.memory_bytes, e.last_used_ms > 0) for e in client.index()}
        assert held == {"m1": (0, False), "m2": (100, True), "m3": (100, True)}
    for where in (server.url, f"http://{server.http_url}"):
        shown = subprocess.run([*INFERD, "models", "--url", where, "--format", "json"],
                               capture_output=True, text=True, timeout=60, check=True)
        records = {row["name"]: row for row in json.loads(shown.stdout)}
        assert records["m2"]["memory"] == "100 B" and records["m2"]["last_used"] != "never"
        assert "memory" not in records["m1"]


def test_pinned_models_are_never_unloaded(
        budgeted: Callable[..., tuple[ServerHandle, Client]]) -> None:
    server, client = budgeted(
        "--load-model", "flagged",
        flagged=sized("flagged", 100),
        configured=sized("configured", 100, INFERD_PIN="true"),
        other=sized("other", 60))
    with client:
        infer(client, "configured")  # 200 of 250 held, both pinned

        with pytest.raises(Unavailable) as error:
            infer(client, "other")

        assert error.value.message.startswith(
            "cannot load 'other' within the cpu memory budget of 250 B")
        assert "'configured' (100 B, pinned)" in error.value.message
        assert "'flagged' (100 B, pinned)" in error.value.message
        assert state(client, "flagged") == "READY"
        assert state(client, "configured") == "READY"


def test_a_model_with_a_request_in_flight_is_never_unloaded(
        budgeted: Callable[..., tuple[ServerHandle, Client]], tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    server, client = budgeted(
        busy=sized("busy", 100, "slow", delay_ms="20000", started_file=str(started),
                   release_file=str(release)),
        idle=sized("idle", 100), late=sized("late", 100))
    with client, ThreadPoolExecutor(1) as pool:
        running = pool.submit(infer, client, "busy")
        wait_started(started, server=server)
        with server.client(timeout=60) as other:
            infer(other, "idle")  # used after busy: busy is the least recently used

            infer(other, "late")

            assert state(other, "busy") == "READY"
            assert state(other, "idle") == "UNAVAILABLE"
        release.write_text("")
        assert running.result() == X.tolist()


def test_an_idle_ensemble_goes_with_its_composing_model_and_comes_back(
        budgeted: Callable[..., tuple[ServerHandle, Client]]) -> None:
    server, client = budgeted(step=sized("step", 100), pipe=pipe_ensemble("pipe", "step"),
                              a=sized("a", 100), b=sized("b", 100))
    with client:
        client.infer("pipe", {"IN": X})  # loads step with it
        infer(client, "a")

        infer(client, "b")  # step is the least recently used: pipe cannot stay without it

        reason = "unloaded: evicted to make room for 'b' (cpu budget 250 B)"
        assert rows(client, "step") == [IndexEntry("step", "1", "UNAVAILABLE", reason)]
        assert rows(client, "pipe") == [IndexEntry("pipe", "1", "UNAVAILABLE", reason)]
        assert client.infer("pipe", {"IN": X}).as_numpy("OUT").tolist() == X.tolist()
        assert (state(client, "pipe"), state(client, "step")) == ("READY", "READY")


def test_a_composing_model_of_an_ensemble_in_use_is_never_unloaded(
        budgeted: Callable[..., tuple[ServerHandle, Client]], tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    server, client = budgeted(
        step=sized("step", 100, "slow", delay_ms="20000", started_file=str(started),
                   release_file=str(release)),
        pipe=pipe_ensemble("pipe", "step"), a=sized("a", 100), b=sized("b", 100))
    with client, ThreadPoolExecutor(1) as pool:
        running = pool.submit(client.infer, "pipe", {"IN": X})
        wait_started(started, server=server)
        with server.client(timeout=60) as other:
            infer(other, "a")

            infer(other, "b")

            assert (state(other, "pipe"), state(other, "step")) == ("READY", "READY")
            assert state(other, "a") == "UNAVAILABLE"
        release.write_text("")
        assert running.result().as_numpy("OUT").tolist() == X.tolist()


def test_a_model_larger_than_the_budget_is_refused_with_a_503(
        budgeted: Callable[..., tuple[ServerHandle, Client]]) -> None:
    server, client = budgeted(huge=sized("huge", 1000))
    with client:
        with pytest.raises(Unavailable) as error:
            infer(client, "huge")
        assert "cannot load 'huge' within the cpu memory budget of 250 B" in error.value.message
        assert "it needs about 1000 B, more than the whole budget" in error.value.message
        assert rows(client, "huge") == [IndexEntry("huge", "", "UNAVAILABLE",
                                                   error.value.message)]


# ---------------------------------------------------------------------- measured

SIDE = 4096
WEIGHT_BYTES = SIDE * SIDE * 4  # 64 MiB of weights, which the model holds once loaded
# What the process holds beyond the weights (onnxruntime's arena, a copy while it builds the
# session, allocator slack): the measurement must land within it.
SLACK_BYTES = WEIGHT_BYTES + 64 * 1024 * 1024


def heavy_model(folder: Path) -> None:
    """A model whose weights are made as it loads (a ConstantOfShape, which onnxruntime folds
    into an initializer when it builds the session) from a file of a few hundred bytes: a
    footprint that fell back to the size of its files (nothing measured) is far too small."""
    shape = numpy_helper.from_array(np.array([SIDE, SIDE], np.int64), "SHAPE")
    ones = helper.make_tensor("ONE", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["SHAPE"], ["W"], value=ones),
         helper.make_node("MatMul", ["INPUT0", "W"], ["OUTPUT0"])],
        "heavy", [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, SIDE])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, SIDE])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (folder / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))


def resident(pid: int) -> int:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def test_a_measured_footprint_matches_what_the_process_holds(inferd: Any) -> None:
    root: Path = inferd.repository(configs={})
    add_model(root, "heavy", 'name: "heavy"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
              f'input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, {SIDE} ] }}]\n'
              f'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, {SIDE} ] }}]\n')
    heavy_model(root / "heavy")
    server: ServerHandle = inferd.start(root, "--model-control-mode", "explicit",
                                        "--model-load-on-demand",
                                        "--model-memory-budget", "cpu=4GiB")
    before = resident(server.process.pid)
    with server.client(timeout=120) as client:
        result = client.infer("heavy", {"INPUT0": np.ones((1, SIDE), np.float32)})
        assert result.as_numpy("OUTPUT0")[0, 0] == SIDE
    grown = resident(server.process.pid) - before
    footprint = metric(server, "inferd_model_memory_bytes", device="cpu", measured="true",
                       model="heavy")

    assert footprint is not None
    # Both read about 94 MiB here, within a mebibyte of each other: the bounds are far from
    # that, and a footprint of the files (190 B) or one counted twice is far outside them.
    assert WEIGHT_BYTES * 0.9 <= footprint <= WEIGHT_BYTES + SLACK_BYTES, footprint
    assert abs(footprint - grown) <= SLACK_BYTES / 2, (footprint, grown)
