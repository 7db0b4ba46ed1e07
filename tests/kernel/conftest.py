"""Fixtures of the kernel's unit tests."""

from __future__ import annotations

import pytest

from inferd.kernel.actors.scheduler import progress


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler's waits re-check now and then in case a wakeup was lost; put that out of
    reach, so a missing wakeup fails the test instead of hiding behind the re-check."""
    monkeypatch.setattr(progress, "RECHECK_SECS", 3600.0)

