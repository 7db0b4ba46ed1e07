"""What the scheduler keeps of one request on its way through a version's queue (``Queued``),
of one instance it may send batches to (``Slot``) and of a batch sent there (``SentBatch``),
and how a request gets its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.sdk.tracing import Trace
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import InferRequest, InferResponse


@dataclass(eq=False, slots=True)
class Slot:
    """An instance of a version: its executor's address and its id there."""

    executor: str
    instance: int
    in_flight: int = 0  # batches sent to the instance and not answered yet
    # Whether a readiness check asks its executor (False once it said the instance has no
    # check of its own, as a python model without is_ready(): no round trip then).
    checks_readiness: bool = True


@dataclass(eq=False, slots=True)
class Queued:
    request: InferRequest
    batch_size: int
    shape_key: tuple[tuple[int, ...], ...]
    enqueued_ns: int
    # asyncio's own event: anyio's looks up the running backend on every construction, and
    # the kernel runs on asyncio only.
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: InferResponse | InferdError | None = None
    started_ns: int = 0
    compute_ns: tuple[int, int, int] = (0, 0, 0)
    compute_started_ns: int = 0  # when its instance began its batch (the executor's clock)
    level: int = 0  # priority level: lower goes first
    stream: ResponseStream | None = None  # a decoupled model's request: its responses go here
    failed: bool = False  # a decoupled request answered with an error on the way
    executor: str = ""  # where a decoupled request runs (its stream ends if that one restarts)
    trace: Trace | None = None  # a traced decoupled request (its stream ends the request)
    reason: str = ""  # why it failed, when the scheduler knows better than failure_reason()
    sent: SentBatch | None = None  # the batch it went to an instance in
    position: int = 0  # its index in that batch


@dataclass(eq=False, slots=True)
class SentBatch:
    """A batch at an executor, as a cancelled request's ``CancelRequests`` names it: the
    executor and the ask that carried the batch (the request's ``position`` says where in it
    the request is). It holds no request: a request refers to it, so a reference back would
    make a cycle per batch, left to the garbage collector."""

    executor: str
    ask: int = 0


def send_in(sent: SentBatch, batch: Sequence[Queued | None]) -> None:
    """Mark each request of ``batch`` as sent in ``sent``, at its position (``None`` stands
    for a sequence batch's null request)."""
    for position, queued in enumerate(batch):
        if queued is not None:
            queued.sent = sent
            queued.position = position


def failure_reason(queued: Queued) -> str:
    """Triton's ``reason`` label of a failed request: a request an instance had (its backend
    failed, or its executor died) is BACKEND; REJECTED (queue full, queue timeout) and
    CANCELED are set where they happen; anything else (unload, shutdown) is OTHER."""
    return queued.reason or ("BACKEND" if queued.started_ns else "OTHER")


def load_of(slot: Slot) -> int:
    return slot.in_flight


def hand(queued: Queued, result: InferResponse | InferdError | None, final: bool) -> None:
    """Give ``queued`` its answer: to its stream (a decoupled request) or its waiting task."""
    if queued.stream is not None:
        queued.stream.put(result, final)
        return
    queued.result = result
    queued.done.set()
