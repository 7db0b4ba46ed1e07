"""A model in an executor process of its own (config parameter ``INFERD_EXECUTOR``), end to
end: it runs in a process no other model shares; when that process dies, only the model's own
requests fail and only that process is restarted, while ``simple`` keeps serving from its
executor, requests in flight included; unloading the model stops its process; a bad value of
the parameter fails the load with the reason."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from inferd.plugins.backends.testing.backends import CRASH_EXIT_STATUS
from inferd.protocols.client import AsyncClient
from inferd.protocols.errors import InvalidArgument, Unavailable
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

ISOLATED = 'parameters { key: "INFERD_EXECUTOR" value { string_value: "isolated" } }\n'
WAIT_SECS = 30.0


def started_executors(server: ServerHandle) -> list[str]:
    """The 'started <name> (pid N)' lines of the server's log, in order."""
    return [line.split("started ", 1)[1] for line in server.log().splitlines()
            if "started executor/" in line]


def wait_for(predicate: Any, what: str, server: ServerHandle) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_SECS} s: {what}; log:\n{server.log()}")
        time.sleep(0.05)


async def simple_under_load(url: str, stop: asyncio.Event) -> list[Any]:
    """``simple`` requests back to back until ``stop``: every result or error."""
    outcomes: list[Any] = []
    ones = np.ones((1, 16), np.int32)
    async with AsyncClient(url, timeout=WAIT_SECS) as client:
        while not stop.is_set():
            try:
                result = await client.infer("simple", {"INPUT0": ones, "INPUT1": ones})
                outcomes.append(result.as_numpy("OUTPUT0").tolist() == (ones * 2).tolist())
            except Exception as error:  # noqa: BLE001 - collected, asserted on below
                outcomes.append(error)
    return outcomes


async def crash_beside_simple(url: str) -> tuple[Any, list[Any]]:
    stop = asyncio.Event()
    load = asyncio.create_task(simple_under_load(url, stop))
    await asyncio.sleep(0.3)
    async with AsyncClient(url, timeout=WAIT_SECS) as client:
        try:
            crashed: Any = await client.infer("crasher", {"INPUT0": np.ones(4, np.float32)})
        except Exception as error:  # noqa: BLE001
            crashed = error
    await asyncio.sleep(0.3)
    stop.set()
    return crashed, await load


def test_an_isolated_model_crashes_alone_and_its_process_alone_restarts(
        inferd: InferdHarness) -> None:
    crasher = inferd.testing_config("crasher", "crash") + ISOLATED
    server = inferd.start(inferd.repository("simple", configs={"crasher": crasher}))
    # simple (onnxruntime) runs in the server's own process: no CPU executor process starts.
    assert [name.split(" ")[0] for name in started_executors(server)] == [
        "executor/model/crasher"]

    crashed, simple_outcomes = asyncio.run(crash_beside_simple(server.url))

    assert isinstance(crashed, Unavailable), crashed
    assert f"exited with code {CRASH_EXIT_STATUS}" in crashed.message
    assert "executor/model/crasher" in crashed.message
    assert simple_outcomes and all(outcome is True for outcome in simple_outcomes), [
        outcome for outcome in simple_outcomes if outcome is not True][:3]
    with server.client(timeout=WAIT_SECS) as client:
        wait_for(lambda: client.is_model_ready("crasher"), "crasher READY again", server)
    restarted = [name.split(" ")[0] for name in started_executors(server)]
    assert restarted == ["executor/model/crasher"] * 2  # only the crasher's went


def test_unloading_an_isolated_model_stops_its_process(inferd: InferdHarness) -> None:
    echo = inferd.testing_config("echo", "echo") + ISOLATED
    server = inferd.start(inferd.repository("simple", configs={"echo": echo}),
                          "--model-control-mode=explicit", "--load-model=*")
    with server.client() as client:
        assert client.infer("echo", {"INPUT0": np.arange(4, dtype=np.float32)}).as_numpy(
            "OUTPUT0").tolist() == [0, 1, 2, 3]
        client.unload("echo")
        wait_for(lambda: "stopping executor/model/echo: its model is unloaded" in server.log(),
                 "the isolated executor stopped", server)
        client.load("echo")  # a fresh process again
        assert client.infer("echo", {"INPUT0": np.ones(4, np.float32)}).as_numpy(
            "OUTPUT0").tolist() == [1, 1, 1, 1]
        assert client.infer("simple", {"INPUT0": np.ones((1, 16), np.int32),
                                       "INPUT1": np.ones((1, 16), np.int32)}).as_numpy(
            "OUTPUT0").tolist() == [[2] * 16]
    assert [n.split(" ")[0] for n in started_executors(server)].count(
        "executor/model/echo") == 2


def test_a_bad_executor_parameter_fails_the_load_with_the_reason(inferd: InferdHarness) -> None:
    bad = inferd.testing_config("bad", "echo") + ISOLATED.replace("isolated", "alone")
    server = inferd.start(inferd.repository("simple", configs={"bad": bad}),
                          "--model-control-mode=explicit")
    with server.client() as client:
        with pytest.raises(InvalidArgument, match="parameter INFERD_EXECUTOR must be one of "
                           "shared, isolated, server, got 'alone'"):
            client.load("bad")
        client.load("simple")
        assert client.is_model_ready("simple")
    assert not any("executor/model/" in name for name in started_executors(server))
