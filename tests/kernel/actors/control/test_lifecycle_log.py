"""Model state change lines: a step's start says why, its end says after how long; failures
are ERROR lines with their reason."""

from __future__ import annotations

import logging

import pytest

from inferd.kernel.actors.control.lifecycle_log import ModelStateLog


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_a_load_and_an_unload(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inferd.models")
    clock = Clock()
    states = ModelStateLog(clock)
    states.changed("simple", 1, "LOADING", "load requested")
    clock.now += 0.42
    states.changed("simple", 1, "READY")
    clock.now += 60
    states.changed("simple", 1, "UNLOADING", "unload requested")
    clock.now += 0.05
    states.changed("simple", 1, "unloaded")
    assert [r.getMessage() for r in caplog.records] == [
        "model 'simple' version 1 LOADING: load requested",
        "model 'simple' version 1 READY after 0.42 s",
        "model 'simple' version 1 UNLOADING: unload requested",
        "model 'simple' version 1 unloaded after 0.05 s",
    ]
    assert {r.levelno for r in caplog.records} == {logging.INFO}
    ready = caplog.records[1]
    assert (ready.model, ready.version, ready.state) == ("simple", "1", "READY")  # type: ignore[attr-defined]
    assert ready.duration_s == pytest.approx(0.42)  # type: ignore[attr-defined]


def test_a_failure_is_an_error_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inferd.models")
    clock = Clock()
    states = ModelStateLog(clock)
    states.changed("m", 3, "LOADING", "start-up")
    clock.now += 1.5
    states.changed("m", 3, "UNAVAILABLE", "no model.onnx", failed=True)
    states.changed("bad", None, "UNAVAILABLE", "config.pbtxt:1:1: oops", failed=True)
    [_, version, model] = caplog.records
    assert version.levelno == logging.ERROR
    assert version.getMessage() == "model 'm' version 3 UNAVAILABLE after 1.50 s: no model.onnx"
    assert model.getMessage() == "model 'bad' UNAVAILABLE: config.pbtxt:1:1: oops"
    assert not hasattr(model, "version")
