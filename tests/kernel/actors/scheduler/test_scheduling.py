"""The scheduler's queue logic driven directly (inferd.kernel.actors.scheduler), with no router, no
socket and no event loop: a version's admission, batch formation (max_batch_size, preferred
sizes, queue delay), priority levels and queue timeouts, the hand-off to busy and idle
instances, replies back to requests (preserve_ordering), drain at shutdown, and the progress
wakeup the actor's waits rely on. The clock is the test's: every wait is a number."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.progress import Progress
from inferd.kernel.actors.scheduler.queue_policy import TIMEOUT_MESSAGE, QueuePolicy
from inferd.kernel.actors.scheduler.request_validation import ModelSignature
from inferd.kernel.actors.scheduler.requests import Queued, Slot, failure_reason
from inferd.kernel.actors.scheduler.sequence_batcher import SequenceBatch
from inferd.kernel.actors.scheduler.version import Version, batcher_of
from inferd.protocols.errors import Internal, InvalidArgument, Unavailable
from inferd.protocols.messages import BatchResult, Failure, InferRequest, InferResponse, Tensor

MS = 1_000_000  # ns

SIMPLE = """
name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * MS

    def __call__(self) -> int:
        return self.now


class Sent:
    """The ``start`` callback of a pump: records each batch and the instance it went to."""

    def __init__(self) -> None:
        self.batches: list[tuple[Slot, list[Queued]]] = []

    def __call__(self, version: Version, slot: Slot, batch: list[Queued]) -> None:
        self.batches.append((slot, batch))

    def sizes(self) -> list[int]:
        return [len(batch) for _, batch in self.batches]


def no_sequences(version: Version, slot: Slot, batch: SequenceBatch[Queued],
                 real: list[Queued]) -> None:
    raise AssertionError("not a sequence model")


def version(extra: str = "", *, instances: int = 1, clock: Clock | None = None,
            max_batch_size: int = 8) -> Version:
    config = text_format.Parse(SIMPLE.replace("max_batch_size: 8",
                                              f"max_batch_size: {max_batch_size}") + extra,
                               ModelConfig())
    made = Version("m", 1, config, ModelSignature.from_config(config), batcher_of(config),
                   QueuePolicy.of(config), [Slot("executor/cpu0", i) for i in range(instances)])
    if clock is not None:
        made.clock = clock
    return made


def request(rows: int = 1, *, priority: int = 0, timeout_us: int = 0, id: str = "") -> InferRequest:
    data = np.zeros((rows, 2), dtype=np.int32)
    return InferRequest("m", (Tensor("IN", "INT32", data.shape, data),), id=id,
                        priority=priority, timeout_us=timeout_us)


def answer(batch: list[Queued]) -> BatchResult:
    return BatchResult(tuple(InferResponse("m", "1", (), id=q.request.id) for q in batch),
                       compute_ns=(1, 2, 3))


def admit(target: Version, count: int, clock: Clock | None = None, **options: int) -> list[Queued]:
    now = clock.now if clock is not None else 0
    return [target.admit(request(**options), now) for _ in range(count)]


# ---------------------------------------------------------------------- batch formation


def test_without_dynamic_batching_every_request_runs_alone() -> None:
    target = version()
    admit(target, 3)
    sent = Sent()
    target.pump(sent, no_sequences)
    # No batching: a batch cannot grow, so the one instance gets two (one running, one next).
    assert sent.sizes() == [1, 1]
    assert target.running == 2 and target.in_service == 2 and len(target.queue) == 1


def test_dynamic_batching_fills_a_batch_up_to_max_batch_size() -> None:
    clock = Clock()
    target = version("dynamic_batching { }", clock=clock, max_batch_size=4)
    admit(target, 6, clock)
    sent = Sent()
    assert target.pump(sent, no_sequences) is None
    # 4 go at once; the 2 left could still grow, so they wait for the instance to be free.
    assert sent.sizes() == [4]
    slot, batch = sent.batches[0]
    assert slot.in_flight == 1 and target.in_service == 4
    target.finish_batch(slot, batch, answer(batch))
    assert all(q.done.is_set() and isinstance(q.result, InferResponse) for q in batch)
    assert slot.in_flight == 0 and target.running == 0 and target.in_service == 0
    target.pump(sent, no_sequences)
    assert sent.sizes() == [4, 2]
    assert target.statistics.execution_count == 1 and target.statistics.inference_count == 4


def test_requests_whose_rows_overflow_the_batch_wait_for_the_next() -> None:
    target = version("dynamic_batching { }", instances=2, max_batch_size=4)
    for rows in (3, 2):
        target.admit(request(rows), 0)
    sent = Sent()
    target.pump(sent, no_sequences)
    assert sent.sizes() == [1, 1]  # 3 + 2 rows > 4: each its own batch, one per instance
    assert {slot.instance for slot, _ in sent.batches} == {0, 1}


def test_a_partial_batch_waits_for_the_queue_delay_and_a_preferred_size_goes_at_once() -> None:
    clock = Clock()
    target = version("dynamic_batching { preferred_batch_size: [ 2 ] "
                     "max_queue_delay_microseconds: 5000 }", clock=clock)
    sent = Sent()
    admit(target, 1, clock)
    wake = target.pump(sent, no_sequences)
    assert sent.sizes() == [] and wake == clock.now + 5 * MS
    admit(target, 1, clock)
    target.pump(sent, no_sequences)
    assert sent.sizes() == [2]  # the preferred size: no need to wait
    slot, batch = sent.batches[0]
    target.finish_batch(slot, batch, answer(batch))
    first = clock.now
    admit(target, 1, clock)
    clock.now += 2 * MS
    assert target.pump(sent, no_sequences) == first + 5 * MS
    assert sent.sizes() == [2]
    clock.now = first + 5 * MS
    assert target.pump(sent, no_sequences) is None
    assert sent.sizes() == [2, 1]


def test_plan_wake_asks_for_a_timer_only_when_none_earlier_is_planned() -> None:
    target = version()
    assert target.plan_wake(None) is False
    assert target.plan_wake(100) is True
    assert target.plan_wake(200) is False
    assert target.plan_wake(50) is True
    target.woken(100)  # a stale timer does not clear the one planned
    assert target.wake_ns == 50
    target.woken(50)
    assert target.wake_ns == 0


# ---------------------------------------------------------------------- queue policy


def test_priority_levels_go_first_and_keep_requests_back_from_a_busy_instance() -> None:
    target = version("dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
                     max_batch_size=1)
    low = target.admit(request(priority=2, id="low"), 0)
    sent = Sent()
    target.pump(sent, no_sequences)
    assert [q.request.id for _, b in sent.batches for q in b] == ["low"]
    later_low = target.admit(request(priority=2, id="low2"), 0)
    high = target.admit(request(priority=1, id="high"), 0)
    target.pump(sent, no_sequences)
    # Under a queue policy nothing goes to a busy instance: both wait in the queue.
    assert len(sent.batches) == 1 and len(target.queue) == 2
    slot, batch = sent.batches[0]
    target.finish_batch(slot, batch, answer(batch))
    assert low.done.is_set()
    target.pump(sent, no_sequences)
    assert [q for q in sent.batches[1][1]] == [high]
    assert not later_low.done.is_set()


def test_a_reject_timeout_fails_the_request_when_it_expires() -> None:
    clock = Clock()
    target = version("dynamic_batching { default_queue_policy { timeout_action: REJECT "
                     "default_timeout_microseconds: 3000 } }", clock=clock, instances=0)
    [queued] = admit(target, 1, clock)
    sent = Sent()
    assert target.pump(sent, no_sequences) == clock.now + 3 * MS + 1  # its deadline, then
    clock.now += 3 * MS + 1
    target.pump(sent, no_sequences)
    assert queued.done.is_set() and isinstance(queued.result, Unavailable)
    assert queued.result.message == TIMEOUT_MESSAGE
    assert failure_reason(queued) == "REJECTED" and not target.busy()


def test_a_full_queue_refuses_at_the_door_and_counts_the_rejection() -> None:
    target = version("dynamic_batching { default_queue_policy { max_queue_size: 1 } }",
                     instances=0)
    target.admit(request(), 0)
    with pytest.raises(Unavailable, match=r"\[request id: r7\] Exceeds maximum queue size"):
        target.admit(request(id="r7"), 0)
    assert target.statistics.failures["REJECTED"] == 1
    assert len(target.queue) == 1


def test_a_request_that_does_not_fit_the_signature_is_refused_and_not_queued() -> None:
    target = version()
    data = np.zeros((1, 3), dtype=np.int32)
    with pytest.raises(InvalidArgument):
        target.admit(InferRequest("m", (Tensor("IN", "INT32", data.shape, data),)), 0)
    assert not target.busy()


# ---------------------------------------------------------------------- instances


def test_batches_go_to_the_least_loaded_instance_and_a_busy_one_gets_one_more_at_most() -> None:
    target = version(instances=2)
    admit(target, 5)
    sent = Sent()
    target.pump(sent, no_sequences)
    # Each instance runs one and has one queued behind it; the fifth waits.
    assert [slot.instance for slot, _ in sent.batches] == [0, 1, 0, 1]
    assert len(target.queue) == 1
    slot, batch = sent.batches[1]
    target.finish_batch(slot, batch, answer(batch))
    target.pump(sent, no_sequences)
    assert sent.batches[-1][0].instance == 1 and not target.queue


def test_an_idle_instance_takes_a_growing_batch_a_busy_one_does_not() -> None:
    clock = Clock()
    target = version("dynamic_batching { }", clock=clock)
    admit(target, 1, clock)
    sent = Sent()
    target.pump(sent, no_sequences)
    assert sent.sizes() == [1]  # idle: the batch goes as it is (no queue delay)
    admit(target, 3, clock)
    target.pump(sent, no_sequences)
    assert sent.sizes() == [1]  # busy: requests keep joining here
    admit(target, 5, clock)
    target.pump(sent, no_sequences)
    assert sent.sizes() == [1, 8]  # full: it cannot grow, so it goes behind the running one


def test_an_executor_failure_or_a_wrong_reply_answers_every_request_of_the_batch() -> None:
    target = version(instances=1)
    admit(target, 2)
    sent = Sent()
    target.pump(sent, no_sequences)
    (slot, first), (_, second) = sent.batches
    target.finish_batch(slot, first, Unavailable("gone"))
    assert isinstance(first[0].result, Unavailable) and failure_reason(first[0]) == "BACKEND"
    target.finish_batch(slot, second, BatchResult(()))
    assert isinstance(second[0].result, Internal)
    assert "answered a batch of 1 with BatchResult" in second[0].result.message


def test_a_failure_in_a_batch_result_is_that_request_s_error() -> None:
    target = version("dynamic_batching { }")
    admit(target, 2)
    sent = Sent()
    target.pump(sent, no_sequences)
    slot, batch = sent.batches[0]
    reply = BatchResult((InferResponse("m", "1", ()), Failure("INVALID_ARGUMENT", "bad row")))
    target.finish_batch(slot, batch, reply)
    assert isinstance(batch[0].result, InferResponse)
    assert isinstance(batch[1].result, InvalidArgument) and batch[1].result.message == "bad row"


def test_preserve_ordering_holds_a_later_answer_until_the_earlier_one() -> None:
    target = version("dynamic_batching { preserve_ordering: true }", instances=2,
                     max_batch_size=1)
    admit(target, 2)
    sent = Sent()
    target.pump(sent, no_sequences)
    (slot0, first), (slot1, second) = sent.batches
    target.finish_batch(slot1, second, answer(second))
    assert not second[0].done.is_set()
    target.finish_batch(slot0, first, answer(first))
    assert first[0].done.is_set() and second[0].done.is_set()


# ---------------------------------------------------------------------- drain and progress


def test_drain_answers_everything_still_queued() -> None:
    target = version(instances=0)
    waiting = admit(target, 3)
    assert target.busy() and target.pending() == 3
    target.drain(Unavailable("server is shutting down"))
    assert all(isinstance(q.result, Unavailable) for q in waiting)
    assert not target.busy() and target.pending() == 0


def test_busy_counts_queued_running_and_pinned_work() -> None:
    target = version()
    assert not target.busy()
    target.pinned += 1
    assert target.busy()
    target.pinned -= 1
    admit(target, 1)
    sent = Sent()
    target.pump(sent, no_sequences)
    assert target.busy() and not target.queue  # at the instance
    slot, batch = sent.batches[0]
    target.finish_batch(slot, batch, answer(batch))
    assert not target.busy()


class Counting(Progress):
    """A progress with a waiter that never stops waiting: counts the wakeups."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = 0
        self.waiting = True

    def notify(self) -> None:
        self.notified += 1
        super().notify()
        self.waiting = True


def test_what_changes_busy_notifies_progress() -> None:
    target = version()
    target.progress = progress = Counting()
    target.pinned += 1
    target.pinned -= 1
    assert progress.notified == 2
    admit(target, 1)
    sent = Sent()
    target.pump(sent, no_sequences)
    assert progress.notified == 3
    slot, batch = sent.batches[0]
    target.finish_batch(slot, batch, answer(batch))
    assert progress.notified == 4
