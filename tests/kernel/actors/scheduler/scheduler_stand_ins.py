"""The scheduler actor driven through its messages in one process, for its unit tests: a
router, the real ``SchedulerActor`` and a stand-in executor at ``executor/cpu0``, no sockets.

``StandInExecutor`` answers each batch with its inputs echoed once its ``gate`` is open and
records what it saw: each batch's size, the ids it ran, the asks that carried the batches and
the ``CancelRequests`` it was told. ``running()`` starts the three (the gate held closed when
asked) and bounds everything inside by ``WAIT_SECS``; ``Harness`` serves versions, sends
requests and reads the scheduler's metrics. The ``no_recheck`` fixture (tests/kernel/conftest.py)
puts the waits' safety re-check out of reach, so a missing wakeup shows as a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import numpy as np
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.actor import SchedulerActor
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import SCHEDULER, cpu_executor
from inferd.kernel.runtime.router import Router
from inferd.protocols.messages import (
    Ack,
    BatchResult,
    CancelRequests,
    Envelope,
    InferBatch,
    InferRequest,
    InferResponse,
    Metrics,
    MetricsRequest,
    ServeVersion,
    StreamBatch,
    Tensor,
)

WAIT_SECS = 10.0  # bound of every wait here; a pass takes milliseconds
EXECUTOR = cpu_executor(0)


def request(value: int = 0, rows: int = 1, version: str = "") -> InferRequest:
    """A request for model ``m``: ``IN`` of ``rows`` rows of ``value``, its id ``value``."""
    data = np.full((rows, 2), value, dtype=np.int32)
    return InferRequest("m", (Tensor("IN", "INT32", data.shape, data),), version=version,
                        id=str(value))


class StandInExecutor(Actor):
    def __init__(self, router: Router) -> None:
        super().__init__(router, EXECUTOR)
        self.batches: list[int] = []
        self.ran: list[str] = []
        self.asks: list[int] = []
        self.told: list[CancelRequests] = []
        self.gate = anyio.Event()
        self.gate.set()
        self.started = anyio.Event()

    def hold(self) -> None:
        """Hold the next batches until ``gate`` is set; ``started`` tells one arrived."""
        self.gate, self.started = anyio.Event(), anyio.Event()

    def accept(self, envelope: Envelope) -> None:
        if isinstance(envelope.body, CancelRequests):
            self.told.append(envelope.body)
            return
        if isinstance(envelope.body, (InferBatch, StreamBatch)):
            self.asks.append(envelope.msg_id)
        super().accept(envelope)

    async def on_infer_batch(self, message: InferBatch, envelope: Envelope) -> BatchResult:
        await self._run(message)
        return BatchResult(tuple(
            InferResponse(message.model, str(message.version), r.inputs, id=r.id)
            for r in message.requests))

    async def on_stream_batch(self, message: StreamBatch, envelope: Envelope) -> BatchResult:
        await self._run(message)
        return BatchResult(())

    async def _run(self, message: InferBatch | StreamBatch) -> None:
        self.batches.append(len(message.requests))
        self.ran += [r.id for r in message.requests]
        self.started.set()
        await self.gate.wait()


@dataclass
class Harness:
    router: Router
    scheduler: SchedulerActor
    instance: StandInExecutor
    config: str  # model ``m``'s config text, the test module's own

    async def serve(self, version: int = 1, extra: str = "",
                    instances: tuple[tuple[str, int], ...] = ((EXECUTOR, 0),)) -> None:
        """Serve ``version`` of the config, with ``extra`` config text added."""
        parsed = text_format.Parse(self.config + extra, ModelConfig())
        reply = await self.router.ask(SCHEDULER, ServeVersion(
            parsed.name, version, parsed.SerializeToString(), instances))
        assert isinstance(reply, Ack)

    async def infer(self, value: int = 0, version: str = "") -> InferResponse:
        reply = await self.router.call(SCHEDULER, request(value, version=version))
        assert isinstance(reply, InferResponse)
        return reply

    def start_infer(self, value: int) -> asyncio.Task[InferResponse]:
        return asyncio.get_running_loop().create_task(self.infer(value))

    async def metric(self, name: str, **labels: str) -> float:
        reply = await self.router.ask(SCHEDULER, MetricsRequest())
        assert isinstance(reply, Metrics)
        return sum(value for sample, found, value in reply.samples
                   if sample == name and labels.items() <= found.items())

    async def until_pending(self, count: int) -> None:
        while await self.metric("nv_inference_pending_request_count") != count:
            await asyncio.sleep(0.001)


@asynccontextmanager
async def running(config: str, held: bool = False) -> AsyncIterator[Harness]:
    """A router with the scheduler and the stand-in executor (its gate closed if ``held``),
    serving ``config`` when asked; every wait inside bounded."""
    router = Router("main")
    async with anyio.create_task_group() as tasks:
        scheduler = SchedulerActor(router)
        instance = StandInExecutor(router)
        if held:
            instance.hold()
        await tasks.start(scheduler.run)
        await tasks.start(instance.run)
        with anyio.fail_after(WAIT_SECS):
            yield Harness(router, scheduler, instance, config)
        tasks.cancel_scope.cancel()
