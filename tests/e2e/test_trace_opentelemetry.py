"""``--trace-config mode=opentelemetry`` end to end: a server exports its traces over OTLP/HTTP
to a receiver this module runs on loopback (an HTTP server taking ``POST /v1/traces`` and
decoding each ``ExportTraceServiceRequest`` with the ``opentelemetry-proto`` package). The
spans are Triton's: ``InferRequest`` with the frontend's timestamps as events, a span per
model with the ``triton.*`` attributes and its request timestamps, a ``compute`` span under
it, an ensemble's steps under the ensemble's span; the resource has the attributes given."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness
from tests.services import import_or_missing

trace_service_pb2 = import_or_missing(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    "pip install opentelemetry-proto; make setup installs it")

SPAN_WAIT_SECS = 20.0
CHAIN = """name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT_SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" } ]
    output_map [ { key: "OUTPUT0" value: "sum" }, { key: "OUTPUT1" value: "diff" } ] },
  { model_name: "simple" model_version: -1
    input_map [ { key: "INPUT0" value: "sum" }, { key: "INPUT1" value: "diff" } ]
    output_map [ { key: "OUTPUT0" value: "OUT_SUM" } ] }
] }
"""


class Receiver:
    """The spans (with their resource's attributes) every export brought."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        resource = _attributes(resource_spans.resource.attributes)
                        for scope in resource_spans.scope_spans:
                            receiver.spans += [(resource, span) for span in scope.spans]
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def trace_of(self, model: str, request_id: str) -> list[Any]:
        """Every span of the trace whose ``model`` span has ``request_id`` (bounded wait
        until its root span came too)."""
        deadline = time.monotonic() + SPAN_WAIT_SECS
        while True:
            with self.lock:
                spans = [span for _, span in self.spans]
            found = [s for s in spans if s.name == model and
                     _attributes(s.attributes).get("triton.request_id") == request_id]
            if found:
                trace_id = found[0].trace_id
                members = [s for s in spans if s.trace_id == trace_id]
                if any(s.name == "InferRequest" for s in members):
                    return members
            if time.monotonic() > deadline:
                pytest.fail(f"no complete trace for {model} {request_id}; spans: "
                            f"{[s.name for s in spans]}")
            time.sleep(0.05)


def _attributes(attributes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in attributes:
        kind = item.value.WhichOneof("value")
        values[item.key] = getattr(item.value, kind) if kind else None
    return values


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, receiver: Receiver) -> Any:
    root = module_inferd.repository("simple")
    (root / "chain" / "1").mkdir(parents=True)
    (root / "chain" / "config.pbtxt").write_text(CHAIN, encoding="utf-8")
    return module_inferd.start(
        root, "--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url=127.0.0.1:{receiver.port}/v1/traces",
        "--trace-config", "opentelemetry,resource=test.key=test.value",
        "--trace-config", "opentelemetry,bsp_schedule_delay=50")


def _infer(client: httpclient.InferenceServerClient, model: str, request_id: str) -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in (("A", "B") if model == "chain" else ("INPUT0", "INPUT1")):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    client.infer(model, inputs, request_id=request_id)


def _events(span: Any) -> list[str]:
    return [event.name for event in span.events]


def test_settings_show_the_opentelemetry_options(server: Any, receiver: Receiver) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.get_trace_settings() == {
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
        "trace_mode": "opentelemetry", "url": f"127.0.0.1:{receiver.port}/v1/traces",
        "resource": "test.key=test.value", "bsp_schedule_delay": "50",
        "bsp_max_queue_size": "2048", "bsp_max_export_batch_size": "512"}
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    settings = grpc.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_mode"]["value"] == ["opentelemetry"]
    assert "trace_file" not in settings


def test_a_request_is_exported_as_tritons_spans(server: Any, receiver: Receiver) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    _infer(http, "simple", "otel-1")
    spans = receiver.trace_of("simple", "otel-1")
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"InferRequest", "simple", "compute"}
    root, model, compute = by_name["InferRequest"], by_name["simple"], by_name["compute"]
    assert model.parent_span_id == root.span_id
    assert compute.parent_span_id == model.span_id
    assert _events(root) == ["HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START",
                             "HTTP_SEND_END"]
    assert _events(model) == ["REQUEST_START", "QUEUE_START", "REQUEST_END",
                              "INFER_RESPONSE_COMPLETE"]
    assert _events(compute) == ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
                                "COMPUTE_END"]
    attributes = _attributes(model.attributes)
    assert attributes["triton.model_name"] == "simple"
    assert attributes["triton.model_version"] == 1
    assert attributes["triton.trace_parent_id"] == 0
    assert root.start_time_unix_nano <= model.start_time_unix_nano <= compute.start_time_unix_nano
    assert compute.end_time_unix_nano <= model.end_time_unix_nano <= root.end_time_unix_nano
    # Wall-clock times (OpenTelemetry's), not the steady clock of the trace files.
    assert abs(root.start_time_unix_nano - time.time_ns()) < 600 * 10**9
    with receiver.lock:
        resources = [resource for resource, span in receiver.spans if span is root]
    assert resources[0]["service.name"] == "triton-inference-server"
    assert resources[0]["test.key"] == "test.value"


def test_an_ensembles_steps_are_child_spans(server: Any, receiver: Receiver) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    _infer(http, "chain", "otel-ensemble")
    spans = receiver.trace_of("chain", "otel-ensemble")
    [root] = [s for s in spans if s.name == "InferRequest"]
    [ensemble] = [s for s in spans if s.name == "chain"]
    steps = [s for s in spans if s.name == "simple"]
    computes = [s for s in spans if s.name == "compute"]
    assert ensemble.parent_span_id == root.span_id
    assert len(steps) == 2 and all(s.parent_span_id == ensemble.span_id for s in steps)
    assert sorted(c.parent_span_id for c in computes) == sorted(s.span_id for s in steps)
    ensemble_id = _attributes(ensemble.attributes)["triton.trace_id"]
    assert all(_attributes(s.attributes)["triton.trace_parent_id"] == ensemble_id
               for s in steps)


def test_a_propagated_context_is_always_traced_under_the_clients_span(
        server: Any, receiver: Receiver) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.update_trace_settings(settings={"trace_rate": "1000"})["trace_rate"] == "1000"
    try:
        trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        http.infer("simple", inputs, request_id="unsampled")  # 1 in 1000: not traced
        http.infer("simple", inputs, request_id="propagated",
                   headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
        spans = receiver.trace_of("simple", "propagated")
        [root] = [s for s in spans if s.name == "InferRequest"]
        assert root.trace_id.hex() == trace_id
        assert root.parent_span_id.hex() == span_id
        with receiver.lock:
            ids = {_attributes(span.attributes).get("triton.request_id")
                   for _, span in receiver.spans}
        assert "unsampled" not in ids
    finally:
        http.update_trace_settings(settings={"trace_rate": None})
