"""``inferd load``'s wait: the load runs on a thread of its own (each protocol's load call
blocks until the load ends) while the calling thread polls the repository index and draws
the model's state and the time spent on one progress line, until the load ends or the
``--timeout`` passes. Owns no argument parsing and prints only the progress line (standard
error); the command prints the outcome.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.plugins.cli import render
from inferd.plugins.cli.connection import (
    Connection,
    IndexRow,
    Refused,
    open_connection,
    translated_errors,
)


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    rows: list[IndexRow]  # the model's index rows once the load ended (or the wait did)
    elapsed: float
    error: str | None  # None: loaded


def watch_load(watcher: Connection, url: str, model: str, config: str | None,
               files: Mapping[str, bytes], timeout: float, connect_timeout: float,
               versions: Sequence[int] = ()) -> LoadOutcome:
    """Load ``model`` (``versions``: only those) at ``url`` while ``watcher`` polls the index
    for its state."""
    failure: list[BaseException] = []

    def load_it() -> None:
        try:
            with translated_errors(url):
                # Its own connection: neither tritonclient's clients nor a gevent hub are
                # shared across threads.
                connection = open_connection(url, timeout + 5.0, connect_timeout)
                try:
                    connection.load(model, config, files, versions)
                finally:
                    connection.close()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            failure.append(error)

    started = time.monotonic()
    loader = threading.Thread(target=load_it, name="inferd-load", daemon=True)
    loader.start()
    with Progress(model) as progress:
        while loader.is_alive() and (elapsed := time.monotonic() - started) < timeout:
            with contextlib.suppress(Refused), translated_errors(url):
                progress.update(_model_rows(watcher, model), elapsed)
            loader.join(0.2)
    elapsed = time.monotonic() - started
    rows = _model_rows(watcher, model)
    if loader.is_alive():
        return LoadOutcome(rows, elapsed, f"the load of {model} did not end within "
                                           f"{timeout:g} s (now {states(rows)}; the server "
                                           "goes on loading it)")
    if failure:
        error = failure[0]
        if isinstance(error, Refused):
            return LoadOutcome(rows, elapsed, str(error))
        raise error
    return LoadOutcome(rows, elapsed, None)


def _model_rows(connection: Connection, model: str) -> list[IndexRow]:
    return [row for row in connection.index() if row.name == model]


def states(rows: Sequence[IndexRow]) -> str:
    """``READY (version 1)``, ``1: READY, 2: LOADING``, or ``not loaded``."""
    versions = [row for row in rows if row.state]
    if not versions:
        return "not loaded"
    if len(versions) == 1:
        row = versions[0]
        version = f" (version {row.version})" if row.version else ""
        return f"{row.state}{version}" + (f": {row.reason}" if row.reason else "")
    return ", ".join(f"{row.version}: {row.state}" for row in versions)


class Progress:
    """The live line of a load: a spinner rewritten in place on a terminal, one line per
    change of state elsewhere (both on standard error)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.console = render.console(stderr=True)
        self.last = ""
        self.status: Any = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.status = self.console.status(f"loading {self.model}")
            self.status.__enter__()
        return self

    def update(self, rows: list[IndexRow], elapsed: float) -> None:
        now = states(rows)
        if self.status is not None:
            self.status.update(f"loading {self.model}: {now} {elapsed:.1f} s")
        elif now != self.last:
            self.console.print(f"loading {self.model}: {now} ({elapsed:.1f} s)",
                               markup=False)
        self.last = now

    def __exit__(self, *exc_info: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)
