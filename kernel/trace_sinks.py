"""Where ended traces go: Triton's JSON trace files (``mode=triton``) or OpenTelemetry spans
(``mode=opentelemetry``), each on a writer thread of its own so the event loop only hands a
finished trace over.

``TritonFileSink`` keeps Triton's file rules: a setting's traces collect until
``log_frequency`` of them (then ``<file>.<n>``, n counting up from 0 per file), until its
``trace_count`` is used up (also an indexed file), or until the setting is replaced or the
server stops (then ``<file>`` itself, or an indexed file when log_frequency is set). Unlike
Triton's, ``<file>`` is a complete JSON array after every write (the closing bracket is
rewritten), so it can be read while the server runs, and without a frequency or a count each
trace is appended to it as it ends rather than held in memory until exit.
``OpenTelemetrySink`` builds Triton's spans (``InferRequest``, a span per model with
``triton.*`` attributes, a ``compute`` span, ensemble steps under their ensemble's span) and
hands them to a batch span processor with the OTLP/HTTP exporter; ``opentelemetry-sdk`` is
imported only when that mode is chosen.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from inferd.kernel.trace_config import TraceConfig
    from inferd.kernel.tracing import Trace, TraceSetting
    from inferd.protocols.messages import Tensor

log = logging.getLogger(__name__)
CLOSE_TIMEOUT_SECS = 10.0


class TraceSink(Protocol):
    def write(self, trace: Trace) -> None:
        """Take an ended root trace (with its children); never blocks."""

    def retire(self, setting: TraceSetting) -> None:
        """``setting`` was replaced: write what it still holds."""

    def close(self) -> None:
        """Write everything left and stop (bounded)."""


class _Worker:
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


# ---------------------------------------------------------------------------- Triton's files


def _values(tensor: Tensor) -> Iterator[str]:
    data = np.asarray(tensor.data).reshape(-1)
    if tensor.datatype == "BYTES":
        for item in data:
            text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            yield f'"{text}"'
    elif tensor.datatype == "BOOL":
        yield from ("1" if item else "0" for item in data)
    elif tensor.datatype == "BF16":
        yield from (format(float(v), "g") for v in
                    (data.astype(np.uint32) << 16).view(np.float32))
    elif data.dtype.kind == "f":
        yield from (format(float(item), "g") for item in data)
    else:
        yield from (str(int(item)) for item in data)


def trace_entries(trace: Trace) -> list[dict[str, Any]]:
    """The entries of a root trace and its children in Triton's JSON layout."""
    entries: list[dict[str, Any]] = []
    for each in (trace, *trace.children):
        head: dict[str, Any] = {"id": each.id, "model_name": each.model,
                                "model_version": each.version}
        if each.request_id:
            head["request_id"] = each.request_id
        if each.parent_id:
            head["parent_id"] = each.parent_id
        entries.append(head)
        entries += [{"id": each.id, "timestamps": [{"name": name, "ns": ns}]}
                    for name, ns in each.stamps]
        entries += [{"id": each.id, "activity": activity, "tensor": {
            "name": tensor.name, "data": ",".join(_values(tensor)),
            "shape": ",".join(str(d) for d in tensor.shape), "dtype": tensor.datatype}}
            for activity, tensor in each.tensors]
    return entries


class _TraceFile:
    """``<path>`` (a JSON array, extended in place) and its indexed files ``<path>.<n>``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.index = 0
        self.started = False

    def save(self, parts: list[str], indexed: bool) -> None:
        text = ",".join(parts)
        try:
            if indexed:
                name = f"{self.path}.{self.index}"
                self.index += 1
                with open(name, "w", encoding="utf-8") as file:
                    file.write(f"[{text}]")
            elif not self.started:
                with open(self.path, "w", encoding="utf-8") as file:
                    file.write(f"[{text}]")
                self.started = True
            else:
                with open(self.path, "r+b") as file:
                    file.seek(-1, os.SEEK_END)  # over the closing bracket
                    file.write(f",{text}]".encode())
        except OSError as error:
            log.error("failed creating trace file: %s", error)


class TritonFileSink:
    def __init__(self) -> None:
        self._files: dict[str, _TraceFile] = {}
        self._worker = _Worker("inferd-trace-files")

    def write(self, trace: Trace) -> None:
        self._worker.submit(lambda: self._collect(trace))

    def retire(self, setting: TraceSetting) -> None:
        self._worker.submit(lambda: self._retired(setting))

    def close(self) -> None:
        self._worker.close()

    def _file(self, path: str) -> _TraceFile:
        found = self._files.get(path)
        if found is None:
            found = self._files[path] = _TraceFile(path)
        return found

    def _collect(self, trace: Trace) -> None:
        setting = trace.setting
        setting.stream.append(",".join(json.dumps(entry, separators=(",", ":"))
                                       for entry in trace_entries(trace)))
        setting.collected += 1
        exhausted = setting.count == 0 and setting.collected >= setting.created
        if exhausted or (setting.log_frequency and
                         len(setting.stream) >= setting.log_frequency):
            self._flush(setting, True)
        elif setting.retired:
            self._flush(setting, setting.log_frequency != 0)
        elif not setting.log_frequency and setting.count < 0:
            # Unlimited traces, no frequency: Triton holds them all in memory until exit;
            # appended at once they end up in <file> the same, without piling up.
            self._flush(setting, False)

    def _retired(self, setting: TraceSetting) -> None:
        # Set here, in order: traces that ended before the setting was replaced still
        # collect as it said; those that end later are written at once.
        setting.retired = True
        self._flush(setting, setting.log_frequency != 0)

    def _flush(self, setting: TraceSetting, indexed: bool) -> None:
        if setting.stream and setting.file:
            parts, setting.stream = setting.stream, []
            self._file(setting.file).save(parts, indexed)


# ---------------------------------------------------------------------------- OpenTelemetry

_FRONTEND = ("HTTP_", "GRPC_")
_COMPUTE = "COMPUTE_"


class OpenTelemetrySink:
    def __init__(self, config: TraceConfig) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        url = config.option("url")
        if "://" not in url:
            url = f"http://{url}"
        # Resource.create also reads OTEL_RESOURCE_ATTRIBUTES, as Triton's SDK does.
        self._provider = TracerProvider(resource=Resource.create(config.resource()))
        self._provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=url),
            max_queue_size=int(config.option("bsp_max_queue_size", "2048")),
            schedule_delay_millis=float(config.option("bsp_schedule_delay", "5000")),
            max_export_batch_size=int(config.option("bsp_max_export_batch_size", "512")),
        ))
        self._tracer = self._provider.get_tracer("inferd")
        # Spans carry wall-clock times; traces record the steady clock, as Triton's do.
        self._offset_ns = time.time_ns() - time.perf_counter_ns()
        self._worker = _Worker("inferd-trace-spans")

    def write(self, trace: Trace) -> None:
        self._worker.submit(lambda: self._export(trace))

    def retire(self, setting: TraceSetting) -> None:
        return None

    def close(self) -> None:
        self._worker.close()
        # Exports what the batch processor still holds; bounded, as an unreachable collector
        # would have the exporter retry for a minute.
        closing = threading.Thread(target=self._provider.shutdown, daemon=True)
        closing.start()
        closing.join(CLOSE_TIMEOUT_SECS)

    def _export(self, trace: Trace) -> None:
        from opentelemetry.trace import SpanKind, set_span_in_context

        offset = self._offset_ns
        client = None
        if trace.traceparent:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )

            client = TraceContextTextMapPropagator().extract({"traceparent": trace.traceparent})
        root = self._tracer.start_span("InferRequest", context=client, kind=SpanKind.SERVER,
                                       start_time=trace.started_ns + offset)
        for name, ns in trace.stamps:
            if name.startswith(_FRONTEND):
                root.add_event(name, timestamp=ns + offset)
        model_spans: dict[int, Any] = {}
        for each in (trace, *trace.children):
            parent = model_spans.get(each.parent_id, root)
            stamps = [(name, ns) for name, ns in each.stamps if not name.startswith(_FRONTEND)]
            start = next((ns for name, ns in stamps if name == "REQUEST_START"),
                         stamps[0][1] if stamps else each.started_ns)
            end = next((ns for name, ns in stamps if name == "REQUEST_END"),
                       each.ended_ns or trace.ended_ns)
            attributes: dict[str, Any] = {
                "triton.model_name": each.model, "triton.model_version": each.version,
                "triton.trace_id": each.id, "triton.trace_parent_id": each.parent_id}
            if each.request_id:
                attributes["triton.request_id"] = each.request_id
            span = self._tracer.start_span(each.model, context=set_span_in_context(parent),
                                           kind=SpanKind.SERVER, start_time=start + offset,
                                           attributes=attributes)
            model_spans[each.id] = span
            compute = [(name, ns) for name, ns in stamps if name.startswith(_COMPUTE)]
            for name, ns in stamps:
                if not name.startswith(_COMPUTE):
                    span.add_event(name, timestamp=ns + offset)
            if compute:
                compute_span = self._tracer.start_span(
                    "compute", context=set_span_in_context(span), kind=SpanKind.SERVER,
                    start_time=compute[0][1] + offset)
                for name, ns in compute:
                    compute_span.add_event(name, timestamp=ns + offset)
                compute_span.end(end_time=compute[-1][1] + offset)
            span.end(end_time=max(end, start) + offset)
        # Children end before their parents, as their spans close first.
        root.end(end_time=(trace.ended_ns or time.perf_counter_ns()) + offset)


def sink_for(config: TraceConfig) -> TraceSink:
    if config.mode == "opentelemetry":
        return OpenTelemetrySink(config)
    return TritonFileSink()
