"""The scheduler's batch I/O, an object the scheduler actor owns and calls.

Owns what crosses to the executors on the inference path: it asks a version to ``pump`` (form
the batches its free instances can take, by its sans-IO queue logic in
``inferd.kernel.actors.scheduler``), sends each batch to its instance's executor with no task
waiting for the reply, hands the reply back to the version and pumps again, and keeps the
timer a version asks for (a batch still allowed to grow). It also carries out a cancellation:
a request still queued leaves its queue; one already in a batch is named to the executor
running it (``CancelRequests``), whose result then goes unread. It never resolves, admits or
answers a request (the actor does) and holds no state of its own beyond what it is given: the
router, the decoupled requests' streams and the actor's ``spawn``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import anyio

from inferd.kernel.actors.scheduler.cuda_windows import for_executor
from inferd.kernel.actors.scheduler.decoupled import DecoupledRequests
from inferd.kernel.actors.scheduler.requests import Queued, SentBatch, Slot, send_in
from inferd.kernel.actors.scheduler.sequence_batcher import SequenceBatch
from inferd.kernel.actors.scheduler.version import Version
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import CancelRequests, InferBatch, Message, StreamBatch

Spawn = Callable[..., object]
"""``spawn(function, *args)``: run ``function(*args)`` in a task the actor owns."""


class BatchDispatch:
    def __init__(self, router: Router, streams: DecoupledRequests, spawn: Spawn) -> None:
        self._router = router
        self._streams = streams
        self._spawn = spawn
        # Bound once: a version's pump calls them for every batch it forms.
        self._send, self._send_sequence = self._start_batch, self._start_sequence_batch

    def pump(self, version: Version) -> None:
        """Start what ``version`` can start now, and set the timer it asks for."""
        wake_ns = version.pump(self._send, self._send_sequence)
        if wake_ns is not None and version.plan_wake(wake_ns):
            self._spawn(self._wake, version, wake_ns)

    async def _wake(self, version: Version, wake_ns: int) -> None:
        await anyio.sleep(max(0, wake_ns - time.perf_counter_ns()) / 1e9)
        version.woken(wake_ns)
        self.pump(version)

    # ------------------------------------------------------------------ cancellation

    def cancel(self, version: Version, queued: Queued) -> bool:
        """``queued``'s client went away: it leaves the queue if it waits there (True), else
        the executor running its batch is told (the batch completes for the others, and
        nobody reads this one's result)."""
        if version.withdraw(queued):
            self.pump(version)  # what waited behind it, or a sequence, may go on now
            return True
        sent = queued.sent
        if sent is not None and not queued.done.is_set():
            try:
                self._router.tell(sent.executor, CancelRequests(sent.ask, (queued.position,)))
            except Exception:  # noqa: BLE001 - a gone executor answers the batch itself
                pass
        return False

    def abandon_stream(self, version: Version, queued: Queued) -> None:
        """The reader of a decoupled request's stream is gone: as ``cancel``. One taken out
        of the queue is counted here and its stream ends (what relays it, an ensemble's
        stream, stops); a running one is counted as CANCELED by its final response."""
        queued.reason = "CANCELED"
        queued.failed = True
        if self.cancel(version, queued):  # no task waits for a stream: count it here
            version.statistics.record_request(
                False, time.perf_counter_ns() - queued.enqueued_ns, 0, "CANCELED")
            if queued.trace is not None:
                queued.trace.stamp("REQUEST_END")
            if queued.stream is not None:
                queued.stream.put(None, True)

    # ------------------------------------------------------------------ batches

    def _start_batch(self, version: Version, slot: Slot, batch: list[Queued]) -> None:
        """Send ``batch`` to ``slot``'s instance; the reply is handed back with no task
        waiting for it (a request's task waits only for its own result)."""
        requests = tuple(q.request for q in batch)
        sent = SentBatch(slot.executor)
        send_in(sent, batch)
        if version.decoupled:
            tokens = self._streams.open(version, slot, batch)
            stream_batch = StreamBatch(version.model, version.version, slot.instance, requests,
                                       tokens)
            sent.ask = self._router.ask_then(
                slot.executor, stream_batch,
                partial(self._finish_stream_batch, version, slot, batch, tokens))
            return
        try:
            requests = for_executor(requests, slot.executor)
        except InferdError as error:  # CUDA memory read for an instance off its GPU failed
            self._finish_batch(version, slot, batch, error)
            return
        message = InferBatch(version.model, version.version, slot.instance, requests)
        # An executor of this process whose instance runs on the loop answers at once: a
        # call, no envelope (and nothing to cancel: the batch is done when it returns).
        reply = self._router.run_here(slot.executor, message)
        if reply is not None:
            self._finish_batch(version, slot, batch, reply)
            return
        sent.ask = self._router.ask_then(slot.executor, message,
                                         partial(self._finish_batch, version, slot, batch))

    def _finish_batch(self, version: Version, slot: Slot, batch: list[Queued],
                      reply: Message | InferdError) -> None:
        version.finish_batch(slot, batch, reply)
        self.pump(version)

    def _finish_stream_batch(self, version: Version, slot: Slot, batch: list[Queued],
                             tokens: tuple[int, ...], reply: Message | InferdError) -> None:
        self._streams.finish_batch(version, slot, batch, tokens, reply)
        self.pump(version)

    def _start_sequence_batch(self, version: Version, slot: Slot,
                              batch: SequenceBatch[Queued], real: list[Queued]) -> None:
        message = InferBatch(version.model, version.version, slot.instance, batch.requests)
        sent = SentBatch(slot.executor)
        send_in(sent, [entry.item for entry in batch.entries])
        sent.ask = self._router.ask_then(
            slot.executor, message,
            partial(self._finish_sequence_batch, version, slot, batch, real))

    def _finish_sequence_batch(self, version: Version, slot: Slot,
                               batch: SequenceBatch[Queued], real: list[Queued],
                               reply: Message | InferdError) -> None:
        version.finish_sequence_batch(slot, batch, real, reply)
        self.pump(version)
