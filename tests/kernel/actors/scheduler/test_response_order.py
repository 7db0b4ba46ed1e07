"""preserve_ordering's response gate (kernel/actors/scheduler/response_order.py), driven
directly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inferd.kernel.actors.scheduler.response_order import ResponseOrder


def test_a_later_response_waits_for_every_earlier_request() -> None:
    order: ResponseOrder[str, str] = ResponseOrder()
    for key in "abc":
        order.take(key)
    assert order.put("c", "C", True) == []
    assert order.put("b", "B", True) == []
    assert order.put("a", "A", True) == [("a", "A", True), ("b", "B", True), ("c", "C", True)]
    assert len(order) == 0


def test_the_head_streams_while_later_streams_are_held_whole() -> None:
    order: ResponseOrder[str, str] = ResponseOrder()
    order.take("a")
    order.take("b")
    assert order.put("b", "b1", False) == []
    assert order.put("a", "a1", False) == [("a", "a1", False)]
    assert order.put("b", "b2", False) == []
    assert order.put("a", "a2", True) == [("a", "a2", True), ("b", "b1", False),
                                          ("b", "b2", False)]
    assert order.put("b", "b3", True) == [("b", "b3", True)]


def test_a_request_without_a_place_answers_at_once() -> None:
    order: ResponseOrder[str, str] = ResponseOrder()
    order.take("a")
    assert order.put("x", "X", True) == [("x", "X", True)]
    assert len(order) == 1


@given(st.permutations(range(8)))
def test_any_completion_order_leaves_in_request_order(finish: list[int]) -> None:
    order: ResponseOrder[int, int] = ResponseOrder()
    for key in range(8):
        order.take(key)
    released = [key for done in finish for key, _, _ in order.put(done, done, True)]
    assert released == list(range(8))
