"""Request error lines: one per failure, INFO for a client's mistake and ERROR for a server
fault, naming what the log context knows; and the rate limit, driven by a fake clock."""

from __future__ import annotations

import logging

import pytest

from inferd.kernel.sdk import request_log
from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.request_log import Admitted, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_key_per_interval_with_the_count_left_out() -> None:
    clock = Clock()
    limiter = RateLimiter(interval=1.0, budget=100, clock=clock)
    assert limiter.admit("a") == Admitted()
    assert [limiter.admit("a") for _ in range(5)] == [None] * 5
    assert limiter.admit("b") == Admitted()  # another key is not held back
    clock.now += 0.99
    assert limiter.admit("a") is None
    clock.now += 0.02
    assert limiter.admit("a") == Admitted(same=6)
    assert limiter.admit("a") is None


def test_the_budget_bounds_lines_over_all_keys() -> None:
    clock = Clock()
    limiter = RateLimiter(interval=1.0, budget=3, clock=clock)
    admitted = [limiter.admit(f"key{i}") for i in range(10)]
    assert admitted[:3] == [Admitted()] * 3
    assert admitted[3:] == [None] * 7
    clock.now += 1.0
    assert limiter.admit("key99") == Admitted(others=7)
    assert limiter.admit("key98") == Admitted()


@pytest.fixture
def fresh_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_log, "_limiter", RateLimiter())


@pytest.mark.usefixtures("fresh_limiter")
def test_client_mistakes_are_info_server_faults_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inferd.requests")
    with log_context.request_context("HTTP", "POST infer"):
        log_context.note("simple", "1", "r-1")
        request_log.request_failed(400, "bad shape")
    with log_context.request_context("gRPC", "ModelInfer"):
        request_log.request_failed(500, "it broke", wire_status="INTERNAL")
    with log_context.request_context("HTTP", "POST infer"):
        request_log.request_failed(501, "unsupported")
    [client, fault, unsupported] = caplog.records
    assert client.levelno == logging.INFO
    assert client.getMessage() == (
        "HTTP POST infer failed with 400 (model 'simple' version 1, request id 'r-1'): "
        "bad shape")
    assert fault.levelno == logging.ERROR
    assert fault.getMessage() == "gRPC ModelInfer failed with INTERNAL: it broke"
    assert unsupported.levelno == logging.INFO  # the client asked for what is not there


@pytest.mark.usefixtures("fresh_limiter")
def test_a_repeated_line_is_left_out_and_ids_are_quoted(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inferd.requests")
    for number in range(3):
        with log_context.request_context("zmq", "InferRequest"):
            log_context.note("simple", "", f"id\n{number}")
            request_log.request_failed(400, "the same mistake")
    [line] = caplog.records
    assert "request id 'id\\n0'" in line.getMessage()  # one line: a newline is escaped


@pytest.mark.usefixtures("fresh_limiter")
def test_nothing_is_written_when_the_level_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="inferd.requests")
    request_log.request_failed(404, "not here")
    assert not caplog.records
