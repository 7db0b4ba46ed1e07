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
to a sink (a plugin's: the contract, ``Trace`` and ``TraceSetting`` are the SDK's,
``inferd.kernel.sdk.tracing``) that writes files or exports spans on its own thread: tracing
never blocks a request. Also looks a mode's sink up in the registry (``sink_for``: an unknown
mode is a ``ValueError`` listing those there are). Owns no protocol and no I/O of its own.
"""

from __future__ import annotations

import itertools
from typing import Any

from inferd.kernel.sdk.frontends import StartupFailed
from inferd.kernel.sdk.tracing import (
    Trace,
    TraceConfig,
    TraceSetting,
    TraceSink,
    TraceSinkRegistry,
    TraceSinkSpec,
)
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import TraceSettingReply, TraceSettingRequest

_FIELDS = ("level", "rate", "count", "log_frequency")
_CLEARED = {"trace_level": "level", "trace_rate": "rate", "trace_count": "count",
            "log_frequency": "log_frequency"}


class NullSink:
    """Drops every trace (a server whose trace modes were all removed)."""

    def write(self, trace: Trace) -> None:
        return None

    def retire(self, setting: TraceSetting) -> None:
        return None

    def close(self) -> None:
        return None


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
    config = TraceConfig()
    spec = sinks.get(config.mode) if sinks is not None else None
    sink: TraceSink = sink_for(config, sinks) if sinks is not None and spec is not None \
        else NullSink()
    return Tracer(config, sink, spec)


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
