"""An ensemble's ``max_inflight_requests`` end to end (Triton core#455/#482): at most N
requests of a step are at its composing model at once, shared by every request to the
ensemble; the others wait (the ``inferd_ensemble_step_waiting_requests`` gauge shows them)
and none fails; and a step whose composing model's queue is full answers the client with the
queue's refusal instead of hanging (core#466), giving its slot back.

Every wait is for an event: a batch the composing model started (its ``started_file``), the
composing model's pending count or the step's gauges; the composing models hold their batches
until the test creates their ``release_file``."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import (
    InferdHarness,
    ServerHandle,
    metric,
    started_batches,
    wait_for,
    wait_started,
)

LIMIT = 2
CLIENTS = 5
INSTANCES = 4  # more than LIMIT: without the limit the composing model takes them all
HOLD_MS = "120000"  # a held batch's bound; each test releases its batches long before
X = np.arange(4, dtype=np.float32)


def pipe(name: str, step: str, limit: int = 0, batch: int = 0) -> str:
    limit_line = f"max_inflight_requests: {limit} " if limit else ""
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {batch}\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            f'ensemble_scheduling {{ {limit_line}step [ {{ model_name: "{step}" '
            'model_version: -1 input_map { key: "INPUT0" value: "X" } '
            'output_map { key: "OUTPUT0" value: "Y" } } ] }\n')


def held(name: str, files: Path, instances: int) -> str:
    return InferdHarness.testing_config(
        name, "slow", instances, delay_ms=HOLD_MS, started_file=str(files / f"{name}.started"),
        release_file=str(files / f"{name}.release"))


def one_deep_queue(name: str, files: Path) -> str:
    """A held model whose queue takes one request: a second one waiting is refused."""
    return held(name, files, 1).replace("max_batch_size: 0", "max_batch_size: 8") + (
        "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("files")


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, files: Path) -> ServerHandle:
    root: Path = module_inferd.repository(configs={
        "step_limited": held("step_limited", files, INSTANCES),
        "limited": pipe("limited", "step_limited", LIMIT),
        "step_free": held("step_free", files, INSTANCES),
        "free": pipe("free", "step_free"),
        "step_full": one_deep_queue("step_full", files),
        "full": pipe("full", "step_full", limit=3, batch=8),
    })
    return module_inferd.start(root, "--model-control-mode", "explicit", "--load-model",
                               "limited", "--load-model", "free", "--load-model", "full")


@pytest.fixture(scope="module")
def grpc(server: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


class Answers:
    """Requests sent with ``async_infer``; their outcomes as they come."""

    def __init__(self, client: grpcclient.InferenceServerClient) -> None:
        self._client = client
        self._outcomes: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def send(self, model: str, shape: list[int]) -> None:
        tensor = grpcclient.InferInput("X", shape, "FP32")
        tensor.set_data_from_numpy(X.reshape(shape))
        self._client.async_infer(model, [tensor], lambda result, error: self._outcomes.put(
            (result, error)), client_timeout=60)

    def take(self, count: int) -> list[tuple[Any, Any]]:
        return [self._outcomes.get(timeout=60) for _ in range(count)]


@contextmanager
def holding(files: Path, model: str) -> Iterator[Path]:
    """``model``'s batches are held inside; its release file, made on the way out whatever
    happens (so a failing test leaves no request behind to hold the server's exit up)."""
    release = files / f"{model}.release"
    try:
        yield release
    finally:
        release.touch()


def gauge(server: ServerHandle, name: str, model: str) -> float | None:
    return metric(server, name, model=model, step="0", version="1")  # as printed: sorted


def pending(server: ServerHandle, model: str) -> float:
    return metric(server, "nv_inference_pending_request_count", model=model, version="1") or 0.0


def test_at_most_the_limit_reaches_the_step_and_the_others_wait_then_succeed(
        server: ServerHandle, grpc: grpcclient.InferenceServerClient, files: Path) -> None:
    answers = Answers(grpc)
    with holding(files, "step_limited"):
        for _ in range(CLIENTS):
            answers.send("limited", [4])

        wait_for(lambda: gauge(server, "inferd_ensemble_step_waiting_requests", "limited")
                 == CLIENTS - LIMIT, f"{CLIENTS - LIMIT} requests waiting for a slot", server)
        assert gauge(server, "inferd_ensemble_step_inflight_requests", "limited") == LIMIT
        # What the composing model sees: only LIMIT of them, though it has 4 instances free.
        assert pending(server, "step_limited") == LIMIT
        wait_started(files / "step_limited.started", LIMIT, server)
        assert len(started_batches(files / "step_limited.started")) == LIMIT

    outcomes = answers.take(CLIENTS)

    assert [error for _, error in outcomes] == [None] * CLIENTS
    for result, _ in outcomes:
        np.testing.assert_array_equal(result.as_numpy("Y"), X)
    assert len(started_batches(files / "step_limited.started")) == CLIENTS
    assert gauge(server, "inferd_ensemble_step_inflight_requests", "limited") == 0
    assert gauge(server, "inferd_ensemble_step_waiting_requests", "limited") == 0
    assert "Ensemble model 'limited' configured with max_inflight_requests: 2" in server.log()


def test_without_a_limit_every_request_reaches_the_step(
        server: ServerHandle, grpc: grpcclient.InferenceServerClient, files: Path) -> None:
    answers = Answers(grpc)
    with holding(files, "step_free"):
        for _ in range(CLIENTS):
            answers.send("free", [4])

        wait_for(lambda: pending(server, "step_free") == CLIENTS,
                 f"{CLIENTS} requests at the composing model", server)
        assert gauge(server, "inferd_ensemble_step_waiting_requests", "free") is None

    assert [error for _, error in answers.take(CLIENTS)] == [None] * CLIENTS


def test_a_step_whose_queue_is_full_fails_the_request_instead_of_hanging(
        server: ServerHandle, grpc: grpcclient.InferenceServerClient, files: Path) -> None:
    answers = Answers(grpc)
    with holding(files, "step_full"):
        answers.send("full", [1, 4])
        wait_started(files / "step_full.started", 1, server)
        answers.send("full", [1, 4])
        wait_for(lambda: pending(server, "step_full") == 2, "a second request queued", server)

        # Two more: each takes the third slot, is refused by the full queue, gives it back
        # (kept, the second would wait for it instead).
        for _ in range(2):
            answers.send("full", [1, 4])
            [(result, error)] = answers.take(1)
            assert result is None and isinstance(error, InferenceServerException)
            assert "in ensemble 'full', step 'step_full' failed: " in error.message()
            assert "Exceeds maximum queue size" in error.message()
        assert gauge(server, "inferd_ensemble_step_inflight_requests", "full") == 2

    assert [error for _, error in answers.take(2)] == [None, None]
    answers.send("full", [1, 4])
    assert [error for _, error in answers.take(1)] == [None]
    assert gauge(server, "inferd_ensemble_step_inflight_requests", "full") == 0
