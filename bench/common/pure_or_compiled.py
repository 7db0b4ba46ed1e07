"""Timing one build of inferd's compiled modules against their pure-Python source.

A bench that compares the builds (``bench.performance.compiled``, ``bench.performance.hpack``)
runs its rows in child processes of itself, one per build (``INFERD_COMPILE=0`` makes
``inferd.protocols.build`` load every compiled module from source), alternating rounds so
that a burst of load elsewhere hits only one. This module owns the child's start and the
timing of a step in CPU time, never what the rows are or how they are printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # a child runs as ``python -m`` from here
Step = Callable[[], object]


def cpu_microseconds(step: Step, seconds: float, repeats: int) -> float:
    """The least over ``repeats`` of CPU microseconds per call, each timing ~``seconds``
    long. CPU time, not wall time: on a shared machine the wait for a core is not the
    step's cost."""
    clock = time.process_time
    calls = 1
    while True:  # calls per timing, so that one lasts about ``seconds``
        started = clock()
        for _ in range(calls):
            step()
        elapsed = clock() - started
        if elapsed >= seconds / 4:
            calls = max(1, int(calls * seconds / elapsed))
            break
        calls *= 4
    timings = []
    for _ in range(repeats):
        started = clock()
        for _ in range(calls):
            step()
        timings.append((clock() - started) / calls * 1e6)
    return min(timings)


def run_child(module: str, compiled: bool, seconds: float, repeats: int) -> dict[str, Any]:
    """The JSON that ``python -m module --child`` prints last, run on the compiled build or
    (``compiled`` false) on the pure-Python source."""
    env = dict(os.environ)
    if compiled:
        env.pop("INFERD_COMPILE", None)
    else:
        env["INFERD_COMPILE"] = "0"
    output = subprocess.run(
        [sys.executable, "-m", module, "--child", "--seconds", str(seconds),
         "--repeats", str(repeats)],
        env=env, cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    result: dict[str, Any] = json.loads(output.splitlines()[-1])
    return result
