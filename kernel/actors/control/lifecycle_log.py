"""One log line per model state change, written by the control actor: the model, the version,
the new state, why, and how long the step that ended took.

``LOADING`` and ``UNLOADING`` start a step and say why (``model 'simple' version 1 LOADING:
load requested``); ``READY``, ``UNAVAILABLE`` and ``unloaded`` end one and say after how long
(``model 'simple' version 1 READY after 0.42 s``). A failure is an ERROR line with its reason;
the rest are INFO. Each line also carries ``model``, ``version``, ``state``, ``reason`` and
``duration_s`` as fields of the json log format. Owns only the clock of each (model, version)'s
step; the states themselves are control's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("inferd.models")

LOADING = "LOADING"
READY = "READY"
UNLOADING = "UNLOADING"
UNAVAILABLE = "UNAVAILABLE"
UNLOADED = "unloaded"
_STARTS = (LOADING, UNLOADING)


class ModelStateLog:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: dict[tuple[str, int], float] = {}

    def changed(self, model: str, version: int | None, state: str, reason: str = "", *,
                failed: bool = False) -> None:
        """``model`` (``version``; None for the model as a whole) is now ``state``.
        ``failed``: a load or reload failed (an ERROR line)."""
        now = self._clock()
        key = (model, -1 if version is None else version)
        started = self._since.pop(key, None)
        if state in _STARTS:
            self._since[key] = now
        which = f"model '{model}'" + ("" if version is None else f" version {version}")
        text = f"{which} {state}"
        extra: dict[str, object] = {"model": model, "state": state}
        if version is not None:
            extra["version"] = str(version)
        if started is not None and state not in _STARTS:
            duration = now - started
            text += f" after {duration:.2f} s"
            extra["duration_s"] = round(duration, 6)
        if reason:
            text += f": {reason}"
            extra["reason"] = reason
        log.log(logging.ERROR if failed else logging.INFO, "%s", text, extra=extra)

    def load_failed(self, model: str, serving: list[int], reason: str) -> None:
        """A load of ``model`` failed before any version was brought up (its config, or an
        override of it, was refused). The versions ``serving`` go on serving READY, and the
        line says so rather than call the model UNAVAILABLE."""
        if not serving:
            self.changed(model, None, UNAVAILABLE, reason, failed=True)
            return
        numbers = ", ".join(str(number) for number in serving)
        self.changed(model, None, READY, f"the load failed, version(s) {numbers} serving stay "
                     f"READY: {reason}", failed=True)
