"""Dynamic batching under concurrency, end to end: 48 requests of the example ``mlp`` in flight
at once over HTTP (aio) and gRPC (aio) each get their own row of the model's answer, computed
here with onnxruntime, while the statistics show the server merged them into fewer runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

EXAMPLE = Path(__file__).resolve().parents[2] / "model_repository" / "mlp" / "1" / "model.onnx"
REQUESTS = 48
FEATURES = 64


# How long a batch may wait for more requests: far above the time the round's requests take
# to arrive, so they batch however fast the instance runs one (a tiny model's run ends long
# before the next gRPC call is read, and without a delay every batch would be of one).
QUEUE_DELAY_US = 500_000


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    repository = module_inferd.repository("mlp")
    config = repository / "mlp" / "config.pbtxt"
    config.write_text(config.read_text().replace(
        "dynamic_batching {}",
        f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}"))
    return module_inferd.start(repository)


def rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs of one row per request and onnxruntime's answer for each."""
    inputs = np.random.default_rng(seed).standard_normal((REQUESTS, 1, FEATURES)).astype(
        np.float32)
    session = onnxruntime.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": inputs.reshape(REQUESTS, FEATURES)})[0]
    return inputs, expected


def executions(server: ServerHandle) -> tuple[int, int]:
    """(requests, executions) the server counted for ``mlp`` so far."""
    with server.client() as client:
        stats = client.statistics("mlp")[0]
    return int(stats["inference_count"]), int(stats["execution_count"])


async def http_round(server: ServerHandle, inputs: np.ndarray) -> list[np.ndarray]:
    async with httpaio.InferenceServerClient(server.http_url, conn_limit=REQUESTS) as client:
        async def one(row: np.ndarray) -> np.ndarray:
            tensor = httpaio.InferInput("x", [1, FEATURES], "FP32")
            tensor.set_data_from_numpy(row, binary_data=True)
            return (await client.infer("mlp", [tensor])).as_numpy("y")[0]

        return list(await asyncio.gather(*(one(row) for row in inputs)))


async def grpc_round(server: ServerHandle, inputs: np.ndarray) -> list[np.ndarray]:
    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        async def one(row: np.ndarray) -> np.ndarray:
            tensor = grpcaio.InferInput("x", [1, FEATURES], "FP32")
            tensor.set_data_from_numpy(row)
            return (await client.infer("mlp", [tensor])).as_numpy("y")[0]

        return list(await asyncio.gather(*(one(row) for row in inputs)))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_are_batched_and_each_gets_its_own_row(
        server: ServerHandle, protocol: str) -> None:
    inputs, expected = rows(seed=len(protocol))
    requests_before, executions_before = executions(server)
    round_ = http_round if protocol == "http" else grpc_round
    answers = asyncio.run(round_(server, inputs))
    for index, answer in enumerate(answers):
        np.testing.assert_allclose(answer, expected[index], rtol=1e-5, atol=1e-6,
                                   err_msg=f"request {index} got another row")
    requests_after, executions_after = executions(server)
    assert requests_after - requests_before == REQUESTS
    # Requests that arrive while the instance runs a batch wait and join the next one.
    assert executions_after - executions_before < REQUESTS, (executions_before, executions_after)
