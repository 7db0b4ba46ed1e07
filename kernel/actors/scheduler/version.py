"""One served model version as the scheduler keeps it, and its queue logic, sans I/O.

A ``Version`` holds the version's config and signature, its instances (``Slot``), its request
queue under its queue policy, its dynamic batcher (or sequence batcher), its response order
(``preserve_ordering``) and its statistics. ``admit`` checks a request and queues it;
``pump`` forms the batches that may start now (as many as there are free instances and ready
batches) and hands each to the caller's ``start`` callback, which sends it; ``finish_batch``
(``finish_sequence_batch``) takes an instance's reply and answers the batch's requests. The
version never sends anything, never starts a task and never sleeps: ``pump`` returns when it
wants to be pumped again (a batch's queue delay, a queue timeout), and the caller keeps the
timer. Its clock (``clock``) is the scheduler's monotonic ns clock, replaceable in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.batcher import DynamicBatcher
from inferd.kernel.actors.scheduler.classification import Labels, classify
from inferd.kernel.actors.scheduler.ensembles.served import EnsembleState
from inferd.kernel.actors.scheduler.progress import Progress
from inferd.kernel.actors.scheduler.queue_policy import (
    TIMEOUT_MESSAGE,
    PriorityQueue,
    QueuePolicy,
    queue_full_message,
)
from inferd.kernel.actors.scheduler.request_validation import ModelSignature, check_request
from inferd.kernel.actors.scheduler.requests import Queued, Slot, hand, load_of
from inferd.kernel.actors.scheduler.response_cache import CacheScope
from inferd.kernel.actors.scheduler.response_order import ResponseOrder
from inferd.kernel.actors.scheduler.sequence_batcher import SequenceBatch, SequenceBatcher
from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.modelconfig.sequence_plan import SequencePlan
from inferd.kernel.observability.statistics import VersionStatistics
from inferd.protocols.errors import InferdError, Internal, Unavailable
from inferd.protocols.messages import BatchResult, Failure, InferRequest, InferResponse, Message

# An instance gets its next batch while it still runs one: the executor queues it behind the
# running one (never running both at once), so the instance is not idle for the round trip
# between the processes. Only a batch that cannot grow goes early, though (a model without
# dynamic batching, or a full batch): any other waits here, where requests arriving while the
# instance is busy still join it. Deeper would only make requests wait in the executor. Under a
# queue policy nothing goes early (QueuePolicy.prefetch), as in Triton.
BATCHES_IN_FLIGHT_PER_INSTANCE = 2

# The caller's I/O: send a batch (this version, the instance, its requests).
StartBatch = Callable[["Version", Slot, list[Queued]], None]
StartSequenceBatch = Callable[["Version", Slot, SequenceBatch[Queued], list[Queued]], None]
Clock = Callable[[], int]
Result: TypeAlias = InferResponse | InferdError | None


def batcher_of(config: ModelConfig) -> DynamicBatcher:
    dynamic = config.dynamic_batching
    return DynamicBatcher(
        max_batch_size=int(config.max_batch_size),
        preferred_batch_sizes=tuple(int(s) for s in dynamic.preferred_batch_size),
        max_queue_delay_ns=int(dynamic.max_queue_delay_microseconds) * 1000,
        enabled=config.HasField("dynamic_batching") and config.max_batch_size > 0,
    )


def sequences_of(config: ModelConfig, path: str, slots: list[Slot],
                 current: SequenceBatcher[Queued] | None) -> SequenceBatcher[Queued] | None:
    """The sequence batcher of a sequence model: the current one while its instance count
    holds (its sequences and their state live on), else a new one."""
    if not config.HasField("sequence_batching"):
        return None
    if current is not None and current.instances == len(slots):
        return current
    return SequenceBatcher(SequencePlan.of(config, Path(path) if path else None), len(slots))


@dataclass(eq=False, slots=True)
class Version:
    model: str
    version: int
    config: ModelConfig
    signature: ModelSignature
    batcher: DynamicBatcher
    plan: QueuePolicy
    slots: list[Slot]
    queue: PriorityQueue[Queued] = field(init=False)
    # preserve_ordering: where each request sent to an instance stands in the response order
    order: ResponseOrder[Queued, Result] = field(default_factory=ResponseOrder)
    running: int = 0  # batches sent to instances and not answered
    in_service: int = 0  # requests in those batches
    retired: bool = False
    statistics: VersionStatistics = field(default_factory=VersionStatistics)
    wake_ns: int = 0  # when the pump is next woken (monotonic ns), 0: not planned
    pumping: bool = False  # pump is running: a batch finishing meanwhile leaves it to it
    _pinned: int = 0  # ensemble requests that fixed this version and still need it
    ensemble: EnsembleState | None = None  # set for an ensemble, served without instances
    sequences: SequenceBatcher[Queued] | None = None  # set for a sequence model
    decoupled: bool = False  # model_transaction_policy { decoupled: true }
    labels: Labels = field(default_factory=dict)  # the outputs' label_filename contents
    cache: CacheScope | None = None  # response_cache { enable: true } on a server with a cache
    progress: Progress = field(default_factory=Progress)  # told when busy() may have changed
    clock: Clock = time.perf_counter_ns

    def __post_init__(self) -> None:
        self.queue = PriorityQueue(self.plan)

    @classmethod
    def of(cls, model: str, version: int, config: ModelConfig, slots: list[Slot],
           progress: Progress) -> Version:
        """A version newly served on ``slots`` under ``config``."""
        return cls(model, version, config, ModelSignature.from_config(config),
                   batcher_of(config), QueuePolicy.of(config), slots, progress=progress)

    @property
    def pinned(self) -> int:
        return self._pinned

    @pinned.setter
    def pinned(self, count: int) -> None:
        self._pinned = count
        self.progress.notify()  # a retire may be waiting for the last ensemble request

    def classified(self, request: InferRequest, response: InferResponse) -> InferResponse:
        """``response`` with the outputs ``request`` asks classes of as their top classes."""
        if not request.classification:
            return response
        return classify(response, request.classification, self.labels,
                        batched=self.config.max_batch_size > 0)

    def busy(self) -> bool:
        """Whether requests are queued, running or still to come for an ensemble."""
        waiting = self.sequences.pending() if self.sequences is not None else 0
        return bool(self.queue or self.running or self.pinned or waiting)

    def pending(self) -> int:
        """Requests queued or at an instance (Triton's pending request count)."""
        return len(self.queue) + self.in_service + (
            self.sequences.pending() if self.sequences else 0)

    def reconfigure(self, config: ModelConfig, slots: list[Slot]) -> list[Slot]:
        """Serve on ``slots`` under ``config`` from now on (a reload); the queue keeps its
        requests. Returns the instances replaced."""
        replaced, self.slots = self.slots, slots
        self.config, self.signature = config, ModelSignature.from_config(config)
        self.batcher, self.plan = batcher_of(config), QueuePolicy.of(config)
        self.queue = self.queue.rebuilt(self.plan)
        return replaced

    # ------------------------------------------------------------------ admission

    def admit(self, request: InferRequest, arrived_ns: int,
              stream: ResponseStream | None = None) -> Queued:
        """Check ``request`` against the signature and queue it (on its sequence, for a
        sequence model); raises the error it gets at the door. The caller pumps."""
        batch_size = check_request(request, self.signature)
        shape_key = tuple(tuple(t.shape[1:]) for t in request.inputs)
        level = self.plan.level(request.priority)
        queued = Queued(request, batch_size, shape_key, arrived_ns, level=level, stream=stream)
        if self.sequences is not None:
            self.sequences.admit(queued, request, batch_size, arrived_ns)
        elif not self.queue.admit(queued, level, request.timeout_us, arrived_ns):
            self.statistics.record_request(
                False, time.perf_counter_ns() - arrived_ns, 0, "REJECTED")
            raise Unavailable(queue_full_message(request.id))
        return queued

    def withdraw(self, queued: Queued) -> bool:
        """Take ``queued`` out of the queue (or its sequence's) because its client went away;
        False when it is not waiting there (it is at an instance, or answered). A request that
        never reached an instance takes no place in the response order."""
        if self.sequences is not None:
            withdrawn = self.sequences.withdraw(queued)
        else:
            withdrawn = self.queue.remove(queued)
        if withdrawn and self.progress.waiting:
            self.progress.notify()
        return withdrawn

    def drain(self, error: InferdError) -> None:
        """Answer every request still waiting with ``error`` (shutdown)."""
        left = self.queue.drain()
        if self.sequences is not None:
            left += self.sequences.drain()
        for queued in left:
            hand(queued, error, True)

    # ------------------------------------------------------------------ batch formation

    def pump(self, start: StartBatch, start_sequence: StartSequenceBatch) -> int | None:
        """Start as many batches as there are free instances and ready batches, each through
        ``start`` (``start_sequence`` for a sequence model), and return when to pump again
        (monotonic ns), if a wait is pending. A batch that finishes at once (an executor in
        this process) pumps again only when this returns: this loop sees the instance it
        freed."""
        if self.pumping:
            return None
        try:
            if self.sequences is not None:
                return self._pump_sequences(self.sequences, start_sequence)
            return self._pump_queue(start)
        finally:
            if self.progress.waiting:
                self.progress.notify()

    def _pump_queue(self, start: StartBatch) -> int | None:
        self.pumping = True
        queue = self.queue
        in_flight_limit = BATCHES_IN_FLIGHT_PER_INSTANCE if self.plan.prefetch else 1
        wake: int | None = None
        try:
            self.expire()
            while queue:
                slot = min(self.slots, key=load_of, default=None)
                if slot is None or slot.in_flight >= in_flight_limit:
                    break
                if slot.in_flight and not self.batcher.complete(queue):
                    break  # the batch grows here until an instance is free
                count = self.batcher.take(queue, self.clock())
                if count == 0:
                    wake = self.batcher.wake_at(queue)
                    break
                batch = queue.pop(count)
                self.batch_started(slot, batch)
                if self.plan.preserve_ordering:
                    for queued in batch:
                        self.order.take(queued)
                start(self, slot, batch)
        finally:
            self.pumping = False
        deadline = queue.next_deadline()
        if deadline is not None:  # a REJECT timeout answers when it expires, not later
            wake = deadline + 1 if wake is None else min(wake, deadline + 1)
        return wake

    def _pump_sequences(self, sequences: SequenceBatcher[Queued],
                        start: StartSequenceBatch) -> int | None:
        """Start the next batch of every instance that runs none (one at a time each, so a
        request sees the state its sequence's previous request left)."""
        self.pumping = True
        try:
            now_ns = self.clock()
            sequences.expire(now_ns)
            started = True
            while started:  # an executor in this process answers at once: go round again
                started = False
                for index, slot in enumerate(self.slots):
                    batch = sequences.next_batch(index, now_ns)
                    if batch is not None:
                        real = [entry.item for entry in batch.real if entry.item is not None]
                        self.batch_started(slot, real)
                        start(self, slot, batch, real)
                        started = True
        finally:
            self.pumping = False
        wake: int | None = sequences.wake_at()
        return wake

    def plan_wake(self, wake_ns: int | None) -> bool:
        """Whether a timer must be set for ``wake_ns`` (no wake no later is planned yet)."""
        if wake_ns is None or (self.wake_ns and self.wake_ns <= wake_ns):
            return False
        self.wake_ns = wake_ns
        return True

    def woken(self, wake_ns: int) -> None:
        """The timer set for ``wake_ns`` went off (the caller pumps next)."""
        if self.wake_ns == wake_ns:
            self.wake_ns = 0

    def expire(self) -> None:
        """Apply the queue's timeouts: DELAY requests move behind the live ones (in the
        queue), REJECT ones fail now."""
        for queued in self.queue.expire(self.clock()):
            error = Unavailable(TIMEOUT_MESSAGE)
            queued.reason = "REJECTED"
            if queued.stream is not None:  # no task waits for a decoupled request: count it
                queued.failed = True
                self.statistics.record_request(
                    False, time.perf_counter_ns() - queued.enqueued_ns, 0, "REJECTED")
            hand(queued, error, True)

    # ------------------------------------------------------------------ in flight and back

    def batch_started(self, slot: Slot, batch: list[Queued]) -> None:
        slot.in_flight += 1
        self.running += 1
        self.in_service += len(batch)
        started_ns = time.perf_counter_ns()
        for queued in batch:
            queued.started_ns = started_ns

    def batch_finished(self, slot: Slot, count: int) -> None:
        slot.in_flight -= 1
        self.running -= 1
        self.in_service -= count
        if self.progress.waiting:
            self.progress.notify()

    def deliver(self, queued: Queued, result: Result, final: bool) -> None:
        """Hand a response of a request sent to an instance to its waiter or stream, in
        request order under preserve_ordering."""
        if not self.order:
            hand(queued, result, final)
            return
        for held, part, last in self.order.put(queued, result, final):
            hand(held, part, last)

    def finish_batch(self, slot: Slot, batch: list[Queued], reply: Message | InferdError
                     ) -> None:
        """``slot``'s instance answered ``batch``: each request gets its result."""
        self.batch_finished(slot, len(batch))
        for queued, result in zip(batch, self.results(slot, batch, reply), strict=True):
            self.deliver(queued, result, True)

    def finish_sequence_batch(self, slot: Slot, batch: SequenceBatch[Queued],
                              real: list[Queued], reply: Message | InferdError) -> None:
        """``slot``'s instance answered a sequence batch (``real``: its requests that are
        not padding): each gets its result, its sequence moves on."""
        self.batch_finished(slot, len(real))
        results = self.results(slot, real, reply, count=len(batch.entries))
        assert self.sequences is not None
        for queued, result in self.sequences.complete(batch, results, time.perf_counter_ns()):
            queued.result = result
            queued.done.set()

    def results(self, slot: Slot, batch: list[Queued], reply: Message | InferdError,
                count: int | None = None) -> list[InferResponse | InferdError]:
        """One result per request of an executor's reply to a batch of ``count`` requests
        (``batch`` are the real ones, recorded in the statistics)."""
        count = len(batch) if count is None else count
        if isinstance(reply, InferdError):
            return [reply] * count
        if not isinstance(reply, BatchResult) or len(reply.results) != count:
            error = Internal(f"executor '{slot.executor}' answered a batch of {count}"
                             f" with {type(reply).__name__}")
            return [error] * count
        self.statistics.record_batch(sum(q.batch_size for q in batch), len(batch),
                                     reply.compute_ns)
        for queued in batch:
            queued.compute_ns = reply.compute_ns
            queued.compute_started_ns = reply.started_ns
        return [
            InferdError.from_code(r.code, r.message) if isinstance(r, Failure) else r
            for r in reply.results
        ]
