"""Triton's trace extension end to end through tritonclient http and grpc: the settings'
defaults and errors (SPEC appendix B), per-model settings that override the global ones field by
field and clear back to them, and mode=triton trace files (Triton's JSON layout, timestamps
in order, rate, count, log-frequency, level TENSORS, an ensemble's steps as child traces).

Two servers serve the module: one started without ``--trace-config`` (Triton's defaults), one
tracing every request to a file. Tests on the second change model settings and restore them,
so they run in file order; every wait for a trace file is bounded."""

from __future__ import annotations

import http.client as http_client
import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle


FILE_WAIT_SECS = 20.0
DEFAULTS = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
            "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}
NO_FILE = "Attempting to set invalid trace setting :trace file name is not given"
REQUEST_ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
                 "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
# Every timestamp Triton writes for a gRPC inference, in its order.
GRPC_ORDER = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", *REQUEST_ORDER,
              "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"]

CHAIN = """name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT_SUM" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUT_DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map [ { key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" } ]
    output_map [ { key: "OUTPUT0" value: "sum" }, { key: "OUTPUT1" value: "diff" } ] },
  { model_name: "simple" model_version: -1
    input_map [ { key: "INPUT0" value: "sum" }, { key: "INPUT1" value: "diff" } ]
    output_map [ { key: "OUTPUT0" value: "OUT_SUM" }, { key: "OUTPUT1" value: "OUT_DIFF" } ] }
] }
"""


def _repository(harness: InferdHarness, *extra: str) -> Path:
    root = harness.repository("simple", *extra)
    (root / "chain" / "1").mkdir(parents=True)
    (root / "chain" / "config.pbtxt").write_text(CHAIN, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def plain(module_inferd: InferdHarness) -> ServerHandle:
    return module_inferd.start(_repository(module_inferd))


@pytest.fixture(scope="module")
def trace_file(module_inferd: InferdHarness) -> Path:
    return module_inferd.folder / "traces" / "trace.json"


@pytest.fixture(scope="module")
def traced(module_inferd: InferdHarness, trace_file: Path) -> ServerHandle:
    trace_file.parent.mkdir()
    return module_inferd.start(
        _repository(module_inferd, "stream_words"), "--trace-config", f"triton,file={trace_file}",
        "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
        "--trace-config", "triton,log-frequency=1")


@pytest.fixture
def http(traced: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(traced.http_url)
    yield client
    client.close()


@pytest.fixture
def grpc(traced: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(traced.grpc_url)
    yield client
    client.close()


def _http_infer(client: httpclient.InferenceServerClient, model: str = "simple",
                request_id: str = "") -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    names = ("A", "B") if model == "chain" else ("INPUT0", "INPUT1")
    inputs = []
    for name in names:
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    client.infer(model, inputs, request_id=request_id)


def _grpc_infer(client: grpcclient.InferenceServerClient, request_id: str = "") -> None:
    data = np.ones((1, 16), dtype=np.int32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    client.infer("simple", inputs, request_id=request_id)


def _indexed(trace_file: Path) -> set[Path]:
    return set(trace_file.parent.glob(trace_file.name + ".*"))


def _new_files(trace_file: Path, before: set[Path], count: int) -> list[list[dict[str, Any]]]:
    """The contents of the ``count`` indexed files written since ``before``, oldest first
    (waiting, bounded, until they are there and complete)."""
    deadline = time.monotonic() + FILE_WAIT_SECS
    while True:
        new = sorted(_indexed(trace_file) - before, key=lambda p: int(p.suffix[1:]))
        try:
            if len(new) >= count:
                return [json.loads(path.read_text()) for path in new]
        except ValueError:
            pass  # still being written
        if time.monotonic() > deadline:
            pytest.fail(f"expected {count} new trace files, found {[p.name for p in new]}")
        time.sleep(0.05)


def _traces(entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per trace id: its header and its timestamps by name, in file order."""
    traces: dict[int, dict[str, Any]] = {}
    for entry in entries:
        trace = traces.setdefault(entry["id"], {"stamps": [], "tensors": []})
        if "model_name" in entry:
            trace["head"] = entry
        for stamp in entry.get("timestamps", ()):
            trace["stamps"].append((stamp["name"], stamp["ns"]))
        if "activity" in entry:
            trace["tensors"].append(entry)
    return traces


# ---------------------------------------------------------------------------- settings


def test_defaults_and_metadata_are_tritons(plain: ServerHandle) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    grpc = grpcclient.InferenceServerClient(plain.grpc_url)
    assert http.get_trace_settings() == DEFAULTS
    assert http.get_trace_settings("simple") == DEFAULTS
    settings = grpc.get_trace_settings(as_json=True)["settings"]
    assert {k: v["value"] for k, v in settings.items()} == {
        k: v if isinstance(v, list) else [v] for k, v in DEFAULTS.items()}
    assert "trace" in http.get_server_metadata()["extensions"]


def test_a_level_without_a_file_is_refused_and_changes_nothing(plain: ServerHandle) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    grpc = grpcclient.InferenceServerClient(plain.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "5"})
    assert (refused.value.status(), refused.value.message()) == ("400", NO_FILE)
    with pytest.raises(InferenceServerException) as refused:
        grpc.update_trace_settings("simple", settings={"trace_level": ["TIMESTAMPS"]})
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == NO_FILE
    assert http.get_trace_settings() == DEFAULTS
    assert http.get_trace_settings("simple") == DEFAULTS
    # A setting that traces nothing needs no file.
    assert http.update_trace_settings(settings={"trace_rate": "7"})["trace_rate"] == "7"
    assert http.update_trace_settings(settings={"trace_rate": None}) == DEFAULTS


@pytest.mark.parametrize("settings, status, message", [
    ({"trace_file": "/tmp/elsewhere.json"}, "501",
     "trace file location can not be updated through network protocol"),
    ({"trace_rate": "abc"}, "400", "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": "-1"}, "400",
     "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -1"),
    ({"trace_count": "-2"}, "400",
     "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"log_frequency": "x"}, "400", "Unable to parse 'log_frequency', got: x"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, "400",
     "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["TIMESTAMP"]}, "400",
     "unknown trace level 'TIMESTAMP': expected OFF, TIMESTAMPS or TENSORS"),
    ({"trace_rate": 5}, "400", "'trace_rate' must be a string (null clears it), got 5"),
])
def test_bad_updates_are_refused_over_http(plain: ServerHandle, settings: dict[str, Any],
                                           status: str, message: str) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    with pytest.raises(InferenceServerException) as refused:
        http.update_trace_settings(settings=settings)
    assert refused.value.status() == status
    assert refused.value.message().startswith(message)
    assert http.get_trace_settings() == DEFAULTS


def test_bad_updates_are_refused_over_grpc(plain: ServerHandle) -> None:
    grpc = grpcclient.InferenceServerClient(plain.grpc_url)
    for settings, code, message in [
        ({"trace_rate": ["1", "2"]}, "INVALID_ARGUMENT", "expect only 1 value for 'trace_rate'"),
        ({"trace_count": "-5"}, "INVALID_ARGUMENT",
         "Unable to parse 'trace_count'. Expecting value >= -1, got: -5"),
        ({"trace_file": "x"}, "UNIMPLEMENTED",
         "trace file location can not be updated through network protocol"),
    ]:
        with pytest.raises(InferenceServerException) as refused:
            grpc.update_trace_settings(settings=settings)
        assert (refused.value.status(), refused.value.message()) == (
            f"StatusCode.{code}", message)


def _raw_update(server: ServerHandle, path: str, body: bytes) -> tuple[int, Any]:
    host, port = server.http_url.rsplit(":", 1)
    connection = http_client.HTTPConnection(host, int(port), timeout=FILE_WAIT_SECS)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/v2/trace/setting", "/v2/models/simple/trace/setting"])
@pytest.mark.parametrize("body, message", [
    (b'{"trace_rate": 5}', "'trace_rate' must be a string (null clears it), got 5"),
    (b'{"trace_rate": ["5"]}', "'trace_rate' must be a string (null clears it), got [\"5\"]"),
    (b'{"trace_rate": "-3"}',
     "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -3"),
    (b'{"trace_level": "TIMESTAMPS"}',
     "'trace_level' must be a non-empty array of strings (null clears it)"),
    (b'{"trace_level": ["TIMESTAMPS", "LOUD"]}',
     "unknown trace level 'LOUD': expected OFF, TIMESTAMPS or TENSORS"),
    (b'{"trace_rate": "5",', "failed to parse the trace setting request: "),
    (b"trace_rate=5", "failed to parse the trace setting request: "),
    (b'["trace_rate"]', "the trace setting request must be a JSON object"),
])
def test_bad_updates_are_refused_globally_and_per_model(
        plain: ServerHandle, path: str, body: bytes, message: str) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    status, document = _raw_update(plain, path, body)
    assert status == 400
    assert document["error"].startswith(message)
    assert http.get_trace_settings() == DEFAULTS
    assert http.get_trace_settings("simple") == DEFAULTS


def test_unknown_settings_are_ignored_as_triton_ignores_them(plain: ServerHandle) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    grpc = grpcclient.InferenceServerClient(plain.grpc_url)
    assert http.update_trace_settings(settings={"trace_mode": "opentelemetry",
                                                "no_such": [1, {"x": None}]}) == DEFAULTS
    status, document = _raw_update(plain, "/v2/models/simple/trace/setting",
                                   b'{"bogus": 3, "trace_rate": "9"}')
    assert (status, document) == (200, {**DEFAULTS, "trace_rate": "9"})
    grpc.update_trace_settings("simple", settings={"trace_mode": "x", "trace_rate": None})
    assert http.get_trace_settings("simple") == DEFAULTS
    reply = grpc.update_trace_settings(settings={"whatever": "1"}, as_json=True)
    assert {k: v["value"] for k, v in reply["settings"].items()} == {
        k: v if isinstance(v, list) else [v] for k, v in DEFAULTS.items()}


def test_a_model_that_is_not_ready_has_no_settings(plain: ServerHandle) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    grpc = grpcclient.InferenceServerClient(plain.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        http.get_trace_settings("nope")
    assert (refused.value.status(), refused.value.message()) == (
        "400", "Request for unknown model : nope")
    with pytest.raises(InferenceServerException) as refused:
        grpc.update_trace_settings("nope", settings={"trace_rate": "3"})
    assert refused.value.message() == "Request for unknown model : nope"


def test_model_settings_override_field_by_field_and_clear_back(plain: ServerHandle) -> None:
    http = httpclient.InferenceServerClient(plain.http_url)
    grpc = grpcclient.InferenceServerClient(plain.grpc_url)
    updated = http.update_trace_settings("simple", settings={"trace_rate": "10"})
    assert updated == {**DEFAULTS, "trace_rate": "10"}
    # The global count changes; the model follows it where it set nothing itself.
    http.update_trace_settings(settings={"trace_count": "50", "trace_rate": "20"})
    assert http.get_trace_settings("simple") == {
        **DEFAULTS, "trace_rate": "10", "trace_count": "50"}
    assert http.get_trace_settings("chain") == {
        **DEFAULTS, "trace_rate": "20", "trace_count": "50"}
    # Clearing the model's only setting makes it follow the global one again (gRPC: empty).
    grpc.update_trace_settings("simple", settings={"trace_rate": None})
    assert http.get_trace_settings("simple") == http.get_trace_settings()
    http.update_trace_settings(settings={"trace_count": None, "trace_rate": None})
    assert http.get_trace_settings() == DEFAULTS


# ---------------------------------------------------------------------------- trace files


def test_a_traced_http_request_is_written_in_tritons_layout(
        traced: ServerHandle, http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    assert http.get_trace_settings()["trace_file"] == str(trace_file)
    before = _indexed(trace_file)
    _http_infer(http, request_id="first")
    [entries] = _new_files(trace_file, before, 1)
    [trace] = _traces(entries).values()
    assert trace["head"]["model_name"] == "simple"
    assert trace["head"]["model_version"] == 1
    assert trace["head"]["request_id"] == "first"
    assert "parent_id" not in trace["head"]
    names = [name for name, _ in trace["stamps"]]
    assert names == ["HTTP_RECV_START", "HTTP_RECV_END", *REQUEST_ORDER,
                     "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
    times = [ns for _, ns in trace["stamps"]]
    assert times == sorted(times)
    assert all(isinstance(ns, int) and ns > 0 for ns in times)


def test_a_traced_grpc_request_has_grpc_timestamps(
        grpc: grpcclient.InferenceServerClient, trace_file: Path) -> None:
    before = _indexed(trace_file)
    _grpc_infer(grpc, "g1")
    [entries] = _new_files(trace_file, before, 1)
    [trace] = _traces(entries).values()
    names = [name for name, _ in trace["stamps"]]
    assert names == GRPC_ORDER
    times = [ns for _, ns in trace["stamps"]]
    assert times == sorted(times)


def test_grpc_streams_are_traced_with_a_send_per_response(
        grpc: grpcclient.InferenceServerClient, trace_file: Path) -> None:
    before = _indexed(trace_file)
    answers: queue.Queue[Any] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put(error))
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        inputs.append(tensor)
    grpc.async_stream_infer("simple", inputs, request_id="s1")
    words = grpcclient.InferInput("text_input", [1], "BYTES")
    words.set_data_from_numpy(np.array([b"one two three"], dtype=object))
    grpc.async_stream_infer("stream_words", [words], request_id="w1")
    errors = [answers.get(timeout=FILE_WAIT_SECS) for _ in range(4)]
    grpc.stop_stream()
    assert errors == [None] * 4
    files = _new_files(trace_file, before, 2)
    traces = {t["head"]["request_id"]: t for entries in files
              for t in _traces(entries).values()}
    names = [name for name, _ in traces["s1"]["stamps"]]
    assert names == GRPC_ORDER
    decoupled = [name for name, _ in traces["w1"]["stamps"]]
    assert decoupled[:4] == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "REQUEST_START",
                             "QUEUE_START"]
    assert "REQUEST_END" in decoupled
    # Triton stamps a stream request's first response complete, before its first send.
    assert decoupled.count("INFER_RESPONSE_COMPLETE") == 1
    assert decoupled.index("INFER_RESPONSE_COMPLETE") + 1 == decoupled.index("GRPC_SEND_START")
    assert decoupled.count("GRPC_SEND_START") == decoupled.count("GRPC_SEND_END") == 3
    assert traces["w1"]["head"]["model_name"] == "stream_words"


def _post(server: ServerHandle, path: str, document: dict[str, Any]) -> bytes:
    host, port = server.http_url.rsplit(":", 1)
    connection = http_client.HTTPConnection(host, int(port), timeout=FILE_WAIT_SECS)
    try:
        connection.request("POST", path, body=json.dumps(document),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        connection.close()


def test_generate_native_and_streamed_requests_are_traced(
        traced: ServerHandle, trace_file: Path) -> None:
    before = _indexed(trace_file)
    _post(traced, "/v2/models/simple/generate",
          {"id": "gen", "INPUT0": list(range(16)), "INPUT1": [1] * 16})
    body = _post(traced, "/v2/models/stream_words/generate_stream",
                 {"id": "sse", "text_input": "one two"})
    assert body.count(b"data: ") == 2
    with traced.client() as native:
        native.infer("simple", {"INPUT0": np.ones((1, 16), np.int32),
                                "INPUT1": np.ones((1, 16), np.int32)}, request_id="zmq")
    files = _new_files(trace_file, before, 3)
    traces = {t["head"]["request_id"]: [name for name, _ in t["stamps"]]
              for entries in files for t in _traces(entries).values()}
    assert traces["gen"] == ["HTTP_RECV_START", "HTTP_RECV_END", *REQUEST_ORDER,
                             "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
    assert traces["sse"][:4] == ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START",
                                 "QUEUE_START"]
    assert {"REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END"} <= set(traces["sse"])
    # Triton stamps each generate_stream response complete (two words, two responses).
    assert traces["sse"].count("INFER_RESPONSE_COMPLETE") == 2
    assert traces["zmq"] == REQUEST_ORDER  # the native protocol has no stamps of its own


def test_an_ensemble_traces_each_step_as_a_child(
        http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    before = _indexed(trace_file)
    _http_infer(http, "chain", request_id="ens")
    [entries] = _new_files(trace_file, before, 1)  # one trace: the ensemble with its steps
    traces = _traces(entries)
    [parent] = [t for t in traces.values() if t["head"]["model_name"] == "chain"]
    children = [t for t in traces.values() if t["head"]["model_name"] == "simple"]
    assert len(children) == 2
    assert all(t["head"]["parent_id"] == parent["head"]["id"] for t in children)
    assert all(t["head"]["request_id"] == "ens" for t in traces.values())
    assert [n for n, _ in parent["stamps"]][0:2] == ["HTTP_RECV_START", "HTTP_RECV_END"]
    assert "REQUEST_START" in dict(parent["stamps"])
    first, second = sorted(children, key=lambda t: dict(t["stamps"])["REQUEST_START"])
    for child in children:
        assert [name for name, _ in child["stamps"]] == REQUEST_ORDER
    ensemble = dict(parent["stamps"])
    assert ensemble["REQUEST_START"] <= dict(first["stamps"])["REQUEST_START"]
    assert dict(first["stamps"])["REQUEST_END"] <= dict(second["stamps"])["REQUEST_START"]
    assert dict(second["stamps"])["REQUEST_END"] <= ensemble["REQUEST_END"]


def test_rate_samples_one_request_in_n_and_count_runs_out(
        http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    http.update_trace_settings("simple", settings={"trace_rate": "3", "trace_count": "2"})
    before = _indexed(trace_file)
    for number in range(1, 10):
        _http_infer(http, request_id=f"r{number}")
    files = _new_files(trace_file, before, 2)
    ids = [entry["request_id"] for entries in files for entry in entries
           if "request_id" in entry]
    assert ids == ["r3", "r6"]  # every third request, two traces, then none
    settings = http.get_trace_settings("simple")
    assert settings["trace_count"] == "0"
    assert settings["trace_rate"] == "3"
    # No third trace: one of another model, sent after r7-r9 answered, is the next file (one
    # writer thread writes them in order, so a trace of r9 would have come before it).
    _http_infer(http, "chain", request_id="after")
    *_, last = _new_files(trace_file, before, 3)
    assert len(_indexed(trace_file) - before) == 3
    assert {e.get("request_id") for e in last} - {None} == {"after"}
    http.update_trace_settings("simple", settings={"trace_rate": None, "trace_count": None})
    assert http.get_trace_settings("simple")["trace_count"] == "-1"


def test_log_frequency_writes_every_n_traces_to_the_next_indexed_file(
        http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    http.update_trace_settings("simple", settings={"log_frequency": "2"})
    before = _indexed(trace_file)
    for number in range(4):
        _http_infer(http, request_id=f"f{number}")
    files = _new_files(trace_file, before, 2)
    assert [[e["request_id"] for e in entries if "request_id" in e] for entries in files] == [
        ["f0", "f1"], ["f2", "f3"]]
    indexes = sorted(int(p.suffix[1:]) for p in _indexed(trace_file) - before)
    assert indexes == [indexes[0], indexes[0] + 1]
    http.update_trace_settings("simple", settings={"log_frequency": None})


def test_log_frequency_zero_appends_to_the_file_itself(
        http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    http.update_trace_settings("simple", settings={"log_frequency": "0"})
    before = _indexed(trace_file)
    _http_infer(http, request_id="kept1")
    _http_infer(http, request_id="kept2")
    deadline = time.monotonic() + FILE_WAIT_SECS
    while True:
        text = trace_file.read_text() if trace_file.exists() else ""
        ids = [e.get("request_id") for e in json.loads(text)] if text else []
        if "kept2" in ids:
            break
        assert time.monotonic() < deadline, f"trace.json holds {text!r}"
        time.sleep(0.05)
    assert [i for i in ids if i] == ["kept1", "kept2"]
    assert _indexed(trace_file) == before
    http.update_trace_settings("simple", settings={"log_frequency": None})


def test_log_frequency_zero_with_a_count_writes_an_indexed_file_when_it_runs_out(
        http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    http.update_trace_settings("simple", settings={"log_frequency": "0", "trace_count": "2"})
    before = _indexed(trace_file)
    for number in range(3):
        _http_infer(http, request_id=f"c{number}")
    [entries] = _new_files(trace_file, before, 1)
    assert [e["request_id"] for e in entries if "request_id" in e] == ["c0", "c1"]
    http.update_trace_settings("simple", settings={"log_frequency": None, "trace_count": None})


def test_level_tensors_adds_the_tensors_and_off_stops_a_model(
        http: httpclient.InferenceServerClient, trace_file: Path) -> None:
    http.update_trace_settings("simple", settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    before = _indexed(trace_file)
    _http_infer(http, request_id="t")
    [entries] = _new_files(trace_file, before, 1)
    [trace] = _traces(entries).values()
    activities = {(t["activity"], t["tensor"]["name"]): t["tensor"] for t in trace["tensors"]}
    assert set(activities) == {("TENSOR_QUEUE_INPUT", "INPUT0"), ("TENSOR_QUEUE_INPUT", "INPUT1"),
                               ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
                               ("TENSOR_BACKEND_OUTPUT", "OUTPUT1")}
    sum_tensor = activities[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]
    assert sum_tensor == {"name": "OUTPUT0", "shape": "1,16", "dtype": "INT32",
                          "data": ",".join(str(2 * i) for i in range(16))}
    http.update_trace_settings("simple", settings={"trace_level": ["OFF"]})
    before = _indexed(trace_file)
    _http_infer(http, request_id="off")
    _http_infer(http, "chain", request_id="still-traced")
    # "still-traced" was sent after "off" answered and one writer thread writes the files in
    # order, so a file of "off" would be the first.
    files = _new_files(trace_file, before, 1)
    assert len(_indexed(trace_file) - before) == 1
    assert {e.get("request_id") for e in files[0]} - {None} == {"still-traced"}
    http.update_trace_settings("simple", settings={"trace_level": None})
    assert http.get_trace_settings("simple")["trace_level"] == ["TIMESTAMPS"]


# ---------------------------------------------------------------------------- start-up


def test_the_trace_group_restricts_the_settings_and_nothing_else(inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository("simple"), "--http-restricted-api=trace:tk=1",
                          "--grpc-restricted-protocol=trace:tk=1")
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    for call in (lambda: http.get_trace_settings(), lambda: http.get_trace_settings("simple"),
                 lambda: http.update_trace_settings(settings={"trace_rate": "3"})):
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert (refused.value.status(), refused.value.message()) == (
            "403", "This API is restricted, expecting header 'tk'")
    with pytest.raises(InferenceServerException) as refused:
        grpc.get_trace_settings()
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    assert http.get_trace_settings(headers={"tk": "1"}) == DEFAULTS
    assert grpc.get_trace_settings(headers={"triton-grpc-protocol-tk": "1"}, as_json=True)
    _http_infer(http)  # inference is another group


@pytest.mark.parametrize("flag, message", [
    ("level=loud", "invalid value for trace level option: loud"),
    ("triton,files=x", "unknown triton trace setting 'files'"),
    ("mode", "the format is"),
])
def test_a_bad_trace_config_fails_the_start(inferd: InferdHarness, flag: str,
                                            message: str) -> None:
    server = inferd.launch(inferd.repository("simple"), "--trace-config", flag)
    assert server.wait_exit(30) == 1
    assert message in server.log()
