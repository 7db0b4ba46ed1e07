"""One backend instance in an executor, and how a batch runs on it.

Owns an instance's slot (``InstanceSlot``): its worker thread of one, so batches run one after
another in order and the instance is never called concurrently; the calls queued on it; and
its recent ``execute`` durations, from which it decides whether a batch may run on the event
loop instead (only when the instance allows it and its batches take less than a thread
hand-off). A fast instance whose thread still has calls queued (its first batch always goes
there: nothing is known of it yet) runs its next batches on the loop once those are done, in
the order they came, so a steady flow of batches cannot keep it on the thread for good; one
measured slow on its thread whose thread CPU time per run says it is fast is tried on the loop
again now and then. It runs a batch (or a decoupled model's batch) on the instance, with
the model named in the log context, and turns the outcome into the ``BatchResult`` the
scheduler expects: one response or one failure per request, and the input/infer/output
nanoseconds. It never loads or unloads a model and knows no address or message other than
the batch it is given (``inferd.kernel.actors.executor.actor`` owns those). A batch naming CUDA
shared memory goes through the process's ``DeviceMemory`` on the way in and out.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from inferd.kernel.actors.executor.device_memory import DeviceMemory
from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.backends import NO_WINDOWS, NONE_CANCELLED, CancelledRequests, Instance
from inferd.protocols.device_tensors import on_device
from inferd.protocols.errors import InferdError, Internal, to_failure
from inferd.protocols.messages import (
    BatchResult,
    Failure,
    InferBatch,
    InferResponse,
    StreamBatch,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

INLINE_BELOW_NS = 150_000
RECENT_RUNS = 16
# Runs on the thread after which an instance whose thread CPU time per run says it is fast
# runs once on the loop again, to be measured there: a run on a thread of a busy process also
# counts its waits for the GIL and to be scheduled, so an instance first measured under load
# (its executor just restarted under the same clients) never measured fast again and stayed
# on its thread. Only one whose runs took under a few GIL switch intervals (5 ms each) is
# tried: one that waits that long on something else (a device, a file) would hold the loop.
TRY_LOOP_AFTER_RUNS = 64
TRY_LOOP_BELOW_NS = 10_000_000


@dataclass(slots=True)
class InstanceSlot:
    """A loaded instance, the thread its batches run on, and what its runs have cost."""

    instance: Instance
    thread: ThreadPoolExecutor  # one worker: batches run one after another, in order
    load_id: int
    queued: int = 0  # calls submitted to the thread and not finished
    # Calls of a fast instance waiting for the thread's queue to drain, to run on the loop
    # in this order; the first is woken when the thread's last call is done.
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)
    # execute's durations of late: the fastest says what the model costs, as a busy machine
    # only ever makes a run slower (descheduled mid-run, waiting for the GIL)
    recent_ns: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_RUNS))
    cpu_ns: int = 0  # the last batch's CPU time on the thread it ran on: no waits counted
    # Whether its batches may run on the loop at all (the instance allows it, and the loop is
    # not the server's own while its model batches: there a batch run on the loop would keep
    # the next requests from arriving, and every batch would be of one request).
    loop_allowed: bool = True
    thread_runs: int = 0  # calls run on the thread since the last on the loop
    # The CUDA shared memory this process opened, for batches that name some.
    device_memory: DeviceMemory | None = None

    async def run(self, function: Callable[[], T]) -> T:
        if self.waiting or (self.queued and self._fast()):
            return await self._after_queue(function)
        self.queued += 1
        self.thread_runs += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.thread, function)
        finally:
            self.queued -= 1
            if not self.queued:
                self._wake_next()

    async def _after_queue(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the loop once the thread's queue and the calls that waited
        before this one are done."""
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
            self.thread_runs = 0
            return function()
        finally:
            first = self.waiting[0] is turn
            self.waiting.remove(turn)
            if first and not self.queued:
                self._wake_next()

    def _wake_next(self) -> None:
        if self.waiting and not self.waiting[0].done():
            self.waiting[0].set_result(None)

    def _fast(self) -> bool:
        if not self.loop_allowed or not self.instance.runs_on_event_loop or not self.recent_ns:
            return False
        fastest = min(self.recent_ns)
        return fastest < INLINE_BELOW_NS or (
            self.thread_runs >= TRY_LOOP_AFTER_RUNS and self.cpu_ns < INLINE_BELOW_NS
            and fastest < TRY_LOOP_BELOW_NS)

    def runs_inline(self) -> bool:
        return self.queued == 0 and not self.waiting and self._fast()

    def run_inline(self, batch: InferBatch) -> Outcome | BaseException:
        """``batch`` run here, on the event loop (``runs_inline`` said so)."""
        self.thread_runs = 0
        return execute_batch(self, batch, NONE_CANCELLED)

    def observe(self, duration_ns: int) -> None:
        self.recent_ns.append(duration_ns)


def _call(function: Callable[..., Any], *arguments: Any) -> Any:
    return function(*arguments)


_NAMED_CALLS: dict[tuple[str, int], Callable[..., Any]] = {}


def named_call(model: str, version: int) -> Callable[..., Any]:
    """``_call`` with its code named ``model '<model>' version <version>``: the frame a
    traceback of the backend's call shows, faulthandler's on a fatal signal included."""
    call = _NAMED_CALLS.get((model, version))
    if call is None:
        name = f"model '{model}' version {version}"
        code = _call.__code__.replace(co_name=name, co_qualname=name)
        call = _NAMED_CALLS[(model, version)] = types.FunctionType(code, _call.__globals__)
    return call


# The results, the (input, infer, output) nanoseconds and when the batch started (for traces).
Outcome = tuple[list[InferResponse | InferdError], tuple[int, int, int], int]


def execute_batch(slot: InstanceSlot, batch: InferBatch,
                  cancelled: CancelledRequests) -> Outcome | BaseException:
    """Run ``batch`` on its instance: the results with (input, infer, output) nanoseconds, or
    the exception the backend raised. ``cancelled`` names the requests whose clients went
    away, for the instance to see while it runs (``Instance.cancelled``)."""
    started = time.perf_counter_ns()
    cpu_started = time.thread_time_ns()
    instance = slot.instance
    instance.phase_ns = None
    instance.cancelled = cancelled
    requests, memory = batch.requests, slot.device_memory
    try:
        with log_context.bound(batch.model, batch.version):  # the model's own lines name it
            call = named_call(batch.model, batch.version)
            if memory is not None and any(map(on_device, requests)):
                prepared = memory.prepare(requests, instance)
                instance.window_addresses = prepared.addresses
                results = memory.finish(prepared, call(instance.execute, prepared.requests))
            else:
                results = call(instance.execute, requests)
    except Exception as error:  # noqa: BLE001 - a backend bug fails this batch only
        return error
    finally:
        instance.cancelled = NONE_CANCELLED
        instance.window_addresses = NO_WINDOWS
        slot.cpu_ns = time.thread_time_ns() - cpu_started
    total = time.perf_counter_ns() - started
    return results, instance.phase_ns or (0, total, 0), started


def execute_stream_batch(slot: InstanceSlot, batch: StreamBatch,
                         emit: Callable[[int, InferResponse | InferdError | None, bool], None],
                         cancelled: CancelledRequests) -> None:
    """Run a decoupled model's ``batch`` on its instance; ``emit`` sends each response."""
    slot.instance.cancelled = cancelled  # a decoupled model's senders keep it past the call
    try:
        with log_context.bound(batch.model, batch.version):
            named_call(batch.model, batch.version)(slot.instance.execute_decoupled,
                                                   batch.requests, emit)
    finally:
        slot.instance.cancelled = NONE_CANCELLED


def batch_result(
    batch: InferBatch, slot: InstanceSlot, outcome: Outcome | BaseException
) -> BatchResult:
    """The scheduler's answer for ``batch``: one reply per request, or the same failure for
    every request when the backend raised or answered the wrong number of requests."""
    if isinstance(outcome, BaseException):
        log.error("instance %d of %s failed", batch.instance, batch.model, exc_info=outcome)
        failure = to_failure(outcome)
        return BatchResult(tuple(failure for _ in batch.requests))
    results, compute_ns, started_ns = outcome
    slot.observe(sum(compute_ns))
    if len(results) != len(batch.requests):
        failure = to_failure(Internal(
            f"backend returned {len(results)} responses for {len(batch.requests)} requests"))
        return BatchResult(tuple(failure for _ in batch.requests))
    return BatchResult(tuple(as_reply(result) for result in results), compute_ns, started_ns)


def as_reply(result: InferResponse | InferdError) -> InferResponse | Failure:
    if isinstance(result, InferdError):
        return to_failure(result)
    return result
