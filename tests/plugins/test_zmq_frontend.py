"""The native zmq frontend over real sockets, with a fake data plane and raw DEALER peers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
import pytest
import zmq
import zmq.asyncio

from inferd.kernel.observability.tracing import disabled_tracer
from inferd.kernel.sdk.frontends import FrontendRegistry
from inferd.kernel.settings import Settings
from inferd.plugins.frontends.zmq import inferd_register_frontends
from inferd.plugins.frontends.zmq.frontend import ZmqFrontend
from inferd.protocols.wire import codec as wire
from inferd.protocols.client import AsyncClient
from inferd.protocols.errors import ErrorCode, NotFound
from inferd.protocols.messages import (
    Envelope,
    Failure,
    HealthRequest,
    HealthStatus,
    InferRequest,
    InferResponse,
    Message,
    Shutdown,
)
from inferd.protocols.tensors import from_numpy

pytestmark = pytest.mark.anyio

DELAY = 0.3
WAIT = 5.0


class FakeDataPlane:
    """``add_one`` adds 1 to INPUT0, ``slow`` sleeps then echoes (or, given ``slow_together``,
    waits until that many ``slow`` requests are in it at once), ``broken`` raises a plain
    exception; any other model is unknown. Every request is counted."""

    def __init__(self, slow_together: int = 0) -> None:
        self.handled = 0
        self.tracer = disabled_tracer()
        self.slow_started = anyio.Event()
        self.slow_together = slow_together
        self.slow_in = 0
        self.all_slow_in = anyio.Event()

    async def handle(self, request: Message) -> Message:
        self.handled += 1
        if isinstance(request, HealthRequest):
            return HealthStatus(ok=True)
        assert isinstance(request, InferRequest)
        if request.model == "add_one":
            data = request.inputs[0].data + 1
            return InferResponse("add_one", "1", (from_numpy("OUTPUT0", data),), id=request.id)
        if request.model == "slow":
            self.slow_started.set()
            if self.slow_together:
                self.slow_in += 1
                if self.slow_in >= self.slow_together:
                    self.all_slow_in.set()
                await self.all_slow_in.wait()
            else:
                await anyio.sleep(DELAY)
            return InferResponse("slow", "1", request.inputs, id=request.id)
        if request.model == "broken":
            raise RuntimeError("the fake backend fell over")
        raise NotFound(f"Request for unknown model: '{request.model}' is not found")


@asynccontextmanager
async def running_frontend(
    dataplane: FakeDataPlane, port: int = 0
) -> AsyncIterator[tuple[ZmqFrontend, str]]:
    settings = Settings(options={"zmq_address": "127.0.0.1", "zmq_port": port})
    frontend = ZmqFrontend(dataplane, settings)  # type: ignore[arg-type]
    async with anyio.create_task_group() as server:
        with anyio.fail_after(WAIT):
            endpoint = await server.start(frontend.serve)
        yield frontend, endpoint
        server.cancel_scope.cancel()


@asynccontextmanager
async def raw_dealer(endpoint: str) -> AsyncIterator[zmq.asyncio.Socket]:
    socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    try:
        yield socket
    finally:
        socket.close()


def infer_envelope(msg_id: int, model: str, **envelope_fields: Any) -> Envelope:
    tensor = from_numpy("INPUT0", np.array([1, 2, 3], dtype=np.int32))
    request = InferRequest(model=model, inputs=(tensor,))
    return Envelope(msg_id=msg_id, src="test/raw", dst="frontend", body=request, **envelope_fields)


async def ask_raw(socket: zmq.asyncio.Socket, frames: list[Any]) -> Envelope:
    with anyio.fail_after(WAIT):
        await socket.send_multipart(frames)
        reply = await socket.recv_multipart(copy=False)
    assert reply[0].bytes == b""
    return wire.decode(reply[1:])


def failure_of(envelope: Envelope) -> Failure:
    assert isinstance(envelope.body, Failure), envelope.body
    return envelope.body


def test_hook_registers_the_frontend_class() -> None:
    registry = FrontendRegistry()
    inferd_register_frontends(registry)
    (spec,) = list(registry)
    assert spec.name == "zmq"
    assert spec.load_class() is ZmqFrontend


async def test_reports_the_bound_endpoint_and_answers_with_a_reply_envelope() -> None:
    async with running_frontend(FakeDataPlane()) as (_, endpoint), raw_dealer(endpoint) as peer:
        assert endpoint.startswith("tcp://127.0.0.1:")
        assert not endpoint.endswith(":0")
        reply = await ask_raw(peer, [b"", *wire.encode(infer_envelope(7, "add_one"))])
    assert reply.src == "frontend/zmq"
    assert reply.dst == "test/raw"
    assert reply.reply_to == 7
    assert isinstance(reply.body, InferResponse)
    np.testing.assert_array_equal(reply.body.outputs[0].data, [2, 3, 4])


async def test_a_taken_port_is_a_clear_bind_error() -> None:
    async with running_frontend(FakeDataPlane()) as (_, endpoint):
        port = int(endpoint.rsplit(":", 1)[1])
        second = ZmqFrontend(FakeDataPlane(),  # type: ignore[arg-type]
                             Settings(options={"zmq_address": "127.0.0.1", "zmq_port": port}))
        with pytest.raises(OSError, match=f"cannot bind tcp://127.0.0.1:{port}"):
            with anyio.fail_after(WAIT):
                await second.serve()


async def test_concurrent_requests_run_concurrently() -> None:
    """Each ``slow`` request is answered only once all eight are in the data plane at once:
    handled one after another, the first would never be answered (and fail_after fails)."""
    results: list[str] = []
    async with (
        running_frontend(FakeDataPlane(slow_together=8)) as (_, endpoint),
        AsyncClient(endpoint, timeout=WAIT) as client,
    ):

        async def one(index: int) -> None:
            result = await client.infer(
                "slow", {"INPUT0": np.array([index], np.int32)}, request_id=str(index)
            )
            assert int(result.as_numpy("INPUT0")[0]) == index
            results.append(result.id)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as requests:
                for index in range(8):
                    requests.start_soon(one, index)
    assert sorted(results) == [str(index) for index in range(8)]


async def test_malformed_frames_get_invalid_argument_and_serving_goes_on() -> None:
    async with running_frontend(FakeDataPlane()) as (_, endpoint), raw_dealer(endpoint) as peer:
        garbage = failure_of(await ask_raw(peer, [b"", b"\x01", b"\xc1 not msgpack"]))
        assert garbage.code == ErrorCode.INVALID_ARGUMENT.value
        assert "malformed" in garbage.message

        wrong_version = failure_of(await ask_raw(peer, [b"", b"\x09", b""]))
        assert wrong_version.code == ErrorCode.INVALID_ARGUMENT.value

        no_delimiter = failure_of(await ask_raw(peer, wire.encode(infer_envelope(1, "add_one"))))
        assert no_delimiter.code == ErrorCode.INVALID_ARGUMENT.value

        reply = await ask_raw(peer, [b"", *wire.encode(infer_envelope(2, "add_one"))])
        assert isinstance(reply.body, InferResponse)


async def test_kernel_internal_kinds_are_refused() -> None:
    dataplane = FakeDataPlane()
    async with running_frontend(dataplane) as (_, endpoint), raw_dealer(endpoint) as peer:
        shutdown = Envelope(msg_id=3, src="test/raw", dst="frontend", body=Shutdown())
        failure = failure_of(await ask_raw(peer, [b"", *wire.encode(shutdown)]))
    assert failure.code == ErrorCode.INVALID_ARGUMENT.value
    assert "Shutdown" in failure.message
    assert dataplane.handled == 0


async def test_errors_become_failures() -> None:
    async with running_frontend(FakeDataPlane()) as (_, endpoint), raw_dealer(endpoint) as peer:
        unknown = failure_of(await ask_raw(peer, [b"", *wire.encode(infer_envelope(1, "nope"))]))
        broken = failure_of(await ask_raw(peer, [b"", *wire.encode(infer_envelope(2, "broken"))]))
        after = await ask_raw(peer, [b"", *wire.encode(infer_envelope(3, "add_one"))])
    assert (unknown.code, unknown.message) == (
        ErrorCode.NOT_FOUND.value,
        "Request for unknown model: 'nope' is not found",
    )
    assert broken.code == ErrorCode.INTERNAL.value
    assert "the fake backend fell over" in broken.message
    assert isinstance(after.body, InferResponse)


async def test_an_expired_deadline_is_refused_without_calling_the_data_plane() -> None:
    dataplane = FakeDataPlane()
    async with running_frontend(dataplane) as (_, endpoint), raw_dealer(endpoint) as peer:
        expired = infer_envelope(1, "add_one", deadline=time.time() - 1)
        failure = failure_of(await ask_raw(peer, [b"", *wire.encode(expired)]))
        in_time = infer_envelope(2, "add_one", deadline=time.time() + WAIT)
        reply = await ask_raw(peer, [b"", *wire.encode(in_time)])
    assert failure.code == ErrorCode.DEADLINE_EXCEEDED.value
    assert isinstance(reply.body, InferResponse)
    assert dataplane.handled == 1


async def test_stop_accepting_refuses_new_requests_and_finishes_in_flight_ones() -> None:
    dataplane = FakeDataPlane()
    async with (
        running_frontend(dataplane) as (frontend, endpoint),
        raw_dealer(endpoint) as slow_peer,
        raw_dealer(endpoint) as late_peer,
    ):
        with anyio.fail_after(WAIT):
            await slow_peer.send_multipart([b"", *wire.encode(infer_envelope(1, "slow"))])
            await dataplane.slow_started.wait()
        await frontend.stop_accepting()
        late = failure_of(
            await ask_raw(late_peer, [b"", *wire.encode(infer_envelope(2, "add_one"))])
        )
        with anyio.fail_after(WAIT):
            slow_reply = wire.decode((await slow_peer.recv_multipart(copy=False))[1:])
    assert (late.code, late.message) == (ErrorCode.UNAVAILABLE.value, "server is shutting down")
    assert isinstance(slow_reply.body, InferResponse)
    assert slow_reply.reply_to == 1


async def test_a_client_that_vanished_does_not_disturb_the_server() -> None:
    dataplane = FakeDataPlane()
    async with running_frontend(dataplane) as (_, endpoint):
        async with raw_dealer(endpoint) as leaving_peer:
            with anyio.fail_after(WAIT):
                await leaving_peer.send_multipart([b"", *wire.encode(infer_envelope(1, "slow"))])
                await dataplane.slow_started.wait()
        await anyio.sleep(DELAY * 1.5)
        async with raw_dealer(endpoint) as peer:
            reply = await ask_raw(peer, [b"", *wire.encode(infer_envelope(2, "add_one"))])
    assert isinstance(reply.body, InferResponse)
