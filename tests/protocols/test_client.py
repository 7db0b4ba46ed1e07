"""The native clients against the real zmq frontend, with a fake data plane behind it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import pytest
from inferd.kernel.observability.tracing import disabled_tracer
from inferd.kernel.settings import Settings
from inferd.plugins.frontends.zmq.frontend import ZmqFrontend
from inferd.protocols.client import AsyncClient, Client, InferResult
from inferd.protocols.errors import ActorGone, DeadlineExceeded, Internal, NotFound, Unavailable
from inferd.protocols.messages import (
    Ack,
    HealthRequest,
    HealthStatus,
    Index,
    IndexEntry,
    IndexRequest,
    InferRequest,
    InferResponse,
    LoadRequest,
    Message,
    ModelConfigReply,
    ModelConfigRequest,
    ModelMetadata,
    ModelMetadataRequest,
    ModelReadyRequest,
    ServerMetadata,
    ServerMetadataRequest,
    TensorSpec,
    UnloadRequest,
)
from inferd.protocols.tensors import from_numpy

pytestmark = pytest.mark.anyio

DELAY = 0.3
WAIT = 5.0
SERVER_METADATA = ServerMetadata("inferd", "0.1.0", ("model_repository",))


class FakeDataPlane:
    """``add_one`` adds 1 to INPUT0 and echoes its request's id and parameters; ``echo``
    returns its inputs; ``slow`` sleeps first; ``wrong_kind`` answers metadata with an Ack.
    Load and unload requests are recorded."""

    def __init__(self) -> None:
        self.loads: list[LoadRequest] = []
        self.tracer = disabled_tracer()
        self.unloads: list[UnloadRequest] = []

    async def handle(self, request: Message) -> Message:
        if isinstance(request, HealthRequest):
            return HealthStatus(ok=request.what == "live")
        if isinstance(request, ServerMetadataRequest):
            return SERVER_METADATA
        if isinstance(request, IndexRequest):
            entries = (IndexEntry("add_one", "1", "READY"), IndexEntry("never_loaded"))
            return Index(entries[:1] if request.ready_only else entries)
        if isinstance(request, LoadRequest):
            self.loads.append(request)
            return Ack()
        if isinstance(request, UnloadRequest):
            self.unloads.append(request)
            return Ack()
        model = getattr(request, "model", "")
        if isinstance(request, ModelReadyRequest):
            return HealthStatus(ok=model == "add_one")
        if model == "wrong_kind":
            return Ack()
        if model not in ("add_one", "echo", "slow"):
            raise NotFound(f"Request for unknown model: '{model}' is not found")
        if isinstance(request, ModelMetadataRequest):
            spec = TensorSpec("INPUT0", "INT32", (-1,))
            return ModelMetadata(model, ("1",), "fake", (spec,), (spec,))
        if isinstance(request, ModelConfigRequest):
            return ModelConfigReply(json.dumps({"name": model, "max_batch_size": 8}))
        assert isinstance(request, InferRequest)
        if model == "add_one":
            output = from_numpy("OUTPUT0", request.inputs[0].data + 1)
            return InferResponse(model, "1", (output,), request.id, request.parameters)
        if model == "slow":
            await anyio.sleep(DELAY)
        return InferResponse(model, "1", request.inputs, request.id)


@asynccontextmanager
async def serving(dataplane: FakeDataPlane | None = None) -> AsyncIterator[str]:
    settings = Settings(options={"zmq_address": "127.0.0.1", "zmq_port": 0})
    frontend = ZmqFrontend(dataplane or FakeDataPlane(), settings)  # type: ignore[arg-type]
    async with anyio.create_task_group() as server:
        with anyio.fail_after(WAIT):
            endpoint: str = await server.start(frontend.serve)
        yield endpoint
        server.cancel_scope.cancel()


def check_add_one(result: InferResult) -> None:
    assert result.model == "add_one"
    assert result.version == "1"
    assert result.id == "request-1"
    assert result.parameters == {"tag": "x"}
    assert list(result.outputs) == ["OUTPUT0"]
    assert result.outputs["OUTPUT0"].datatype == "INT32"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[2, 3, 4]])


def add_one_input() -> dict[str, np.ndarray]:
    return {"INPUT0": np.array([[1, 2, 3]], dtype=np.int32)}


async def test_async_infer() -> None:
    async with serving() as endpoint, AsyncClient(endpoint, timeout=WAIT) as client:
        result = await client.infer(
            "add_one", add_one_input(), request_id="request-1", parameters={"tag": "x"}
        )
        check_add_one(result)
        with pytest.raises(KeyError, match="OUTPUT0"):
            result.as_numpy("missing")

        tensors = [from_numpy("A", np.array([1.5], np.float32)), from_numpy("B", [b"x"])]
        echoed = await client.infer("echo", tensors)
        assert [tensor.name for tensor in echoed.response.outputs] == ["A", "B"]
        assert echoed.outputs["A"].datatype == "FP32"

        strings = await client.infer("echo", {"TEXT": np.array(["héllo", "world"])})
        assert strings.outputs["TEXT"].datatype == "BYTES"
        assert list(strings.as_numpy("TEXT")) == ["héllo".encode(), b"world"]


async def test_async_service_calls() -> None:
    dataplane = FakeDataPlane()
    async with serving(dataplane) as endpoint, AsyncClient(endpoint, timeout=WAIT) as client:
        assert await client.is_live() is True
        assert await client.is_ready() is False
        assert await client.is_model_ready("add_one") is True
        assert await client.is_model_ready("other") is False
        assert await client.server_metadata() == SERVER_METADATA
        metadata = await client.model_metadata("add_one")
        assert metadata.inputs[0].name == "INPUT0"
        assert await client.model_config("add_one") == {"name": "add_one", "max_batch_size": 8}
        assert [entry.name for entry in await client.index()] == ["add_one", "never_loaded"]
        assert [entry.name for entry in await client.index(ready_only=True)] == ["add_one"]
        await client.load("add_one", config={"max_batch_size": 4}, files={"1/model.onnx": b"\0"})
        await client.load("echo")
        await client.unload("add_one", unload_dependents=True)
    first_load, plain_load = dataplane.loads
    assert json.loads(first_load.config) == {"max_batch_size": 4}
    assert first_load.files == {"1/model.onnx": b"\0"}
    assert (plain_load.config, plain_load.files) == ("", {})
    assert dataplane.unloads == [UnloadRequest("add_one", unload_dependents=True)]


async def test_async_errors_are_typed() -> None:
    async with serving() as endpoint, AsyncClient(endpoint, timeout=WAIT) as client:
        with pytest.raises(NotFound, match="Request for unknown model: 'nope' is not found"):
            await client.infer("nope", add_one_input())
        with pytest.raises(NotFound):
            await client.model_metadata("nope")
        with pytest.raises(Internal, match="expected a ModelMetadata reply, got Ack"):
            await client.model_metadata("wrong_kind")


async def test_async_timeout_raises_deadline_exceeded_and_the_client_recovers() -> None:
    async with serving() as endpoint, AsyncClient(endpoint, timeout=DELAY / 3) as client:
        with pytest.raises(DeadlineExceeded):
            await client.infer("slow", add_one_input())
        client.timeout = WAIT
        await anyio.sleep(DELAY)
        result = await client.infer("echo", add_one_input())
        assert list(result.outputs) == ["INPUT0"]


async def test_close_fails_pending_requests() -> None:
    async with serving() as endpoint:
        client = AsyncClient(endpoint, timeout=WAIT)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as requests:
                errors: list[BaseException] = []

                async def pending() -> None:
                    try:
                        await client.infer("slow", add_one_input())
                    except ActorGone as error:
                        errors.append(error)

                requests.start_soon(pending)
                await anyio.sleep(DELAY / 3)
                await client.close()
        assert len(errors) == 1
        assert isinstance(errors[0], Unavailable)
        with pytest.raises(ActorGone):
            await client.is_live()


def sync_calls(endpoint: str) -> None:
    with Client(endpoint, timeout=WAIT) as client:
        check_add_one(
            client.infer(
                "add_one", add_one_input(), request_id="request-1", parameters={"tag": "x"}
            )
        )
        assert client.is_live() is True
        assert client.is_ready() is False
        assert client.is_model_ready("add_one") is True
        assert client.is_model_ready("other") is False
        assert client.server_metadata() == SERVER_METADATA
        assert client.model_metadata("echo").name == "echo"
        assert client.model_config("echo")["name"] == "echo"
        assert [entry.name for entry in client.index(ready_only=True)] == ["add_one"]
        client.load("echo", config='{"name": "echo"}')
        client.unload("echo")
        with pytest.raises(NotFound, match="Request for unknown model: 'nope' is not found"):
            client.infer("nope", add_one_input())


async def test_sync_client_from_a_thread() -> None:
    dataplane = FakeDataPlane()
    async with serving(dataplane) as endpoint:
        with anyio.fail_after(WAIT):
            await anyio.to_thread.run_sync(sync_calls, endpoint)
    assert dataplane.loads == [LoadRequest("echo", config='{"name": "echo"}')]
    assert dataplane.unloads == [UnloadRequest("echo")]


def sync_shared_by_threads(endpoint: str) -> list[int]:
    values: list[int] = []
    lock = threading.Lock()
    with Client(endpoint, timeout=WAIT) as client:

        def one(value: int) -> None:
            result = client.infer("echo", {"INPUT0": np.array([value], np.int32)})
            with lock:
                values.append(int(result.as_numpy("INPUT0")[0]))

        threads = [threading.Thread(target=one, args=(value,)) for value in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
    return sorted(values)


async def test_sync_client_shared_by_threads() -> None:
    async with serving() as endpoint:
        with anyio.fail_after(WAIT):
            values = await anyio.to_thread.run_sync(sync_shared_by_threads, endpoint)
    assert values == list(range(8))


def sync_timeout(endpoint: str) -> Any:
    with Client(endpoint, timeout=DELAY / 3) as client:
        with pytest.raises(DeadlineExceeded):
            client.infer("slow", add_one_input())
        time.sleep(DELAY)
        # The late reply to the timed-out request is now queued first and must be skipped.
        client.timeout = WAIT
        return client.infer("echo", {"INPUT0": np.array([42], np.int32)})


async def test_sync_timeout_raises_deadline_exceeded_and_skips_the_late_reply() -> None:
    async with serving() as endpoint:
        with anyio.fail_after(WAIT):
            result = await anyio.to_thread.run_sync(sync_timeout, endpoint)
    assert int(result.as_numpy("INPUT0")[0]) == 42


def test_a_closed_sync_client_refuses_requests() -> None:
    client = Client("tcp://127.0.0.1:1", timeout=WAIT)
    client.close()
    with pytest.raises(ActorGone):
        client.is_live()
