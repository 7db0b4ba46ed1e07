"""Control's loads on first request (``--model-load-on-demand``, an inferd extension), an
object the on-demand policy (``policy``) owns and calls when the data plane says a request
named a model the scheduler does not serve (``LoadOnDemand``).

Owns the loads a request starts and those waiting on them: the first request for a model
starts its load in a task of the actor's own (a waiter that goes away cancels nothing), every
later one while it runs waits on the same load, each for at most
``--model-load-on-demand-timeout-secs``; a failed load answers every waiter with its reason
(the index keeps it, as for any load), and for a back-off that doubles with each failure in a
row (from ``BACKOFF_FIRST_SECS`` up to ``BACKOFF_MOST_SECS``) the requests that follow hear
that reason at once instead of starting the load again. A model the repository does not have
is not a failure: its requests keep Triton's "is not found"; nor is a load refused for now
(503: no room in the memory budget), which the next request tries again. How one model
loads (within the memory budget, its composing models with it) is control's, passed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio

from inferd.protocols.errors import InferdError, NotFound, Unavailable

log = logging.getLogger(__name__)

BACKOFF_FIRST_SECS = 5.0
BACKOFF_MOST_SECS = 300.0


@dataclass(slots=True)
class _Load:
    done: anyio.Event = field(default_factory=anyio.Event)
    error: InferdError | None = None


@dataclass(slots=True)
class _Failure:
    message: str
    failures: int  # in a row
    retry_at: float  # monotonic


@dataclass(slots=True)
class OnDemandCounters:
    loads: dict[tuple[str, str], int] = field(default_factory=dict)  # (model, outcome)
    waits: dict[str, int] = field(default_factory=dict)  # requests that waited for a load
    wait_secs: dict[str, float] = field(default_factory=dict)


class OnDemandLoads:
    """``load(name)``: load ``name`` as a first request does (raising its error);
    ``is_ready(name)``: whether a version of it serves; ``spawn``: the actor's task runner."""

    def __init__(
        self, *, timeout_secs: float, load: Callable[[str], Awaitable[None]],
        is_ready: Callable[[str], bool],
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], object],
    ) -> None:
        self._timeout_secs = timeout_secs
        self._load = load
        self._is_ready = is_ready
        self._spawn = spawn
        self._loading: dict[str, _Load] = {}
        self._failures: dict[str, _Failure] = {}
        self.counters = OnDemandCounters()

    async def ensure(self, name: str) -> None:
        """Once ``name`` serves: at once if it does, else after the load under way or one
        started now; raises the load's failure, or ``Unavailable`` past the timeout."""
        if self._is_ready(name) and name not in self._loading:
            return
        pending = self._loading.get(name)
        if pending is None:
            failure = self._failures.get(name)
            wait = failure.retry_at - time.monotonic() if failure is not None else 0.0
            if failure is not None and wait > 0:
                raise Unavailable(f"{failure.message} (on-demand loads of '{name}' are tried "
                                  f"again in {wait:.0f} s)")
            pending = self._loading[name] = _Load()
            self._spawn(lambda: self._run(name, pending))
        counters = self.counters
        counters.waits[name] = counters.waits.get(name, 0) + 1
        started = time.monotonic()
        with anyio.move_on_after(self._timeout_secs) as scope:
            await pending.done.wait()
        counters.wait_secs[name] = counters.wait_secs.get(name, 0.0) + time.monotonic() - started
        if scope.cancelled_caught:
            raise Unavailable(f"model '{name}' is loading on demand and was not ready within "
                              f"{self._timeout_secs:g} s (--model-load-on-demand-timeout-secs);"
                              " retry the request")
        if pending.error is not None:
            raise pending.error

    async def _run(self, name: str, pending: _Load) -> None:
        outcome = "failure"
        try:
            await self._load(name)
            outcome = "success"
            self._failures.pop(name, None)
        except NotFound as error:  # not in the repository: not a failed load
            outcome = "not_found"
            pending.error = error
        except Unavailable as error:  # for now (no room in the budget): no back-off
            outcome = "unavailable"
            pending.error = error
        except InferdError as error:
            previous = self._failures.get(name)
            failures = previous.failures + 1 if previous is not None else 1
            backoff = min(BACKOFF_MOST_SECS, BACKOFF_FIRST_SECS * 2 ** (failures - 1))
            message = f"model '{name}' failed to load on demand: {error.message}"
            self._failures[name] = _Failure(message, failures, time.monotonic() + backoff)
            log.error("%s; the next on-demand load is tried in %g s at the earliest",
                      message, backoff)
            pending.error = Unavailable(message)
        finally:
            key = (name, outcome)
            self.counters.loads[key] = self.counters.loads.get(key, 0) + 1
            del self._loading[name]
            pending.done.set()

    def forget_failure(self, name: str) -> None:
        """A load by other means (the API, a poll) succeeded or was asked for: no back-off."""
        self._failures.pop(name, None)

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        counters = self.counters
        return [
            *(("inferd_model_on_demand_loads_total", {"model": model, "outcome": outcome}, n)
              for (model, outcome), n in sorted(counters.loads.items())),
            *(("inferd_model_load_waits_total", {"model": model}, n)
              for model, n in sorted(counters.waits.items())),
            *(("inferd_model_load_wait_seconds_total", {"model": model}, round(secs, 6))
              for model, secs in sorted(counters.wait_secs.items())),
        ]
