"""Graceful shutdown end to end (SPEC 6.3): SIGTERM while requests run and wait in the queue;
every one of them is answered correctly and the server exits 0."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from inferd.protocols.client import AsyncClient, InferResult
from inferd.protocols.errors import DeadlineExceeded, Unavailable

DELAY_MS = 1000
INSTANCES = 2
REQUESTS = 6  # three rounds on two instances: four requests are still queued at SIGTERM
EXIT_TIMEOUT_SECS = 30.0


def payload(index: int) -> np.ndarray:
    return np.arange(4, dtype=np.float32) + 10 * index


async def infer(client: AsyncClient, index: int) -> InferResult:
    return await client.infer("sleepy", {"INPUT0": payload(index)}, request_id=f"r{index}")


def test_sigterm_lets_running_and_queued_requests_finish(inferd: Any) -> None:
    config = inferd.testing_config("sleepy", "slow", instances=INSTANCES, delay_ms=str(DELAY_MS))
    server = inferd.start(inferd.repository(configs={"sleepy": config}))

    async def scenario() -> tuple[list[InferResult], InferResult | BaseException, float]:
        async with AsyncClient(server.url, timeout=EXIT_TIMEOUT_SECS) as client:
            requests = [asyncio.create_task(infer(client, i)) for i in range(REQUESTS)]
            await asyncio.sleep(0.3 * DELAY_MS / 1000)  # the first two are executing
            assert not any(request.done() for request in requests)
            server.process.terminate()
            signalled = time.monotonic()
            await asyncio.sleep(0.1)
            late = await asyncio.gather(infer(client, 99), return_exceptions=True)
            results = await asyncio.gather(*requests)
            return results, late[0], time.monotonic() - signalled

    results, late, drained_after = asyncio.run(scenario())

    for index, result in enumerate(results):
        assert result.id == f"r{index}"
        assert result.as_numpy("OUTPUT0").tolist() == payload(index).tolist()
    # The queued requests really waited for their turn, after the signal.
    assert drained_after >= (REQUESTS // INSTANCES - 1) * DELAY_MS / 1000 - 0.5
    # A request after the signal is refused, or (if it beat the signal) served; never lost.
    if isinstance(late, BaseException):
        assert isinstance(late, (Unavailable, DeadlineExceeded)), repr(late)
    else:
        assert late.as_numpy("OUTPUT0").tolist() == payload(99).tolist()
    code = server.wait_exit(EXIT_TIMEOUT_SECS)
    assert code == 0, server.log()
    assert "SIGTERM received: shutting down" in server.log()
    assert "shutdown complete" in server.log()


def test_requests_left_at_the_exit_timeout_fail_as_unavailable(inferd: Any) -> None:
    delay_ms, exit_timeout_secs, requests = 500, 1, 8  # 4 s of work, 1 s to do it in
    config = inferd.testing_config("sleepy", "slow", delay_ms=str(delay_ms))
    server = inferd.start(
        inferd.repository(configs={"sleepy": config}),
        "--exit-timeout-secs", str(exit_timeout_secs),
    )

    async def scenario() -> list[InferResult | BaseException]:
        async with AsyncClient(server.url, timeout=EXIT_TIMEOUT_SECS) as client:
            tasks = [asyncio.create_task(infer(client, i)) for i in range(requests)]
            await asyncio.sleep(0.4 * delay_ms / 1000)
            server.process.terminate()
            return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(scenario())

    assert server.wait_exit(EXIT_TIMEOUT_SECS) == 0, server.log()
    served = [o for o in outcomes if isinstance(o, InferResult)]
    refused = [o for o in outcomes if not isinstance(o, InferResult)]
    assert served, "the request running at SIGTERM must finish"
    for result in served:
        index = int(result.id[1:])
        assert result.as_numpy("OUTPUT0").tolist() == payload(index).tolist()
    assert refused, "4 s of queued work cannot all finish within a 1 s exit timeout"
    assert all(isinstance(error, Unavailable) for error in refused), refused
