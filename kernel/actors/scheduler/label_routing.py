"""Where a request that names no version goes when its model has version labels (an inferd
extension, ``inferd.kernel.modelconfig.version_labels``): to ``stable``, and to ``canary``
for ``canary_percent`` of them.

The share is kept exactly rather than drawn at random: each request adds the percentage to
a running credit, and a request that brings it to 100 goes to the canary (and spends 100),
so 10 % sends every tenth request there. A label whose version does not take requests (it
is loading, or it failed) is passed over: the canary's share goes to stable, and without a
live stable version a request goes where Triton sends it, to the highest live version.
Pure bookkeeping; the routing table (``inferd.kernel.actors.scheduler.version_table``) holds one
per labelled model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_WHOLE = 100.0


@dataclass(slots=True)
class LabelRoute:
    stable: int = 0  # 0: no stable label
    canary: int = 0  # 0: no canary label
    canary_percent: float = 0.0
    credit: float = 0.0

    def pick(self, live: Mapping[int, object], *, count: bool = True) -> int | None:
        """The version number a request naming none goes to, among ``live``; ``None``: as
        without labels. ``count``: the request takes its part of the canary's share (an
        inference; not a metadata or readiness request, which just see stable)."""
        if count and self.canary in live and self.canary_percent > 0:
            self.credit += self.canary_percent
            if self.credit >= _WHOLE:
                self.credit -= _WHOLE
                return self.canary
        return self.stable if self.stable in live else None
