"""Executor crash recovery end to end (DESIGN, Processes): when the executor process dies, the
requests it was running fail with a 503-class error, the server stays up, the executor is
restarted and the models that lived on it are loaded again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from inferd.plugins.backends.testing.backends import CRASH_EXIT_STATUS
from inferd.protocols.client import AsyncClient, Client
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import IndexEntry

RECOVERY_TIMEOUT_SECS = 30.0
CONCURRENT_REQUESTS = 3


async def infer_concurrently(url: str, model: str, count: int) -> list[Any]:
    """The result or the error of each of ``count`` requests sent together."""
    async with AsyncClient(url, timeout=RECOVERY_TIMEOUT_SECS) as client:
        requests = [
            client.infer(model, {"INPUT0": np.full(4, i, np.float32)}) for i in range(count)
        ]
        return await asyncio.gather(*requests, return_exceptions=True)


def assert_simple_serves(client: Client) -> None:
    ones = np.ones((2, 16), np.int32)
    result = client.infer("simple", {"INPUT0": ones * 4, "INPUT1": ones})
    assert result.as_numpy("OUTPUT0").tolist() == [[5] * 16] * 2
    assert result.as_numpy("OUTPUT1").tolist() == [[3] * 16] * 2


def wait_until_ready(client: Client, names: tuple[str, ...], log: Any) -> float:
    """Seconds until every model in ``names`` is READY again; fails after the timeout."""
    started = time.monotonic()
    while not all(client.is_model_ready(name) for name in names):
        if time.monotonic() - started > RECOVERY_TIMEOUT_SECS:
            pytest.fail(
                f"{names} not READY {RECOVERY_TIMEOUT_SECS} s after the crash; index: "
                f"{client.index()}; log:\n{log()}"
            )
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_crashed_executor_is_restarted_with_its_models(inferd: Any) -> None:
    repository = inferd.repository(
        "simple", configs={"crasher": inferd.testing_config("crasher", "crash")}
    )
    server = inferd.start(repository)  # NONE mode: one CPU executor holds both models
    with server.client(timeout=RECOVERY_TIMEOUT_SECS) as client:
        assert_simple_serves(client)

        outcomes = asyncio.run(infer_concurrently(server.url, "crasher", CONCURRENT_REQUESTS))

        # One request was running when the process died, the others waited in the queue.
        assert all(isinstance(outcome, Unavailable) for outcome in outcomes), outcomes
        messages = [outcome.message for outcome in outcomes if isinstance(outcome, Unavailable)]
        assert any(f"exited with code {CRASH_EXIT_STATUS}" in m for m in messages), messages
        assert client.is_live() is True
        wait_until_ready(client, ("simple", "crasher"), server.log)
        assert client.index() == [
            IndexEntry("crasher", "1", "READY", ""),
            IndexEntry("simple", "1", "READY", ""),
        ]
        assert_simple_serves(client)
        assert server.process.poll() is None
    log = server.log()
    assert f"exited with code {CRASH_EXIT_STATUS}; restarting it" in log, log
