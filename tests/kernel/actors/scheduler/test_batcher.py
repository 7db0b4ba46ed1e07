"""The dynamic batching policy, driven directly with a fake clock."""

from __future__ import annotations

from dataclasses import dataclass

from inferd.kernel.actors.scheduler.batcher import DynamicBatcher


@dataclass
class Item:
    batch_size: int = 1
    shape_key: tuple[tuple[int, ...], ...] = ((16,),)
    enqueued_ns: int = 0


DELAY = 1_000_000  # 1 ms


def test_without_dynamic_batching_every_request_runs_alone() -> None:
    batcher = DynamicBatcher(max_batch_size=8, enabled=False)
    assert batcher.take([Item(), Item(), Item()], now_ns=0) == 1
    assert batcher.take([], now_ns=0) == 0


def test_waits_for_the_delay_then_sends_what_it_has() -> None:
    batcher = DynamicBatcher(max_batch_size=8, max_queue_delay_ns=DELAY)
    queue = [Item(enqueued_ns=0), Item(enqueued_ns=10)]
    assert batcher.take(queue, now_ns=DELAY - 1) == 0
    assert batcher.wake_at(queue) == DELAY
    assert batcher.take(queue, now_ns=DELAY) == 2


def test_sends_at_once_on_a_preferred_size_or_the_maximum() -> None:
    preferred = DynamicBatcher(max_batch_size=8, preferred_batch_sizes=(4,),
                               max_queue_delay_ns=DELAY)
    assert preferred.take([Item(batch_size=2), Item(batch_size=2)], now_ns=0) == 2
    assert preferred.take([Item(batch_size=2), Item(batch_size=1)], now_ns=0) == 0
    full = DynamicBatcher(max_batch_size=4, max_queue_delay_ns=DELAY)
    assert full.take([Item(batch_size=3), Item(batch_size=1)], now_ns=0) == 2


def test_never_exceeds_max_batch_size_and_never_mixes_shapes() -> None:
    batcher = DynamicBatcher(max_batch_size=4, max_queue_delay_ns=DELAY)
    assert batcher.take([Item(batch_size=3), Item(batch_size=3)], now_ns=0) == 1
    mixed = [Item(), Item(shape_key=((8,),)), Item()]
    assert batcher.take(mixed, now_ns=0) == 1


def test_zero_delay_sends_whatever_is_queued() -> None:
    batcher = DynamicBatcher(max_batch_size=8)
    assert batcher.take([Item(), Item(), Item()], now_ns=0) == 3


def test_complete_says_whether_waiting_could_grow_the_head_batch() -> None:
    batcher = DynamicBatcher(max_batch_size=4, preferred_batch_sizes=(3,))
    assert not batcher.complete([Item()])  # one more could join
    assert batcher.complete([Item(batch_size=3)])  # a preferred size
    assert batcher.complete([Item(batch_size=2), Item(batch_size=2)])  # full
    assert batcher.complete([Item(), Item(shape_key=((8,),))])  # the next cannot join
    assert DynamicBatcher(max_batch_size=4, enabled=False).complete([Item()])
    assert DynamicBatcher(max_batch_size=1).complete([Item()])


def test_the_delay_counts_from_the_oldest_request_of_the_batch_not_the_first() -> None:
    batcher = DynamicBatcher(max_batch_size=8, max_queue_delay_ns=DELAY)
    # A higher-priority request (or a DELAYed one behind it) puts a newer one first.
    queue = [Item(enqueued_ns=DELAY), Item(enqueued_ns=0)]
    assert batcher.wake_at(queue) == DELAY
    assert batcher.take(queue, now_ns=DELAY) == 2
    assert batcher.take(queue, now_ns=DELAY - 1) == 0
