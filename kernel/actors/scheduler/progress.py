"""One wakeup for the scheduler's waits on its queues: a retire waiting for a version's
in-flight work, a reload waiting for the replaced instances' batches, a shutdown waiting for
every queue to empty. Whatever changes what they wait for (a batch answered, a pump, an
ensemble request letting go of a version) calls ``notify``; a waiter re-checks its condition
on every wakeup (and at least every ``RECHECK_SECS``, so a change nobody announced costs a
delay, never a hang). Cheap when nobody waits: ``notify`` is then one attribute test, and it
needs no event loop (sans-IO tests call it freely).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio

RECHECK_SECS = 1.0


class Progress:
    def __init__(self) -> None:
        self._event: asyncio.Event | None = None  # created only while someone waits
        # Whether anyone waits: the hot path tests this attribute rather than call notify.
        self.waiting = False

    def notify(self) -> None:
        """Wake every waiter (each re-checks its condition)."""
        event, self._event = self._event, None
        self.waiting = False
        if event is not None:
            event.set()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds (checked now and on every ``notify``)."""
        while not condition():
            if self._event is None:
                self._event = asyncio.Event()
            event = self._event
            self.waiting = True
            with anyio.move_on_after(RECHECK_SECS):
                await event.wait()
