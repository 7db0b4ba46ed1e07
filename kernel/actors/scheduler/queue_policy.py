"""A model version's request queue under Triton's queue policies: priority levels, each with
its own ``ModelQueuePolicy`` (``max_queue_size``, ``default_timeout_microseconds``,
``allow_timeout_override``, ``timeout_action`` REJECT or DELAY).

``QueuePolicy.of(config)`` reads the policies of ``dynamic_batching`` once; a model without
dynamic batching has none (Triton's default scheduler applies no queue policy: no priorities,
no timeouts, no limit). ``PriorityQueue`` holds the waiting requests, per level a queue of live
requests (arrival order, each with its deadline) and a queue of delayed ones (requests of a
DELAY level whose timeout expired, in the order they expired). The order requests leave it is
Triton's: level by level (1 first), and within a level the live requests before the delayed
ones, so a delayed request of a higher level still goes before a live one of a lower level.
``expire(now)`` applies the timeouts (moving DELAY requests behind the live ones, returning
the REJECT ones to fail). It reads no clock and does no I/O; the scheduler drives it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, overload

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelQueuePolicy

T = TypeVar("T")

TIMEOUT_MESSAGE = "Request timeout expired"


def queue_full_message(request_id: str) -> str:
    """Triton's refusal of a request its level's queue has no room for (its request-id
    prefix included)."""
    return f"[request id: {request_id or '<id_unknown>'}] Exceeds maximum queue size"


@dataclass(frozen=True, slots=True)
class LevelPolicy:
    """One level's ``ModelQueuePolicy``."""

    delay: bool = False  # timeout_action: DELAY (else REJECT)
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: unbounded

    @classmethod
    def of(cls, policy: ModelQueuePolicy) -> LevelPolicy:
        return cls(
            delay=policy.timeout_action == ModelQueuePolicy.DELAY,
            default_timeout_us=int(policy.default_timeout_microseconds),
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=int(policy.max_queue_size),
        )

    def timeout_us(self, requested_us: int) -> int:
        """A request's timeout in the queue: the level's default, or the request's own when
        the level allows overriding and it is shorter. As in Triton, a request can only
        shorten the default, so under a default of 0 (no timeout) it sets none."""
        if self.allow_timeout_override and 0 < requested_us < self.default_timeout_us:
            return requested_us
        return self.default_timeout_us


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What a version's queue needs from its config, read from the protobuf once."""

    priority_levels: int = 0
    default_priority_level: int = 0
    default: LevelPolicy = LevelPolicy()
    levels: Mapping[int, LevelPolicy] = field(default_factory=dict)  # priority_queue_policy
    preserve_ordering: bool = False

    @classmethod
    def of(cls, config: ModelConfig) -> QueuePolicy:
        if not config.HasField("dynamic_batching"):
            return cls()
        dynamic = config.dynamic_batching
        levels = int(dynamic.priority_levels)
        return cls(
            priority_levels=levels,
            default_priority_level=int(dynamic.default_priority_level) or levels,
            default=LevelPolicy.of(dynamic.default_queue_policy),
            # Triton uses the per-level policies only when there are priority levels.
            levels={int(level): LevelPolicy.of(policy)
                    for level, policy in dynamic.priority_queue_policy.items()} if levels else {},
            preserve_ordering=bool(dynamic.preserve_ordering),
        )

    def level(self, priority: int) -> int:
        """The queue level of a request: with ``priority_levels`` configured, 1 is the
        highest; 0 or a value out of range takes ``default_priority_level``, as in Triton.
        Without priority levels every request is on one level."""
        if not self.priority_levels:
            return 0
        if 1 <= priority <= self.priority_levels:
            return priority
        return self.default_priority_level

    def policy(self, level: int) -> LevelPolicy:
        return self.levels.get(level, self.default)

    @property
    def prefetch(self) -> bool:
        """Whether an instance may be sent its next batch while it still runs one. As in
        Triton, not under a queue policy (priority levels, a timeout or its override, a size
        limit): a request handed to a busy instance could no longer time out or be overtaken,
        so requests stay in the queue until an instance is free."""
        default = self.default
        return not (self.priority_levels or default.default_timeout_us
                    or default.allow_timeout_override or default.max_queue_size)


class _Level(Generic[T]):
    __slots__ = ("policy", "live", "deadlines", "delayed")

    def __init__(self, policy: LevelPolicy) -> None:
        self.policy = policy
        self.live: deque[T] = deque()
        self.deadlines: deque[int] = deque()  # per live request, monotonic ns; 0: none
        self.delayed: deque[T] = deque()

    def __len__(self) -> int:
        return len(self.live) + len(self.delayed)


class PriorityQueue(Sequence[T]):
    """The waiting requests of one version, as a sequence in the order they leave (see the
    module docstring), which the batcher reads."""

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self._levels: dict[int, _Level[T]] = {}
        self._order: list[int] = []  # the levels that have a queue, highest priority first
        self._size = 0
        self._next_deadline = 0  # the earliest live deadline, 0: none (may be stale-early)

    # ------------------------------------------------------------------ the sequence view

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[T]:
        for level in self._order:
            queue = self._levels[level]
            yield from queue.live
            yield from queue.delayed

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._size
        if 0 <= index < self._size:
            for level in self._order:
                queue = self._levels[level]
                if index < len(queue.live):
                    return queue.live[index]
                index -= len(queue.live)
                if index < len(queue.delayed):
                    return queue.delayed[index]
                index -= len(queue.delayed)
        raise IndexError(index)

    def level_size(self, level: int) -> int:
        queue = self._levels.get(level)
        return len(queue) if queue is not None else 0

    # ------------------------------------------------------------------ changes

    def admit(self, item: T, level: int, requested_timeout_us: int, now_ns: int) -> bool:
        """Queue ``item`` at the back of its level's live requests; False (and nothing
        changes) when that level is full."""
        queue = self._level(level)
        limit = queue.policy.max_queue_size
        if limit and len(queue) >= limit:
            return False
        timeout_us = queue.policy.timeout_us(requested_timeout_us)
        deadline = now_ns + timeout_us * 1000 if timeout_us else 0
        queue.live.append(item)
        queue.deadlines.append(deadline)
        self._size += 1
        if deadline and (not self._next_deadline or deadline < self._next_deadline):
            self._next_deadline = deadline
        return True

    def expire(self, now_ns: int) -> list[T]:
        """Apply the timeouts at ``now_ns``: every live request whose deadline has passed
        moves behind its level's live ones (DELAY, it then has no timeout) or leaves the queue
        (REJECT: returned, in queue order, for the caller to fail)."""
        if not self._next_deadline or now_ns <= self._next_deadline:
            return []
        rejected: list[T] = []
        earliest = 0
        for level in self._order:
            queue = self._levels[level]
            if not any(queue.deadlines):
                continue
            live: deque[T] = deque()
            deadlines: deque[int] = deque()
            for item, deadline in zip(queue.live, queue.deadlines, strict=True):
                if deadline and now_ns > deadline:
                    (queue.delayed if queue.policy.delay else rejected).append(item)
                    continue
                live.append(item)
                deadlines.append(deadline)
                if deadline and (not earliest or deadline < earliest):
                    earliest = deadline
            queue.live, queue.deadlines = live, deadlines
        self._size -= len(rejected)
        self._next_deadline = earliest
        return rejected

    def next_deadline(self) -> int | None:
        """When ``expire`` may next have something to do (monotonic ns), or None."""
        return self._next_deadline or None

    def pop(self, count: int) -> list[T]:
        """The first ``count`` requests, removed."""
        taken: list[T] = []
        for level in self._order:
            queue = self._levels[level]
            while len(taken) < count and queue.live:
                taken.append(queue.live.popleft())
                queue.deadlines.popleft()
            while len(taken) < count and queue.delayed:
                taken.append(queue.delayed.popleft())
            if len(taken) == count:
                break
        self._size -= len(taken)
        return taken

    def remove(self, item: T) -> bool:
        """Take ``item`` out wherever it waits; False when it is not queued."""
        for queue in self._levels.values():
            for index, queued in enumerate(queue.live):
                if queued is item:
                    del queue.live[index]
                    del queue.deadlines[index]
                    self._size -= 1
                    return True
            for index, queued in enumerate(queue.delayed):
                if queued is item:
                    del queue.delayed[index]
                    self._size -= 1
                    return True
        return False

    def drain(self) -> list[T]:
        """Every request, in order, removed."""
        return self.pop(self._size)

    def rebuilt(self, policy: QueuePolicy) -> PriorityQueue[T]:
        """The same requests under a new policy (a reload changed the config): each keeps
        its deadline and whether it was delayed; a level the new policy has no longer maps
        to its default level, behind the requests already there; none is refused for size."""
        queue: PriorityQueue[T] = PriorityQueue(policy)
        for level in self._order:
            old = self._levels[level]
            new = queue._level(policy.level(level))
            new.live.extend(old.live)
            new.deadlines.extend(old.deadlines)
            new.delayed.extend(old.delayed)
            queue._size += len(old)
            for deadline in old.deadlines:
                if deadline and (not queue._next_deadline or deadline < queue._next_deadline):
                    queue._next_deadline = deadline
        return queue

    def _level(self, level: int) -> _Level[T]:
        queue = self._levels.get(level)
        if queue is None:
            queue = self._levels[level] = _Level(self.policy.policy(level))
            self._order = sorted(self._levels)
        return queue

