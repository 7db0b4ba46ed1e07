"""The trace settings' rules (``inferd.kernel.observability.tracing``), ``--trace-config`` parsing
and the Triton file sink, driven directly: no server, no sockets."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from inferd.kernel.observability.trace_config import parse_trace_config
from inferd.kernel.observability.tracing import Tracer
from inferd.kernel.runtime.plugin_manager import installed
from inferd.kernel.sdk.tracing import Trace, TraceConfig, TraceSetting, TraceSinkSpec
from inferd.plugins.tracing.triton import TritonFileSink, trace_entries
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor, TraceSettingRequest


class ListSink:
    def __init__(self) -> None:
        self.written: list[Trace] = []
        self.retired: list[TraceSetting] = []

    def write(self, trace: Trace) -> None:
        self.written.append(trace)

    def retire(self, setting: TraceSetting) -> None:
        self.retired.append(setting)

    def close(self) -> None:
        pass


SINKS = installed().trace_sinks()  # the installed plugins' modes: triton and opentelemetry
TRITON = SINKS.require("triton")  # the mode's plugin says what it does


def tracer(spec: TraceSinkSpec | None = TRITON, **fields: object) -> tuple[Tracer, ListSink]:
    sink = ListSink()
    config = TraceConfig(**{"file": "/tmp/t.json", **fields})  # type: ignore[arg-type]
    return Tracer(config, sink, spec), sink


def test_what_a_mode_does_differently_is_its_specs() -> None:
    """A file, the file settings listed and tensors captured: the triton spec's fields, not
    the mode's name; a mode whose spec sets none of them has none of them."""
    plain = TraceSinkSpec("plain", (), lambda config: ListSink())
    traces, _ = tracer(plain, level=("TIMESTAMPS", "TENSORS"), rate=1, file="")
    assert set(values(traces.settings())) == {"trace_level", "trace_rate", "trace_count",
                                              "trace_mode"}
    trace = traces.begin("m")
    assert trace is not None and not trace.capture_tensors
    triton, _ = tracer(level=("TIMESTAMPS", "TENSORS"), rate=1)
    assert {"trace_file", "log_frequency"} <= set(values(triton.settings()))
    triton_trace = triton.begin("m")
    assert triton_trace is not None and triton_trace.capture_tensors


def values(reply: object) -> dict[str, tuple[str, ...]]:
    return dict(reply.settings)  # type: ignore[attr-defined]


def test_rate_samples_every_nth_request_while_count_lasts() -> None:
    traces, _ = tracer(level=("TIMESTAMPS",), rate=2, count=2)
    sampled = [traces.begin("m") is not None for _ in range(8)]
    assert sampled == [False, True, False, True, False, False, False, False]
    assert values(traces.settings())["trace_count"] == ("0",)


def test_nothing_is_sampled_while_off_and_active_follows_the_settings() -> None:
    traces, _ = tracer()
    assert not traces.active and traces.begin("m") is None
    traces.update(TraceSettingRequest("m", True, level=("TIMESTAMPS",), rate=1))
    assert traces.active
    assert traces.begin("m") is not None and traces.begin("other") is None
    traces.update(TraceSettingRequest("m", True, clear=("trace_level", "trace_rate")))
    assert not traces.active


def test_a_model_setting_overrides_field_by_field_and_follows_global_changes() -> None:
    traces, sink = tracer(rate=1000)
    traces.update(TraceSettingRequest("m", True, rate=5))
    traces.update(TraceSettingRequest("", True, count=7, rate=9))
    model, global_ = values(traces.settings("m")), values(traces.settings())
    assert (model["trace_rate"], model["trace_count"]) == (("5",), ("7",))
    assert (global_["trace_rate"], global_["trace_count"]) == (("9",), ("7",))
    # Clearing the global setting goes back to the start-up values, for the model too.
    traces.update(TraceSettingRequest("", True, clear=("trace_count", "trace_rate")))
    assert values(traces.settings("m"))["trace_count"] == ("-1",)
    assert values(traces.settings())["trace_rate"] == ("1000",)
    assert sink.retired  # replaced settings hand their traces over


def test_an_invalid_update_changes_nothing() -> None:
    traces, _ = tracer(file="")
    traces.update(TraceSettingRequest("m", True, rate=3))
    before = (traces.settings(), traces.settings("m"))
    with pytest.raises(InvalidArgument, match="trace file name is not given"):
        traces.update(TraceSettingRequest("", True, level=("TIMESTAMPS",), rate=4))
    assert (traces.settings(), traces.settings("m")) == before
    with_file, _ = tracer()
    with pytest.raises(InvalidArgument, match="sample rate must be non-zero"):
        with_file.update(TraceSettingRequest("m", True, level=("TIMESTAMPS",), rate=0))
    assert values(with_file.settings("m")) == values(with_file.settings())


def test_trace_entries_are_tritons_layout() -> None:
    traces, sink = tracer(level=("TIMESTAMPS", "TENSORS"), rate=1)
    trace = traces.begin("ens")
    assert trace is not None
    request = InferRequest("ens", (Tensor("X", "BYTES", (2,), np.array([b"a", b"b"], object)),),
                           id="r")
    trace.request_started("ens", 1, request, 10)
    step = trace.child("step")
    step.request_started("step", 3, InferRequest("step", ()), 20)
    step.request_finished(30, (1, 2, 3), InferResponse(
        "step", "3", (Tensor("Y", "FP32", (1, 2), np.array([[0.5, 2.0]], np.float32)),)))
    step.end()
    trace.request_finished(0, (0, 0, 0), None)
    trace.end()
    assert sink.written == [trace]
    entries = trace_entries(trace)
    heads = [e for e in entries if "model_name" in e]
    assert heads == [{"id": trace.id, "model_name": "ens", "model_version": 1, "request_id": "r"},
                     {"id": step.id, "model_name": "step", "model_version": 3,
                      "parent_id": trace.id}]
    compute = [e["timestamps"][0] for e in entries
               if e["id"] == step.id and "timestamps" in e][2:6]
    assert compute == [{"name": "COMPUTE_START", "ns": 30}, {"name": "COMPUTE_INPUT_END", "ns": 31},
                       {"name": "COMPUTE_OUTPUT_START", "ns": 33},
                       {"name": "COMPUTE_END", "ns": 36}]
    tensors = [e for e in entries if "activity" in e]
    assert tensors == [
        {"id": trace.id, "activity": "TENSOR_QUEUE_INPUT",
         "tensor": {"name": "X", "data": '"a","b"', "shape": "2", "dtype": "BYTES"}},
        {"id": step.id, "activity": "TENSOR_BACKEND_OUTPUT",
         "tensor": {"name": "Y", "data": "0.5,2", "shape": "1,2", "dtype": "FP32"}}]


def test_the_file_sink_keeps_the_file_a_json_array_and_indexes_by_frequency(
        tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    sink = TritonFileSink()
    traces = Tracer(TraceConfig(level=("TIMESTAMPS",), rate=1, file=str(path)), sink, TRITON)
    for _ in range(2):
        trace = traces.begin("m")
        assert trace is not None
        trace.end()
    traces.update(TraceSettingRequest("", True, log_frequency=2))  # flushes to the file
    for _ in range(4):
        trace = traces.begin("m")
        assert trace is not None
        trace.end()
    trace = traces.begin("m")
    assert trace is not None
    trace.end()
    traces.update(TraceSettingRequest("", True, log_frequency=None, clear=("log_frequency",)))
    trace = traces.begin("m")
    assert trace is not None
    trace.end()
    traces.close()
    assert [e["id"] for e in json.loads(path.read_text())] == [1, 2, 8]
    assert [[e["id"] for e in json.loads((tmp_path / f"trace.json.{n}").read_text())]
            for n in range(3)] == [[3, 4], [5, 6], [7]]


@pytest.mark.parametrize("flags, expected", [
    ([], TraceConfig()),
    (["level=TIMESTAMPS", "level=TENSORS", "rate=5", "count=3", "triton,file=/f",
      "triton,log-frequency=2"],
     TraceConfig(("TIMESTAMPS", "TENSORS"), 5, 3, 2, "/f")),
    (["level=timestamps", "level=OFF"], TraceConfig()),
    (["mode=opentelemetry", "opentelemetry,resource=a=b", "triton,file=/ignored"],
     TraceConfig(mode="opentelemetry", options=(
         ("url", "http://localhost:4318/v1/traces"), ("resource", "a=b"),
         ("bsp_max_queue_size", "2048"), ("bsp_schedule_delay", "5000"),
         ("bsp_max_export_batch_size", "512")))),
])
def test_trace_config_reads_tritons_flags(flags: list[str], expected: TraceConfig) -> None:
    assert parse_trace_config(flags, SINKS, environ={}) == expected


def test_trace_config_reads_the_batch_processor_environment() -> None:
    config = parse_trace_config(
        ["mode=opentelemetry", "opentelemetry,bsp_schedule_delay=9"], SINKS,
        environ={"OTEL_BSP_MAX_QUEUE_SIZE": "7"})
    assert config.option("bsp_schedule_delay") == "9"
    assert config.option("bsp_max_queue_size") == "7"


@pytest.mark.parametrize("flag, message", [
    ("level", "the format is"),
    (",file=x", "no trace mode specified"),
    ("jaeger,url=x", "invalid value for trace mode option: jaeger"),
    ("level=loud", "invalid value for trace level option: loud"),
    ("rate=-1", "expected a whole number"),
    ("triton,url=x", "unknown triton trace setting 'url'"),
    ("file=x", "unknown global trace setting 'file'"),
    ("mode=zipkin", "invalid value for trace mode option: zipkin"),
])
def test_bad_trace_config_flags_are_refused(flag: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_trace_config([flag], SINKS, environ={})


def test_an_untraced_request_costs_one_lookup() -> None:
    """Sampling is one dict lookup and a counter: far below a request's own cost."""
    traces, _ = tracer(level=("TIMESTAMPS",), rate=1000)
    started = time.perf_counter()
    for _ in range(100_000):
        traces.begin("m")
    assert (time.perf_counter() - started) / 100_000 < 20e-6


def test_tritons_deprecated_trace_flags_still_work_and_trace_config_wins(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from inferd.kernel.cli.serve import serve_parser, settings_from
    from inferd.kernel.observability.tracing import tracer_for
    from inferd.kernel.runtime.plugin_manager import Plugins

    plugins = Plugins.load()
    args = serve_parser(plugins).parse_args([
        "--model-repository", str(tmp_path), "--trace-file", "/x.json",
        "--trace-level", "TIMESTAMPS", "--trace-rate", "1", "--trace-log-frequency", "3",
        "--trace-config", "rate=5"])
    traces = tracer_for(settings_from(args, plugins).trace, plugins.trace_sinks())
    assert (traces.config.file, traces.config.level, traces.config.rate,
            traces.config.log_frequency) == ("/x.json", ("TIMESTAMPS",), 5, 3)
    assert "'--trace-file' has been deprecated" in caplog.text
