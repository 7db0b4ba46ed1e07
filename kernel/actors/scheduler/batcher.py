"""The dynamic batching policy: which queued requests run together, and when.

A pure object over a queue of ``Pending`` items (batch size, variable-dim key, arrival time):
``take(queue, now)`` returns how many of the first items to send as one batch now, or 0 to
keep waiting, and ``wake_at`` says when waiting ends. It follows Triton's dynamic batcher:
requests are taken in queue order (``queue_policy``: by priority level, then arrival, DELAYed
ones last in their level) up to ``max_batch_size`` batch elements, never mixing requests
whose non-batch dimensions differ; a batch goes at once when it reaches a preferred
size (or the maximum), otherwise when its oldest request has waited
``max_queue_delay_microseconds`` (the oldest of the batch, as in Triton, not the first).
Without dynamic batching every request runs alone.
``complete(queue)`` says whether the head batch could still grow, for a scheduler deciding
whether to send it to an instance that is still busy. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Pending(Protocol):
    @property
    def batch_size(self) -> int: ...

    @property
    def shape_key(self) -> tuple[tuple[int, ...], ...]: ...

    @property
    def enqueued_ns(self) -> int: ...


@dataclass(frozen=True, slots=True)
class DynamicBatcher:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_ns: int = 0
    enabled: bool = True

    def _candidate(self, queue: Sequence[Pending]) -> tuple[int, int, int]:
        """(count, batch elements, oldest arrival) of the longest compatible prefix of the
        queue. The oldest need not be the first: a higher priority level, or a request whose
        queue timeout was DELAYed to the back of its level, changes the order."""
        count = total = 0
        head = queue[0]
        key, oldest = head.shape_key, head.enqueued_ns
        for item in queue:
            if item.shape_key != key or total + item.batch_size > self.max_batch_size:
                break
            count += 1
            total += item.batch_size
            oldest = min(oldest, item.enqueued_ns)
        return max(count, 1), max(total, head.batch_size), oldest

    def take(self, queue: Sequence[Pending], now_ns: int) -> int:
        if not queue:
            return 0
        if not self.enabled or self.max_batch_size <= 1:
            return 1
        count, total, oldest = self._candidate(queue)
        if count < len(queue):
            return count  # the next request cannot join: waiting would not grow this batch
        full = total >= self.max_batch_size or total in self.preferred_batch_sizes
        if full or now_ns - oldest >= self.max_queue_delay_ns:
            return count
        return 0

    def complete(self, queue: Sequence[Pending]) -> bool:
        """Whether the batch at the head of ``queue`` cannot grow by waiting: it is full or
        at a preferred size, the next request cannot join it, or nothing is batched."""
        if not self.enabled or self.max_batch_size <= 1:
            return True
        count, total, _ = self._candidate(queue)
        return (count < len(queue) or total >= self.max_batch_size
                or total in self.preferred_batch_sizes)

    def wake_at(self, queue: Sequence[Pending]) -> int | None:
        """When a batch held back by ``take`` must go anyway (monotonic ns)."""
        if not queue:
            return None
        return self._candidate(queue)[2] + self.max_queue_delay_ns
