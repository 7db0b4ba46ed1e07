"""The ``opentelemetry`` trace mode plugin: Triton's spans over OTLP/HTTP.

``OpenTelemetrySink`` builds Triton's spans (``InferRequest``, a span per model with
``triton.*`` attributes, a ``compute`` span, ensemble steps under their ensemble's span) and
hands them to a batch span processor with the OTLP/HTTP exporter; ``opentelemetry-sdk`` is
imported only when the sink opens. Its settings: ``opentelemetry,url=URL`` (default
``DEFAULT_OTLP_URL``), ``opentelemetry,resource=KEY=VALUE`` (repeatable), and the batch span
processor's ``bsp_max_queue_size``, ``bsp_schedule_delay`` and ``bsp_max_export_batch_size``,
which default to the ``OTEL_BSP_*`` environment variables or 2048, 5000 and 512, as in Triton.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from inferd.kernel.sdk import (
    CLOSE_TIMEOUT_SECS,
    SinkWorker,
    TraceConfig,
    TraceSink,
    TraceSinkRegistry,
    TraceSinkSpec,
    hookimpl,
    trace_integer,
)

if TYPE_CHECKING:
    from inferd.kernel.sdk import Trace, TraceSetting

MODE = "opentelemetry"
DEFAULT_OTLP_URL = "http://localhost:4318/v1/traces"
BSP_DEFAULTS = (("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
                ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", 5000),
                ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
SETTINGS = ("url", "resource", *(name for name, _, _ in BSP_DEFAULTS))


def complete(options: list[tuple[str, str]], environ: Mapping[str, str]
             ) -> list[tuple[str, str]]:
    """The mode's settings checked, the URL and the batch processor's filled in."""
    completed: list[tuple[str, str]] = []
    for setting, value in options:
        flag = f"{MODE},{setting}={value}"
        if setting.startswith("bsp_"):
            completed.append((setting, str(trace_integer(value, flag, 0))))
        elif setting == "resource" and "=" not in value:
            raise ValueError(f"--trace-config {flag}: a resource attribute is key=value")
        else:
            completed.append((setting, value))
    if not any(key == "url" for key, _ in completed):
        completed.insert(0, ("url", DEFAULT_OTLP_URL))
    for setting, variable, default in BSP_DEFAULTS:
        if not any(key == setting for key, _ in completed):
            value = environ.get(variable, str(default))
            completed.append((setting, str(trace_integer(value, variable, 0))))
    return completed


def open_sink(config: TraceConfig) -> TraceSink:
    try:
        return OpenTelemetrySink(config)
    except ImportError as error:
        raise ValueError(
            f"--trace-config mode=opentelemetry needs the opentelemetry-sdk and "
            f"opentelemetry-exporter-otlp-proto-http packages (pip install "
            f"'inferd[opentelemetry]'): {error}") from None


@hookimpl
def inferd_register_trace_sinks(registry: TraceSinkRegistry) -> None:
    registry.add(TraceSinkSpec(MODE, SETTINGS, open_sink, complete, follows_traceparent=True))


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
        self._worker = SinkWorker("inferd-trace-spans")

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
