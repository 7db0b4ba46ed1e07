"""Request tracing (Triton's trace extension): the trace settings, sampling, and the trace a
sampled request carries.

``Tracer`` holds the global setting and the per-model ones with Triton's rules: a model's
setting overrides the global one field by field, a cleared field falls back to the global
value (the global one to the start-up value), and an update builds new settings (fresh
counters) and is refused whole when the result would trace without a file. ``begin`` samples
one request in ``trace_rate`` while ``trace_count`` lasts and returns a ``Trace``; the frontend
that began it puts it in ``CURRENT`` for the request's task (the scheduler and the ensemble
runner read it there, so an untraced request pays one context-variable read), stamps its own
timestamps and calls ``end``. An ended trace, with the child traces of its ensemble steps, goes
to a sink (a plugin's, ``inferd.kernel.observability.trace_sinks``) that writes files or exports
spans on its own thread: tracing never blocks a request. Owns no protocol and no I/O of its own.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import TraceSettingReply, TraceSettingRequest

if TYPE_CHECKING:
    from inferd.kernel.observability.trace_config import TraceConfig
    from inferd.kernel.observability.trace_sinks import (
        TraceSink,
        TraceSinkRegistry,
        TraceSinkSpec,
    )
    from inferd.protocols.messages import InferRequest, InferResponse, Tensor

CURRENT: ContextVar[Trace | None] = ContextVar("inferd_trace", default=None)
T = TypeVar("T")

_FIELDS = ("level", "rate", "count", "log_frequency")
_CLEARED = {"trace_level": "level", "trace_rate": "rate", "trace_count": "count",
            "log_frequency": "log_frequency"}


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

    def __init__(self, tracer: Tracer, setting: TraceSetting, model: str,
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


class Tracer:
    """The server's trace settings and sampler; ``active`` is false while no setting traces
    (the frontends skip everything then)."""

    def __init__(self, config: TraceConfig, sink: TraceSink,
                 spec: TraceSinkSpec | None = None) -> None:
        self.config = config
        self.sink = sink
        self.spec = spec  # the mode's, from its plugin (None: a mode that does nothing special)
        self.ids = itertools.count(1)
        self._default = TraceSetting(config.level, config.rate, config.count,
                                     config.log_frequency, config.file, config.mode, spec=spec)
        self._global = TraceSetting(config.level, config.rate, config.count,
                                    config.log_frequency, config.file, config.mode, spec=spec)
        self._models: dict[str, TraceSetting] = {}
        self.active = bool(config.level)

    def begin(self, model: str, traceparent: str | None = None) -> Trace | None:
        """A trace for a request to ``model`` if this one is sampled. In opentelemetry mode
        a request with a W3C ``traceparent`` is always traced, its spans under the client's
        (Triton's context propagation)."""
        setting = self._models.get(model, self._global)
        propagated = bool(traceparent) and self.spec is not None and \
            self.spec.follows_traceparent
        if not setting.sample(propagated):
            return None
        trace = Trace(self, setting, model)
        if propagated:
            trace.traceparent = traceparent or ""
        return trace

    def finished(self, trace: Trace) -> None:
        self.sink.write(trace)

    # ------------------------------------------------------------------ settings

    def settings(self, model: str = "") -> TraceSettingReply:
        setting = self._models.get(model, self._global) if model else self._global
        values: list[tuple[str, tuple[str, ...]]] = [
            ("trace_level", setting.level or ("OFF",)),
            ("trace_rate", (str(setting.rate),)),
            ("trace_count", (str(setting.count),)),
        ]
        if self.spec is not None and self.spec.writes_file:
            values += [("log_frequency", (str(setting.log_frequency),)),
                       ("trace_file", (setting.file,))]
        values.append(("trace_mode", (setting.mode,)))
        options: dict[str, list[str]] = {}
        for key, value in self.config.options:
            options.setdefault(key, []).append(value)
        values += [(key, tuple(found)) for key, found in options.items()]
        return TraceSettingReply(tuple(values))

    def update(self, request: TraceSettingRequest) -> None:
        """Apply ``request`` (Triton's rules, see the module docstring) or raise
        ``InvalidArgument`` having changed nothing."""
        model = request.model
        cleared = {_CLEARED[name] for name in request.clear}
        new = {field: getattr(request, field) for field in _FIELDS}
        changes: dict[str, TraceSetting | None] = {}
        if model:
            changes[model] = self._derived(self._models.get(model), self._global, new, cleared)
        else:
            fallback = self._derived(self._global, self._default, new, cleared, model=False)
            assert fallback is not None
            changes[""] = fallback
            # The models' settings mirror the global one where they set nothing themselves.
            for name, current in self._models.items():
                changes[name] = self._derived(current, fallback, {}, set())
        for setting in changes.values():
            if setting is not None and setting.level and setting.invalid_reason:
                raise InvalidArgument(
                    f"Attempting to set invalid trace setting :{setting.invalid_reason}")
        for name, setting in changes.items():
            replaced = self._models.pop(name, None) if name else self._global
            if replaced is not None:
                self._retire(replaced)
            if not name:
                assert setting is not None
                self._global = setting
            elif setting is not None:
                self._models[name] = setting
        self.active = bool(self._global.level) or any(s.level for s in self._models.values())

    @staticmethod
    def _derived(current: TraceSetting | None, fallback: TraceSetting, new: dict[str, Any],
                 cleared: set[str], model: bool = True) -> TraceSetting | None:
        """The setting that replaces ``current``: a field given in ``new`` takes its value,
        one ``current`` set itself keeps it, a cleared one or any other takes
        ``fallback``'s. A model's setting that sets nothing any more is None (the model
        follows the global setting again)."""
        values: dict[str, Any] = {}
        specified = set()
        for field in _FIELDS:
            given = new.get(field)
            kept = current is not None and field in current.specified
            if field not in cleared and (given is not None or kept):
                specified.add(field)
                values[field] = given if given is not None else getattr(current, field)
            else:
                values[field] = getattr(fallback, field)
        if model and not specified:
            return None
        return TraceSetting(values["level"], values["rate"], values["count"],
                            values["log_frequency"], fallback.file, fallback.mode,
                            frozenset(specified), fallback.spec)

    def _retire(self, setting: TraceSetting) -> None:
        self.sink.retire(setting)

    def close(self) -> None:
        """Shutdown: write what every setting still holds, then stop the sink."""
        for setting in (self._global, *self._models.values()):
            self._retire(setting)
        self.sink.close()


def tracer_for(config: TraceConfig, sinks: TraceSinkRegistry) -> Tracer:
    """The server's tracer for ``Settings.trace`` (``StartupFailed`` when its mode's plugin is
    missing or its sink cannot be made); ``sinks``: the server's plugins'."""
    from inferd.kernel.supervisor import StartupFailed
    from inferd.kernel.observability.trace_sinks import NullSink, sink_for

    spec = sinks.get(config.mode)
    if not config.level and spec is None:
        return Tracer(config, NullSink())  # the default mode's plugin removed: no traces
    try:
        sink = sink_for(config, sinks)
    except ValueError as error:
        raise StartupFailed(str(error)) from None
    return Tracer(config, sink, spec)


def disabled_tracer(sinks: TraceSinkRegistry | None = None) -> Tracer:
    """A tracer that never traces (the default at start-up, without ``--trace-config``); its
    sink is the default mode's of ``sinks``, so the trace API can still turn tracing on (with
    no ``sinks``, a data plane outside a server: none, it never traces)."""
    from inferd.kernel.observability.trace_config import TraceConfig
    from inferd.kernel.observability.trace_sinks import NullSink, sink_for

    config = TraceConfig()
    spec = sinks.get(config.mode) if sinks is not None else None
    sink: TraceSink = sink_for(config, sinks) if sinks is not None and spec is not None \
        else NullSink()
    return Tracer(config, sink, spec)
