"""Logs an operator can use, against a real server writing ``--log-file`` in ``--log-format
json``, read back: every line is one JSON object with the fields; a model state change line
has its duration; a request error is one line with the request id and model (HTTP, gRPC and
zmq), at INFO for a client's mistake and ERROR for a server fault; an executor's line names
its process and model; no line holds a tensor value; a burst of bad requests gives a bounded
number of lines that say how many were left out; ``log_format`` switches to json and back at
run time through tritonclient.

The ``speaker`` model is a python model (an executor process of its own); it logs ``I
<token>`` per request, and fails a request whose token starts with ``fail``."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.client import Client
from inferd.protocols.errors import InferdError
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

WAIT_SECS = 30.0
# A value no log line has any reason to hold, unless it leaked a tensor's data.
DISTINCTIVE = 918273645
FIELDS = {"time", "level", "process", "pid", "logger", "message"}
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")

SPEAKER_CONFIG = """name: "speaker"
backend: "python"
input [ { name: "TOKEN" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "ECHO" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""
SPEAKER_MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            token = pb_utils.get_input_tensor_by_name(request, "TOKEN").as_numpy()
            text = token[0].decode()
            if text.startswith("fail"):
                raise RuntimeError("the speaker broke down")
            pb_utils.Logger.log_info("I " + text)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", token)]))
        return responses
"""
_ids = count(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}-{time.monotonic_ns()}"


def speaker_repository(harness: InferdHarness) -> Path:
    root = harness.repository("simple")
    folder = root / "speaker"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(SPEAKER_CONFIG, encoding="utf-8")
    (folder / "1" / "model.py").write_text(SPEAKER_MODEL, encoding="utf-8")
    return root


class LogFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8") if self.path.exists() else ""

    def records(self) -> list[dict[str, Any]]:
        """Every line, parsed: a line that is not one JSON object fails the test."""
        records = []
        for line in self.text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                pytest.fail(f"a log line is not JSON: {line!r}")
            assert isinstance(record, dict), line
            records.append(record)
        return records

    def wait_for(self, matches: Callable[[dict[str, Any]], bool],
                 what: str) -> list[dict[str, Any]]:
        """The records that ``matches``, once there is one (bounded)."""
        deadline = time.monotonic() + WAIT_SECS
        while True:
            found = [record for record in self.records() if matches(record)]
            if found:
                return found
            assert time.monotonic() < deadline, f"no log line {what}:\n{self.text()}"
            time.sleep(0.05)


def start_logging_to(harness: InferdHarness, log: LogFile, *flags: str,
                     repository: Path | None = None) -> ServerHandle:
    """A server of ``repository`` (simple and speaker) writing its log to ``log``, once it
    serves (the harness's own wait reads standard error, which a log file leaves empty)."""
    repository = repository or speaker_repository(harness)
    server = harness.launch(repository, f"--log-file={log.path}", *flags)
    deadline = time.monotonic() + WAIT_SECS * 2
    with Client(server.url, timeout=1.0) as client:
        while "inferd is serving (" not in log.text():
            assert server.process.poll() is None, server.log() + log.text()
            assert time.monotonic() < deadline, server.log() + log.text()
            time.sleep(0.1)
        assert client.is_live()
    return server


@pytest.fixture(scope="module")
def log_file(module_inferd: InferdHarness) -> LogFile:
    return LogFile(module_inferd.folder / "json.log")


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, log_file: LogFile) -> ServerHandle:
    return start_logging_to(module_inferd, log_file, "--log-format=json")


@pytest.fixture
def http(server: ServerHandle) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


def simple_inputs(module: Any, value: int, width: int = 16) -> list[Any]:
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, width], "INT32")
        tensor.set_data_from_numpy(np.full((1, width), value, dtype=np.int32))
        tensors.append(tensor)
    return tensors


def speaker_input(module: Any, token: str) -> list[Any]:
    tensor = module.InferInput("TOKEN", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([token.encode()], dtype=object))
    return [tensor]


def failing_http_infer(http: Any, request_id: str, value: int = 1, width: int = 3) -> None:
    """An inference the server refuses: the inputs are ``width`` wide, the model takes 16.
    (The same refusal again within a second is left out of the log: vary ``width``.)"""
    with pytest.raises(InferenceServerException) as refused:
        http.infer("simple", simple_inputs(httpclient, value, width=width),
                   request_id=request_id)
    assert refused.value.status() == "400"


def with_id(request_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda record: record.get("request_id") == request_id


def test_every_line_is_a_json_object_with_the_fields(server: ServerHandle,
                                                     log_file: LogFile) -> None:
    serving = log_file.wait_for(lambda r: r["message"].startswith("inferd is serving ("),
                                "saying the server serves")
    records = log_file.records()
    assert records
    for record in records:
        assert FIELDS <= record.keys(), record
        assert TIME.fullmatch(record["time"]), record
        assert record["level"] in ("INFO", "WARNING", "ERROR", "VERBOSE"), record
    assert serving[0]["process"] == "main"
    assert serving[0]["pid"] == server.process.pid
    assert serving[0]["logger"] == "inferd"
    # Nothing is written to standard error meanwhile: every line went to the file.
    assert "inferd is serving" not in server.log()


def test_a_state_change_line_has_its_duration(server: ServerHandle, log_file: LogFile) -> None:
    [ready] = log_file.wait_for(
        lambda r: r.get("model") == "simple" and r.get("state") == "READY", "READY for simple")
    assert ready["version"] == "1"
    assert ready["level"] == "INFO"
    assert ready["process"] == "main"
    assert 0 < ready["duration_s"] < 300
    assert re.fullmatch(r"model 'simple' version 1 READY after \d+\.\d\d s", ready["message"])
    [loading] = [r for r in log_file.records()
                 if r.get("model") == "simple" and r.get("state") == "LOADING"]
    assert loading["message"] == "model 'simple' version 1 LOADING: start-up"
    assert loading["time"] <= ready["time"]


def test_a_request_error_is_one_line_with_its_id_and_model(
        server: ServerHandle, http: Any, log_file: LogFile) -> None:
    request_id = unique("bad-http")
    failing_http_infer(http, request_id)
    [line] = log_file.wait_for(with_id(request_id), f"with request id {request_id}")
    assert line["model"] == "simple"
    assert line["level"] == "INFO"  # a client's mistake
    assert (line["protocol"], line["endpoint"], line["status"]) == ("HTTP", "POST infer", "400")
    assert "unexpected shape for input 'INPUT0' for model 'simple'" in line["message"]
    assert request_id in line["message"]  # the other formats show it too
    # The same over gRPC and zmq, each once; and still once for the HTTP one.
    grpc_id = unique("bad-grpc")
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException):
        grpc.infer("simple", simple_inputs(grpcclient, 1, width=3), request_id=grpc_id)
    [grpc_line] = log_file.wait_for(with_id(grpc_id), f"with request id {grpc_id}")
    assert (grpc_line["protocol"], grpc_line["endpoint"], grpc_line["status"]) == (
        "gRPC", "ModelInfer", "INVALID_ARGUMENT")
    assert grpc_line["model"] == "simple"
    zmq_id = unique("bad-zmq")
    with Client(server.url, timeout=WAIT_SECS) as client, pytest.raises(InferdError):
        client.infer("simple", {"INPUT0": np.ones((1, 3), np.int32),
                                "INPUT1": np.ones((1, 3), np.int32)}, request_id=zmq_id)
    [zmq_line] = log_file.wait_for(with_id(zmq_id), f"with request id {zmq_id}")
    assert (zmq_line["protocol"], zmq_line["status"]) == ("zmq", "INVALID_ARGUMENT")
    assert len([r for r in log_file.records() if r.get("request_id") == request_id]) == 1
    assert len([r for r in log_file.records() if r.get("request_id") == grpc_id]) == 1


def test_a_server_fault_is_an_error_line(server: ServerHandle, http: Any,
                                         log_file: LogFile) -> None:
    request_id = unique("fault")
    with pytest.raises(InferenceServerException) as failed:
        http.infer("speaker", speaker_input(httpclient, unique("fail")), request_id=request_id)
    assert failed.value.status().startswith("5")
    lines = log_file.wait_for(with_id(request_id), f"with request id {request_id}")
    [line] = [r for r in lines if r["logger"] == "inferd.requests"]
    assert line["level"] == "ERROR"
    assert line["model"] == "speaker"
    assert "the speaker broke down" in line["message"]


def test_an_executors_line_names_its_process_and_model(server: ServerHandle, http: Any,
                                                       log_file: LogFile) -> None:
    token = unique("hello")
    http.infer("speaker", speaker_input(httpclient, token))
    [line] = log_file.wait_for(lambda r: r["message"] == f"I {token}", f"I {token}")
    assert line["process"].startswith("executor/model/speaker"), line  # its own process
    assert line["pid"] != server.process.pid
    assert line["model"] == "speaker"
    assert line["version"] == "1"
    assert line["level"] == "INFO"
    # The executor's own line about loading it names the process and the model too.
    [loaded] = [r for r in log_file.records() if r["message"].startswith("loaded speaker ")]
    assert loaded["process"] == line["process"]
    assert (loaded["model"], loaded["version"]) == ("speaker", "1")


def test_no_line_holds_tensor_data(server: ServerHandle, http: Any, log_file: LogFile) -> None:
    http.update_log_settings({"log_verbose_level": 1})  # verbose lines too
    try:
        result = http.infer("simple", simple_inputs(httpclient, DISTINCTIVE))
        assert (result.as_numpy("OUTPUT0") == 2 * DISTINCTIVE).all()
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        grpc.infer("simple", simple_inputs(grpcclient, DISTINCTIVE))
        request_id = unique("bad-value")
        failing_http_infer(http, request_id, DISTINCTIVE, width=5)
        log_file.wait_for(with_id(request_id), f"with request id {request_id}")
    finally:
        http.update_log_settings({"log_verbose_level": 0})
    text = log_file.text()
    for value in (DISTINCTIVE, 2 * DISTINCTIVE):
        assert str(value) not in text


def test_a_burst_of_bad_requests_gives_few_lines(server: ServerHandle, http: Any,
                                                 log_file: LogFile) -> None:
    marker = unique("burst")  # an unknown output's name: the same message 200 times
    inputs = simple_inputs(httpclient, 1)

    def burst_lines() -> list[dict[str, Any]]:
        return [r for r in log_file.records() if marker in r["message"]]

    def bad_request() -> None:
        with pytest.raises(InferenceServerException, match="unexpected inference output"):
            http.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput(marker)],
                       request_id=unique("b"))

    started = time.monotonic()
    for _ in range(200):
        bad_request()
    elapsed = time.monotonic() - started
    log_file.wait_for(lambda r: marker in r["message"], "for the burst")
    # One line a second at most (and the first at once).
    assert 1 <= len(burst_lines()) <= elapsed + 2, burst_lines()
    # A later one says how many were left out.
    deadline = time.monotonic() + WAIT_SECS
    while not any("suppressed" in r for r in burst_lines()):
        assert time.monotonic() < deadline, burst_lines()
        bad_request()
        time.sleep(0.2)
    lines = burst_lines()
    assert len(lines) + sum(r.get("suppressed", 0) for r in lines) >= 200
    assert any("more like it" in r["message"] for r in lines)


def test_log_format_switches_to_json_and_back(inferd: InferdHarness, tmp_path: Path) -> None:
    log = LogFile(tmp_path / "switch.log")
    server = start_logging_to(inferd, log)
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert http.get_log_settings()["log_format"] == "default"
    reply = grpc.update_log_settings({"log_format": "json"})
    assert reply.settings["log_format"].string_param == "json"
    assert http.get_log_settings()["log_format"] == "json"
    token = unique("json")
    http.infer("speaker", speaker_input(httpclient, token))
    deadline = time.monotonic() + WAIT_SECS
    while f'"I {token}"' not in log.text():
        assert time.monotonic() < deadline, log.text()
        time.sleep(0.05)
    [line] = [json.loads(text) for text in log.text().splitlines() if f'"I {token}"' in text]
    assert line["process"].startswith("executor/model/speaker"), line
    request_id = unique("switched")
    failing_http_infer(http, request_id, width=7)
    deadline = time.monotonic() + WAIT_SECS
    while request_id not in log.text():
        assert time.monotonic() < deadline, log.text()
        time.sleep(0.05)
    [error_line] = [json.loads(text) for text in log.text().splitlines() if request_id in text]
    assert error_line["model"] == "simple"
    # Back to Triton's layout, for the main process and the executor alike.
    assert http.update_log_settings({"log_format": "default"})["log_format"] == "default"
    token = unique("text")
    http.infer("speaker", speaker_input(httpclient, token))
    deadline = time.monotonic() + WAIT_SECS
    while not log.text().rstrip().endswith(f"I {token}"):
        assert time.monotonic() < deadline, log.text()
        time.sleep(0.05)
    last = log.text().splitlines()[-1]
    assert re.match(r"\d\d:\d\d:\d\d I \[executor/model/speaker[^\]]*\] inferd.python_model: ",
                    last), last
    # Anything else is refused in Triton's words, and changes nothing.
    with pytest.raises(InferenceServerException, match="invalid argument for --log_format, "
                       "got: yaml"):
        http.update_log_settings({"log_format": "yaml"})
    assert http.get_log_settings()["log_format"] == "default"


def unavailable(model: str) -> Callable[[dict[str, Any]], bool]:
    return lambda record: record.get("model") == model and record.get("state") == "UNAVAILABLE"


def test_load_failures_and_unloads_are_state_lines(inferd: InferdHarness, tmp_path: Path) -> None:
    log = LogFile(tmp_path / "states.log")
    repository = speaker_repository(inferd)
    (repository / "empty" / "1").mkdir(parents=True)  # a version folder without its model file
    (repository / "empty" / "config.pbtxt").write_text(
        'name: "empty"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n', encoding="utf-8")
    (repository / "broken").mkdir()
    (repository / "broken" / "config.pbtxt").write_text("max_bach_size: 1\n", encoding="utf-8")
    server = start_logging_to(inferd, log, "--log-format=json", "--model-control-mode=explicit",
                              "--load-model=simple", repository=repository)
    http = httpclient.InferenceServerClient(server.http_url)
    for name in ("empty", "broken"):
        refusal = f"(failed to load|load failed for model) '{name}'"
        with pytest.raises(InferenceServerException, match=refusal):
            http.load_model(name)
    [empty] = log.wait_for(unavailable("empty"), "saying empty is UNAVAILABLE")
    assert (empty["level"], empty["version"]) == ("ERROR", "1")
    assert empty["duration_s"] > 0 and empty["reason"]  # the load's time, from LOADING on
    assert empty["message"].startswith(
        f"model 'empty' version 1 UNAVAILABLE after {empty['duration_s']:.2f} s: ")
    [broken] = log.wait_for(unavailable("broken"), "saying broken is UNAVAILABLE")
    assert broken["level"] == "ERROR"
    assert "max_bach_size" in broken["reason"]
    assert "version" not in broken  # it failed before any version was known
    # The load requests' own error lines are a client's mistakes, once each.
    requests = [r for r in log.records() if r["logger"] == "inferd.requests"]
    assert sorted(r["model"] for r in requests) == ["broken", "empty"]
    assert {r["level"] for r in requests} == {"INFO"}
    http.unload_model("simple")
    [unloaded] = log.wait_for(
        lambda r: r.get("model") == "simple" and r.get("state") == "unloaded",
        "saying simple was unloaded")
    assert unloaded["level"] == "INFO"
    assert unloaded["message"].startswith("model 'simple' version 1 unloaded after ")
    [unloading] = [r for r in log.records()
                   if r.get("model") == "simple" and r.get("state") == "UNLOADING"]
    assert unloading["message"] == "model 'simple' version 1 UNLOADING: unload requested"
