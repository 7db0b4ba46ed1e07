"""The one log line of a request that failed, written where a frontend turns the error into its
wire answer (``request_failed``), and the rate limit that keeps a flood of bad requests from
flooding the log.

A client's mistake (a 4xx status, and 501: asked for what the server does not do) is an INFO
line, a server fault (5xx) an ERROR line; the line names the protocol, the endpoint, the
status, the error message and, where the data plane learnt them
(``inferd.kernel.sdk.log_context``), the model, version and request id. Never tensor data:
only the error's message, which inferd's own messages never fill with tensor values.
``RateLimiter``: at most one line per second for each distinct (protocol, endpoint, model, version,
status, message), and at most ``BUDGET_PER_SECOND`` request-error lines a second over all of them;
the next line that gets through says how many were left out meanwhile. Pure apart from the logger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import TracebackType

from inferd.kernel.sdk import log_context

__all__ = ["request_failed"]

log = logging.getLogger("inferd.requests")

INTERVAL_SECS = 1.0
BUDGET_PER_SECOND = 20
MAX_MESSAGE_CHARS = 1000
MAX_ID_CHARS = 200
_MAX_KEYS = 4096

ExcInfo = BaseException | tuple[type[BaseException], BaseException, TracebackType | None] | None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A line may be written; so many like it (``same``) and others (``others``) were not."""

    same: int = 0
    others: int = 0


@dataclass(slots=True)
class _Seen:
    last: float
    suppressed: int = 0


class RateLimiter:
    """At most one line per key per ``interval`` and ``budget`` lines per ``interval`` in all."""

    def __init__(self, interval: float = INTERVAL_SECS, budget: int = BUDGET_PER_SECOND,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._budget = budget
        self._clock = clock
        self._seen: dict[Hashable, _Seen] = {}
        self._window_start = float("-inf")
        self._window_lines = 0
        self._others = 0  # left out by the budget, or forgotten with their key
        self._lock = threading.Lock()  # executors' threads may log too

    def admit(self, key: Hashable) -> Admitted | None:
        """``None``: leave this line out (counted); else the counts to report with it."""
        with self._lock:
            now = self._clock()
            if now - self._window_start >= self._interval:
                self._window_start, self._window_lines = now, 0
            seen = self._seen.get(key)
            if seen is not None and now - seen.last < self._interval:
                seen.suppressed += 1
                return None
            if self._window_lines >= self._budget:
                self._others += 1
                return None
            self._window_lines += 1
            admitted = Admitted(seen.suppressed if seen is not None else 0, self._others)
            self._others = 0
            self._seen[key] = _Seen(now)
            if len(self._seen) > _MAX_KEYS:
                self._forget_quiet(now)
            return admitted

    def _forget_quiet(self, now: float) -> None:
        """Keys not seen for an interval go; what they left out counts as others'."""
        for key, seen in list(self._seen.items()):
            if now - seen.last >= self._interval:
                self._others += seen.suppressed
                del self._seen[key]


_limiter = RateLimiter()


def request_failed(status: int, message: str, *, wire_status: str = "",
                   exc_info: ExcInfo = None) -> None:
    """Log, once and rate-limited, that the current request was answered with an error:
    ``status`` is its HTTP status (it decides the severity), ``wire_status`` what the protocol
    said if not that (a gRPC code, a zmq error code)."""
    level = logging.ERROR if status >= 500 and status != 501 else logging.INFO
    if not log.isEnabledFor(level):
        return
    context = log_context.current() or log_context.RequestContext()
    said = wire_status or str(status)
    message = _clipped(message, MAX_MESSAGE_CHARS)
    key = (context.protocol, context.endpoint, context.model, context.version, said, message)
    admitted = _limiter.admit(key)
    if admitted is None:
        return
    about = []
    if context.model:
        about.append(f"model '{context.model}'"
                     + (f" version {context.version}" if context.version else ""))
    if context.request_id:
        about.append(f"request id {_clipped(context.request_id, MAX_ID_CHARS)!r}")
    left_out = []
    if admitted.same:
        left_out.append(f"{admitted.same} more like it")
    if admitted.others:
        left_out.append(f"{admitted.others} other request error lines")
    extra: dict[str, object] = {"protocol": context.protocol, "endpoint": context.endpoint,
                                "status": said}
    if admitted.same or admitted.others:
        extra["suppressed"] = admitted.same + admitted.others
    log.log(
        level, "%s %s failed with %s%s: %s%s",
        context.protocol or "request", context.endpoint or "?", said,
        f" ({', '.join(about)})" if about else "", message,
        f" [left out since the last such line: {'; '.join(left_out)}]" if left_out else "",
        extra=extra, exc_info=exc_info,
    )


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more)"
