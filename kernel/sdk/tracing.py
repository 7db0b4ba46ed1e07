"""The contract of trace sinks, and the trace records they receive.

Trace sinks are registered by trace mode (``inferd_register_trace_sinks``: the built-in
``triton`` JSON files and ``opentelemetry`` spans, ``inferd.plugins.tracing``).

A sink gets each ended ``Trace`` (what one sampled request recorded: Triton's timestamps, its
tensors where the mode captures them, its ensemble steps' traces) and hands it to a
``SinkWorker``, its own writer thread, so the event loop never waits on a file or a collector.
``TraceSetting`` is one setting in force, ``TraceConfig`` the start-up settings, and
``TraceSinkSpec`` a mode's traits as fields (``writes_file``, ``captures_tensors``,
``follows_traceparent``). A frontend that begins a trace runs the request under it with
``traced`` (``CURRENT`` holds it for the request's task). Sampling and the trace API's
settings are the kernel's (``inferd.kernel.observability.tracing``), and so is the flag's
parsing (``inferd.kernel.observability.trace_config``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from inferd.kernel.sdk.registry import Registry

if TYPE_CHECKING:
    from inferd.protocols.messages import InferRequest, InferResponse, Tensor

__all__ = [
    "CLOSE_TIMEOUT_SECS", "CURRENT", "SinkWorker", "Trace", "TraceConfig", "TraceOwner",
    "TraceSetting", "TraceSink", "TraceSinkRegistry", "TraceSinkSpec", "trace_integer", "traced",
]

log = logging.getLogger(__name__)
CURRENT: ContextVar[Trace | None] = ContextVar("inferd_trace", default=None)
T = TypeVar("T")
DEFAULT_MODE = "triton"
DEFAULT_RATE = 1000


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """The start-up trace settings; ``level`` empty is OFF. ``options`` are the chosen mode's
    settings other than ``file`` and ``log-frequency``, in the order the settings endpoint
    shows them."""

    level: tuple[str, ...] = ()
    rate: int = DEFAULT_RATE
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = DEFAULT_MODE
    options: tuple[tuple[str, str], ...] = ()

    def option(self, name: str, default: str = "") -> str:
        return next((value for key, value in self.options if key == name), default)

    def resource(self) -> dict[str, str]:
        """``opentelemetry,resource=key=value`` as attributes over Triton's service name."""
        attributes = {"service.name": "triton-inference-server"}
        for key, value in self.options:
            if key == "resource":
                name, _, text = value.partition("=")
                attributes[name] = text
        return attributes


def trace_integer(text: str, flag: str, low: int, high: int = 2**32 - 1) -> int:
    """``text`` as a whole number from ``low`` to ``high``, ``ValueError`` naming ``flag``."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits.isascii() or not digits.isdigit() or not low <= int(stripped) <= high:
        raise ValueError(f"--trace-config {flag}: expected a whole number from {low} to {high}, "
                         f"got {text!r}")
    return int(stripped)


class TraceSetting:
    """One setting in force (global or a model's): its values, which of them the model set
    itself, and its sampling counters. Replaced, never changed, by an update (Triton does
    the same: traces already sampled finish under the setting they were sampled with)."""

    __slots__ = ("level", "rate", "count", "log_frequency", "file", "mode", "specified",
                 "seen", "created", "collected", "stream", "retired", "invalid_reason", "spec")

    def __init__(self, level: tuple[str, ...], rate: int, count: int, log_frequency: int,
                 file: str, mode: str, specified: frozenset[str] = frozenset(),
                 spec: TraceSinkSpec | None = None) -> None:
        self.level, self.rate, self.count = level, rate, count
        self.log_frequency, self.file, self.mode = log_frequency, file, mode
        self.specified = specified
        self.spec = spec  # what the mode's plugin says it does (None: nothing special)
        self.seen = 0  # requests counted for the rate
        self.created = 0  # traces sampled
        self.collected = 0  # traces ended (the sink's counter)
        self.stream: list[str] = []  # ended traces not yet written (the sink's buffer)
        self.retired = False  # set by the sink, on its own thread
        if not level:
            self.invalid_reason = "tracing is disabled"
        elif rate == 0:
            self.invalid_reason = "sample rate must be non-zero"
        elif spec is not None and spec.writes_file and not file:
            self.invalid_reason = "trace file name is not given"
        else:
            self.invalid_reason = ""

    def sample(self, force: bool = False) -> bool:
        """Whether to trace the next request; ``force`` (a request carrying an OpenTelemetry
        context) is traced whatever the rate and count, and is counted as Triton counts it."""
        if not self.level:
            return False
        if self.rate == 0:
            return force
        if (self.invalid_reason or self.count == 0) and not force:
            return False
        self.seen += 1
        hit = self.seen % self.rate == 0 and self.count != 0
        if hit:
            if self.count > 0:
                self.count -= 1
            self.created += 1
        return hit or force


class Trace:
    """What one sampled request (or one ensemble step of it) records: Triton's timestamps as
    (name, steady-clock ns) in the order they happened, and at level TENSORS its input and
    output tensors. ``children`` (on the root only) are every step's trace, nested ones
    included, each naming its parent."""

    __slots__ = ("id", "parent_id", "model", "version", "request_id", "stamps", "tensors",
                 "timestamps", "capture_tensors", "root", "children", "setting", "started_ns",
                 "ended_ns", "traceparent", "_tracer")

    def __init__(self, tracer: TraceOwner, setting: TraceSetting, model: str,
                 parent: Trace | None = None) -> None:
        self._tracer = tracer
        self.id = next(tracer.ids)
        self.parent_id = parent.id if parent is not None else 0
        self.model = model
        self.version = -1
        self.request_id = ""
        self.stamps: list[tuple[str, int]] = []
        self.tensors: list[tuple[str, Tensor]] = []
        self.timestamps = "TIMESTAMPS" in setting.level
        self.capture_tensors = ("TENSORS" in setting.level and setting.spec is not None
                                and setting.spec.captures_tensors)
        self.root: Trace = parent.root if parent is not None else self
        self.children: list[Trace] = []
        self.setting = setting
        self.started_ns = time.perf_counter_ns()
        self.ended_ns = 0
        self.traceparent = ""  # the W3C context a client sent (opentelemetry mode)

    def stamp(self, name: str, ns: int | None = None) -> None:
        if self.timestamps:
            self.stamps.append((name, time.perf_counter_ns() if ns is None else ns))

    def child(self, model: str) -> Trace:
        """The trace of an ensemble step of this request."""
        trace = Trace(self._tracer, self.setting, model, self)
        self.root.children.append(trace)
        return trace

    def request_started(self, model: str, version: int, request: InferRequest,
                        arrived_ns: int) -> None:
        """The request reached its model version (REQUEST_START, then QUEUE_START)."""
        self.model, self.version, self.request_id = model, version, request.id
        self.stamp("REQUEST_START", arrived_ns)
        if self.capture_tensors:
            self.tensors += [("TENSOR_QUEUE_INPUT", tensor) for tensor in request.inputs]
        self.stamp("QUEUE_START")

    def request_finished(self, compute_start_ns: int, compute_ns: tuple[int, int, int],
                         result: InferResponse | BaseException | None) -> None:
        """The model answered: the compute timestamps from where the executor started the
        batch and its phases, the outputs, then REQUEST_END."""
        if compute_start_ns:
            input_ns, infer_ns, output_ns = compute_ns
            self.stamp("COMPUTE_START", compute_start_ns)
            self.stamp("COMPUTE_INPUT_END", compute_start_ns + input_ns)
            self.stamp("COMPUTE_OUTPUT_START", compute_start_ns + input_ns + infer_ns)
            self.stamp("COMPUTE_END", compute_start_ns + input_ns + infer_ns + output_ns)
        self.outputs(result)
        self.stamp("REQUEST_END")

    def outputs(self, result: InferResponse | BaseException | None) -> None:
        outputs = getattr(result, "outputs", None)
        if self.capture_tensors and outputs:
            self.tensors += [("TENSOR_BACKEND_OUTPUT", tensor) for tensor in outputs]

    def end(self) -> None:
        """The request is answered (its frontend sent the response): hand the trace over."""
        self.ended_ns = time.perf_counter_ns()
        if self.root is self:
            self._tracer.finished(self)


async def traced(trace: Trace | None, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` (not started yet) with ``trace`` as the request's trace; a request
    that fails ends its trace here (one that succeeds is ended by its frontend, once sent)."""
    if trace is None:
        return await awaitable
    token = CURRENT.set(trace)
    try:
        return await awaitable
    except BaseException:
        trace.end()
        raise
    finally:
        CURRENT.reset(token)


class TraceOwner(Protocol):
    """What a ``Trace`` needs of the tracer that began it (the kernel's ``Tracer``): the
    numbers of traces, and where an ended root trace goes."""

    @property
    def ids(self) -> Iterator[int]: ...

    def finished(self, trace: Trace) -> None: ...


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
