"""Where ended traces go: the ``TraceSink`` contract, the registry of the sinks plugins give
by trace mode (``inferd_register_trace_sinks``: the built-in ``triton`` JSON files and
``opentelemetry`` spans, ``inferd.plugins.tracing``), and ``SinkWorker``, the writer thread a
sink hands traces to so the event loop never waits on a file or a collector.

``sink_for`` looks the mode of a ``TraceConfig`` up; an unknown mode is a ``ValueError``
listing the modes there are. Owns no file format and no exporter.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from inferd.kernel.runtime.registry import Registry

if TYPE_CHECKING:
    from inferd.kernel.observability.trace_config import TraceConfig
    from inferd.kernel.observability.tracing import Trace, TraceSetting

log = logging.getLogger(__name__)
CLOSE_TIMEOUT_SECS = 10.0

Options = list[tuple[str, str]]


class TraceSink(Protocol):
    def write(self, trace: Trace) -> None:
        """Take an ended root trace (with its children); never blocks."""

    def retire(self, setting: TraceSetting) -> None:
        """``setting`` was replaced: write what it still holds."""

    def close(self) -> None:
        """Write everything left and stop (bounded)."""


@dataclass(frozen=True, slots=True)
class TraceSinkSpec:
    """A trace mode: ``name`` is ``--trace-config mode=<name>``; ``settings`` the mode's own
    setting names; ``open(config)`` makes its sink; ``complete(options, environ)`` checks the
    mode's settings (other than ``file`` and ``log-frequency``) and adds their defaults.

    What the tracer does differently for the mode: ``writes_file``, its traces go to
    Triton's ``file`` every ``log-frequency`` traces (a setting without a file traces nothing,
    "trace file name is not given", and the trace API lists both); ``captures_tensors``,
    level ``TENSORS`` records the tensors of a request; ``follows_traceparent``, a request
    carrying a W3C ``traceparent`` is always traced, its spans under the client's."""

    name: str
    settings: tuple[str, ...]
    open: Callable[[TraceConfig], TraceSink]
    complete: Callable[[Options, Mapping[str, str]], Options] | None = None
    writes_file: bool = False
    captures_tensors: bool = False
    follows_traceparent: bool = False


class TraceSinkRegistry(Registry[TraceSinkSpec]):
    """Filled by ``inferd_register_trace_sinks`` hooks: ``registry.add(TraceSinkSpec(...))``."""

    kind = "trace mode"


class NullSink:
    """Drops every trace (a server whose trace modes were all removed)."""

    def write(self, trace: Trace) -> None:
        return None

    def retire(self, setting: TraceSetting) -> None:
        return None

    def close(self) -> None:
        return None


class SinkWorker:
    """One daemon thread, started with the first job, running its jobs in order."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # noqa: BLE001 - a bad trace must not stop the others
                log.exception("writing a trace failed")

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(CLOSE_TIMEOUT_SECS)
            self._thread = None


def sink_for(config: TraceConfig, sinks: TraceSinkRegistry) -> TraceSink:
    """The sink of ``config.mode`` among the server's ``sinks``; ``ValueError`` for a mode no
    plugin gives, or one whose packages are missing."""
    try:
        spec = sinks.require(config.mode)
    except LookupError as error:
        raise ValueError(f"--trace-config mode={config.mode}: {error}") from None
    return spec.open(config)


def spec_for(config: TraceConfig, sinks: TraceSinkRegistry) -> TraceSinkSpec | None:
    """The spec of ``config.mode``, None when no plugin gives it."""
    return sinks.get(config.mode)
