"""The queue policies (kernel/actors/scheduler/queue_policy.py), driven with a fake clock: Triton's
priority levels, per-level policies, REJECT and DELAY, the timeout override rule and the
per-level size limit; and a property test against a plain reference model of Triton's
PolicyQueue."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.batcher import DynamicBatcher
from inferd.kernel.actors.scheduler.queue_policy import (
    LevelPolicy,
    PriorityQueue,
    QueuePolicy,
    queue_full_message,
)

_ids = count()
US = 1000  # ns


@dataclass(eq=False)
class Item:
    name: str = field(default_factory=lambda: f"r{next(_ids)}")
    batch_size: int = 1
    shape_key: tuple[tuple[int, ...], ...] = ((4,),)
    enqueued_ns: int = 0


def policy_of(text: str) -> QueuePolicy:
    config = ModelConfig()
    text_format.Parse('name: "m" max_batch_size: 8 ' + text, config)
    return QueuePolicy.of(config)


def names(queue: PriorityQueue[Item]) -> list[str]:
    return [item.name for item in queue]


def test_a_model_without_dynamic_batching_has_no_queue_policy() -> None:
    policy = policy_of("")
    assert policy == QueuePolicy()
    queue: PriorityQueue[Item] = PriorityQueue(policy)
    # The request's own timeout is not applied: Triton's default scheduler has no policy.
    assert queue.admit(Item("a"), policy.level(1), 10, now_ns=0)
    assert queue.expire(now_ns=10**12) == []
    assert names(queue) == ["a"]


def test_levels_read_their_own_policy_or_the_default() -> None:
    policy = policy_of(
        "dynamic_batching { priority_levels: 3 default_priority_level: 2 "
        "default_queue_policy { max_queue_size: 5 } "
        "priority_queue_policy { key: 1 value { timeout_action: DELAY "
        "default_timeout_microseconds: 100 allow_timeout_override: true } } "
        "preserve_ordering: true }")
    assert policy.policy(1) == LevelPolicy(delay=True, default_timeout_us=100,
                                           allow_timeout_override=True)
    assert policy.policy(2) == policy.policy(3) == LevelPolicy(max_queue_size=5)
    assert [policy.level(p) for p in (0, 1, 3, 4)] == [2, 1, 3, 2]
    assert policy.preserve_ordering


def test_priority_queue_policy_is_ignored_without_priority_levels() -> None:
    policy = policy_of("dynamic_batching { priority_queue_policy { key: 1 value { "
                       "max_queue_size: 1 } } }")
    assert policy.levels == {}
    assert policy.level(1) == 0


def test_the_request_timeout_only_shortens_the_default_and_only_when_allowed() -> None:
    assert LevelPolicy(default_timeout_us=100).timeout_us(10) == 100
    allowed = LevelPolicy(default_timeout_us=100, allow_timeout_override=True)
    assert allowed.timeout_us(10) == 10
    assert allowed.timeout_us(1000) == 100  # never longer than the default
    assert allowed.timeout_us(0) == 100
    # Triton's rule: with no default timeout a request cannot set one.
    assert LevelPolicy(allow_timeout_override=True).timeout_us(10) == 0


def test_each_level_has_its_own_size_limit() -> None:
    policy = policy_of("dynamic_batching { priority_levels: 2 default_priority_level: 2 "
                       "default_queue_policy { max_queue_size: 1 } "
                       "priority_queue_policy { key: 1 value { max_queue_size: 2 } } }")
    queue: PriorityQueue[Item] = PriorityQueue(policy)
    assert queue.admit(Item("low"), 2, 0, 0)
    assert not queue.admit(Item("low2"), 2, 0, 0)
    assert queue.admit(Item("high"), 1, 0, 0)
    assert queue.admit(Item("high2"), 1, 0, 0)
    assert not queue.admit(Item("high3"), 1, 0, 0)
    assert names(queue) == ["high", "high2", "low"]
    assert queue.pop(1)[0].name == "high"
    assert queue.admit(Item("high3"), 1, 0, 0)  # room again once one left


def test_reject_removes_expired_requests_and_delay_moves_them_behind_live_ones() -> None:
    policy = policy_of(
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "default_queue_policy { default_timeout_microseconds: 100 } "
        "priority_queue_policy { key: 1 value { timeout_action: DELAY "
        "default_timeout_microseconds: 100 } } }")
    queue: PriorityQueue[Item] = PriorityQueue(policy)
    for name, level, at in (("h1", 1, 0), ("l1", 2, 0), ("h2", 1, 50 * US), ("l2", 2, 50 * US)):
        assert queue.admit(Item(name), level, 0, at)
    assert queue.next_deadline() == 100 * US
    assert queue.expire(100 * US) == []  # expiry is strictly after the deadline
    rejected = queue.expire(100 * US + 1)
    assert [item.name for item in rejected] == ["l1"]
    # h1 timed out on a DELAY level: behind h2, still ahead of the lower level.
    assert names(queue) == ["h2", "h1", "l2"]
    assert len(queue) == 3 and queue[1].name == "h1" and queue[-1].name == "l2"
    assert queue.next_deadline() == 150 * US
    queue.expire(151 * US)
    assert names(queue) == ["h1", "h2"]  # delayed in the order they expired
    assert queue.next_deadline() is None
    assert queue.expire(10**12) == []  # a delayed request never times out again


def test_the_batcher_takes_delayed_requests_after_the_live_ones() -> None:
    policy = policy_of("dynamic_batching { default_queue_policy { timeout_action: DELAY "
                       "default_timeout_microseconds: 10 } }")
    queue: PriorityQueue[Item] = PriorityQueue(policy)
    queue.admit(Item("old", batch_size=3), 0, 0, 0)
    queue.admit(Item("new", batch_size=2), 0, 0, 20 * US)
    queue.expire(20 * US)
    batcher = DynamicBatcher(max_batch_size=4)
    count_ = batcher.take(queue, 20 * US)
    assert [item.name for item in queue.pop(count_)] == ["new"]  # old (3) does not fit
    assert names(queue) == ["old"]


def test_remove_drain_and_rebuilt() -> None:
    policy = policy_of("dynamic_batching { priority_levels: 2 default_priority_level: 2 }")
    queue: PriorityQueue[Item] = PriorityQueue(policy)
    items = [Item(f"i{n}") for n in range(4)]
    for n, item in enumerate(items):
        queue.admit(item, 1 + n % 2, 0, 0)
    assert queue.remove(items[2]) and not queue.remove(items[2])
    assert names(queue) == ["i0", "i1", "i3"]
    single = queue.rebuilt(policy_of("dynamic_batching { }"))
    assert names(single) == ["i0", "i1", "i3"] and len(single) == 3
    assert [item.name for item in single.drain()] == ["i0", "i1", "i3"]
    assert not single and len(single) == 0


def test_an_instance_is_sent_a_batch_early_only_without_a_queue_policy() -> None:
    assert policy_of("").prefetch
    assert policy_of("dynamic_batching { max_queue_delay_microseconds: 100 }").prefetch
    for text in ("priority_levels: 2 default_priority_level: 1",
                 "default_queue_policy { max_queue_size: 4 }",
                 "default_queue_policy { default_timeout_microseconds: 10 }",
                 "default_queue_policy { allow_timeout_override: true }"):
        assert not policy_of(f"dynamic_batching {{ {text} }}").prefetch, text


def test_queue_full_message_is_tritons_with_the_request_id() -> None:
    assert queue_full_message("") == "[request id: <id_unknown>] Exceeds maximum queue size"
    assert queue_full_message("r7") == "[request id: r7] Exceeds maximum queue size"


# ---------------------------------------------------------------------- property test


@dataclass
class Reference:
    """Triton's PolicyQueue per level, written the plain way: lists, full scans."""

    policy: QueuePolicy
    live: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # name, deadline
    delayed: dict[int, list[str]] = field(default_factory=dict)

    def admit(self, name: str, level: int, timeout_us: int, now_ns: int) -> bool:
        live, delayed = self.live.setdefault(level, []), self.delayed.setdefault(level, [])
        limit = self.policy.policy(level).max_queue_size
        if limit and len(live) + len(delayed) >= limit:
            return False
        timeout = self.policy.policy(level).timeout_us(timeout_us)
        live.append((name, now_ns + timeout * US if timeout else 0))
        return True

    def expire(self, now_ns: int) -> list[str]:
        rejected = []
        for level, live in sorted(self.live.items()):  # in queue order: level 1 first
            kept = []
            for name, deadline in live:
                if deadline and now_ns > deadline:
                    if self.policy.policy(level).delay:
                        self.delayed[level].append(name)
                    else:
                        rejected.append(name)
                else:
                    kept.append((name, deadline))
            self.live[level] = kept
        return rejected

    def order(self) -> list[str]:
        return [name for level in sorted(self.live)
                for name in [n for n, _ in self.live[level]] + self.delayed[level]]

    def pop(self, count_: int) -> list[str]:
        taken = self.order()[:count_]
        for level in self.live:
            self.live[level] = [(n, d) for n, d in self.live[level] if n not in taken]
            self.delayed[level] = [n for n in self.delayed[level] if n not in taken]
        return taken


level_policies = st.builds(
    LevelPolicy, delay=st.booleans(), default_timeout_us=st.sampled_from([0, 5, 20, 100]),
    allow_timeout_override=st.booleans(), max_queue_size=st.sampled_from([0, 1, 3, 10]))
operations = st.lists(st.one_of(
    st.tuples(st.just("admit"), st.integers(0, 4), st.sampled_from([0, 3, 10, 50, 200])),
    st.tuples(st.just("wait"), st.integers(0, 60)),
    st.tuples(st.just("pop"), st.integers(1, 4)),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(levels=st.integers(0, 3), default=level_policies,
       overrides=st.dictionaries(st.integers(1, 3), level_policies, max_size=3),
       ops=operations)
def test_no_request_is_lost_or_duplicated_and_the_order_is_tritons(
        levels: int, default: LevelPolicy, overrides: dict[int, LevelPolicy],
        ops: list[tuple[object, ...]]) -> None:
    policy = QueuePolicy(priority_levels=levels, default_priority_level=levels,
                         default=default, levels=overrides if levels else {})
    queue: PriorityQueue[Item] = PriorityQueue(policy)
    reference = Reference(policy)
    now_ns = 0
    admitted: list[str] = []
    out: list[str] = []  # popped or rejected
    for op in ops:
        if op[0] == "admit":
            _, priority, timeout_us = op
            assert isinstance(priority, int) and isinstance(timeout_us, int)
            level = policy.level(priority)
            item = Item(enqueued_ns=now_ns)
            accepted = queue.admit(item, level, timeout_us, now_ns)
            assert accepted == reference.admit(item.name, level, timeout_us, now_ns)
            if accepted:
                admitted.append(item.name)
        elif op[0] == "wait":
            assert isinstance(op[1], int)
            now_ns += op[1] * US
        else:
            assert isinstance(op[1], int)
            rejected = [item.name for item in queue.expire(now_ns)]
            assert rejected == reference.expire(now_ns)
            popped = [item.name for item in queue.pop(op[1])]
            assert popped == reference.pop(op[1])
            out += rejected + popped
        assert names(queue) == reference.order()
        assert len(queue) == len(reference.order())
        deadline = queue.next_deadline()
        pending = [d for live in reference.live.values() for _, d in live if d]
        if pending:  # never later than a live request's deadline (expire must see it)
            assert deadline is not None and deadline <= min(pending)
    left = [item.name for item in queue.drain()]
    assert sorted(out + left) == sorted(admitted)
    assert len(set(out + left)) == len(admitted)
