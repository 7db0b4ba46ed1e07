"""An ensemble's ``max_inflight_requests`` (Triton core#455, shared across requests since
core#482): at most N requests of one step in flight at once.

Owns ``StepLimiter``, one per step of a served ensemble version whose ``ensemble_scheduling``
sets ``max_inflight_requests`` above 0, shared by every request to that version. A step's
request takes a slot before it is sent to its composing model and gives it back once the
composing model has answered it (its last response, for a decoupled step), failed or was
cancelled; a request finding no free slot waits its turn (first come, first served) and
never fails for it. As in Triton, a request that has waited ``STUCK_SECS`` goes on anyway,
with an error in the log (the limit cannot then deadlock a pipeline whose step calls the
ensemble again), and a limit of 0 limits nothing. A request cancelled while it waits leaves
the line; one cancelled as its slot is handed over passes the slot on. No I/O beyond that
log line; it is driven by ``inferd.kernel.actors.scheduler.ensembles.running``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

log = logging.getLogger(__name__)

STUCK_SECS = 300.0
"""Triton's ``kMutexTimeoutSeconds``: after this long a waiting step goes on regardless."""


class StepLimiter:
    """The slots of one ensemble step: ``in_flight`` taken (at most ``limit``, unless a
    stuck request went on anyway), ``waiting`` requests in line for one."""

    def __init__(self, limit: int, label: str) -> None:
        self.limit = limit
        self.label = label  # "ensemble 'e' step 1", for the log
        self.in_flight = 0
        self._line: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._line)

    async def acquire(self) -> None:
        """Take a slot, waiting in line while all are taken."""
        if self.in_flight < self.limit and not self._line:
            self.in_flight += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        try:
            done, _ = await asyncio.wait((turn,), timeout=STUCK_SECS)
        except asyncio.CancelledError:
            self._leave(turn)
            raise
        if not done:  # Triton's way out of a pipeline that waits on itself
            log.error("%s waited %g s for one of its %d in-flight slots "
                      "(max_inflight_requests); it goes on without one", self.label,
                      STUCK_SECS, self.limit)
            self._line.remove(turn)
            turn.cancel()
            self.in_flight += 1

    def release(self) -> None:
        """Give a slot back: to the first request in line, else to the pool."""
        while self._line:
            turn = self._line.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot goes straight to it: in_flight unchanged
                return
        self.in_flight = max(0, self.in_flight - 1)

    def _leave(self, turn: asyncio.Future[None]) -> None:
        if turn.done() and not turn.cancelled():
            self.release()  # it was handed a slot it will not use
            return
        turn.cancel()
        try:
            self._line.remove(turn)
        except ValueError:
            pass


def limiters_for(limit: int, ensemble: str, steps: int) -> tuple[StepLimiter, ...]:
    """One limiter per step for ``max_inflight_requests`` ``limit``; none when it is 0."""
    if limit <= 0:
        return ()
    log.info("Ensemble model '%s' configured with max_inflight_requests: %d", ensemble, limit)
    return tuple(StepLimiter(limit, f"ensemble '{ensemble}' step {index}")
                 for index in range(steps))
