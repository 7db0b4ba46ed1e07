"""``preserve_ordering``: a version's responses leave in the order its requests left the queue.

A request takes its place (``take``) when the scheduler sends it to an instance, in batch
order; each of its responses is handed to ``put``, which returns what may go out now: the
responses of the request at the head go at once, those of a later request wait until every
request before it has sent its final response. This is Triton's completion queue (2.51): the
order is the one in which requests were taken into batches (their arrival order within a
priority level), a request refused before it reached an instance (queue full, timed out)
takes no place and answers at once, and for a decoupled model the head request streams while
later ones are held whole. Pure: it keeps keys and parts, it sends nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")


class ResponseOrder(Generic[K, P]):
    def __init__(self) -> None:
        self._places: deque[K] = deque()
        self._held: dict[K, list[tuple[P, bool]]] = {}

    def __len__(self) -> int:
        """Requests with a place whose final response has not gone out yet."""
        return len(self._places)

    def take(self, key: K) -> None:
        self._places.append(key)
        self._held[key] = []

    def put(self, key: K, part: P, final: bool) -> list[tuple[K, P, bool]]:
        """Hand over one response of ``key``; returns, in order, the responses that may be
        sent now (``key``'s own, and those held behind it when it is done)."""
        held = self._held.get(key)
        if held is None:
            return [(key, part, final)]  # no place (taken before ordering applied): as is
        held.append((part, final))
        released: list[tuple[K, P, bool]] = []
        while self._places:
            head = self._places[0]
            parts = self._held[head]
            done = bool(parts) and parts[-1][1]
            released.extend((head, p, f) for p, f in parts)
            parts.clear()
            if not done:
                break
            self._places.popleft()
            del self._held[head]
        return released
