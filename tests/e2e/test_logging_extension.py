"""Triton's logging extension against a real server, through tritonclient over HTTP and gRPC:
``GET/POST v2/logging`` and ``LogSettings`` report Triton's defaults; changing the verbosity,
a severity, the format or (where allowed) the log file at run time changes what the executor
processes write as well as the main process; verbose logging writes Triton's line for each
HTTP and gRPC request; a bad update is refused in Triton's words (a 400 where Triton answers
5xx) and changes nothing, an unknown setting is ignored; the ``logging`` API group can be
restricted; server metadata lists it.

The ``speaker`` model is a python model, so it runs in an executor process; each request logs
``V <token>`` (verbose), ``I <token>`` (info) and ``W <token>`` (warning), in that order, so
once the later line is in the log, an earlier one that is not was not written."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

WAIT_SECS = 30.0
DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}

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
            pb_utils.Logger.log_verbose("V " + text)
            pb_utils.Logger.log_info("I " + text)
            pb_utils.Logger.log_warn("W " + text)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", token)]))
        return responses
"""
_tokens = count(1)


def speaker_repository(harness: InferdHarness) -> Path:
    root = harness.repository()
    folder = root / "speaker"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(SPEAKER_CONFIG, encoding="utf-8")
    (folder / "1" / "model.py").write_text(SPEAKER_MODEL, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    return module_inferd.start(speaker_repository(module_inferd))


@pytest.fixture
def http(server: ServerHandle) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.update_log_settings({k: v for k, v in DEFAULTS.items() if k != "log_file"})


@pytest.fixture
def grpc(server: ServerHandle) -> Any:
    return grpcclient.InferenceServerClient(server.grpc_url)


def speak(http: Any) -> str:
    """Run the speaker once; the token its log lines carry."""
    token = f"token-{next(_tokens)}-{time.monotonic_ns()}"
    tensor = httpclient.InferInput("TOKEN", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([token.encode()], dtype=object))
    assert http.infer("speaker", [tensor]).as_numpy("ECHO")[0] == token.encode()
    return token


def wait_for(read: Any, text: str) -> str:
    """The log (``read()``) once it holds ``text``, bounded."""
    deadline = time.monotonic() + WAIT_SECS
    while text not in (log := read()):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the log:\n{log}"
        time.sleep(0.05)
    return log


def executor_line(log: str, text: str) -> str:
    lines = [line for line in log.splitlines() if line.endswith(text)]
    assert lines, text
    assert "[executor/" in lines[0], lines[0]  # written by the executor process
    return lines[0]


def grpc_settings(response: Any) -> dict[str, Any]:
    return {name: getattr(value, value.WhichOneof("parameter_choice"))
            for name, value in response.settings.items()}


def test_defaults_are_tritons(http: Any, grpc: Any) -> None:
    assert http.get_log_settings() == DEFAULTS
    assert grpc_settings(grpc.get_log_settings()) == DEFAULTS


def test_server_metadata_lists_logging(http: Any, grpc: Any) -> None:
    assert "logging" in http.get_server_metadata()["extensions"]
    assert "logging" in grpc.get_server_metadata().extensions


def test_raising_verbosity_reaches_the_executor(server: ServerHandle, http: Any,
                                                grpc: Any) -> None:
    quiet = speak(http)
    log = wait_for(server.log, f"W {quiet}")
    assert f"V {quiet}" not in log  # verbosity 0: no verbose line
    assert http.update_log_settings({"log_verbose_level": 1})["log_verbose_level"] == 1
    loud = speak(http)
    executor_line(wait_for(server.log, f"V {loud}"), f"V {loud}")
    reply = grpc.update_log_settings({"log_verbose_level": 0})
    assert grpc_settings(reply)["log_verbose_level"] == 0
    quiet_again = speak(http)
    assert f"V {quiet_again}" not in wait_for(server.log, f"W {quiet_again}")


def test_severities_and_format_change_at_run_time(server: ServerHandle, http: Any,
                                                  grpc: Any) -> None:
    reply = grpc_settings(grpc.update_log_settings({"log_info": False,
                                                    "log_format": "ISO8601"}))
    assert reply == {**DEFAULTS, "log_info": False, "log_format": "ISO8601"}
    token = speak(http)
    log = wait_for(server.log, f"W {token}")
    assert f"I {token}" not in log
    line = executor_line(log, f"W {token}")
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z W \[executor/", line), line
    assert http.update_log_settings({"log_info": True, "log_format": "default"}) == DEFAULTS
    token = speak(http)
    line = executor_line(wait_for(server.log, f"I {token}"), f"I {token}")
    assert re.match(r"\d\d:\d\d:\d\d I \[executor/", line), line


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"log_verbose_level": 3, "log_format": "xml"}, "400",
     "invalid argument for --log_format, got: xml"),
    ({"log_verbose_level": 2, "log_info": "yes"}, "400", "expect boolean for 'log_info'"),
    ({"log_verbose_level": -1}, "400", "expect int32 for 'log_verbose_level'"),
    ({"log_verbose_level": True}, "400", "expect int32 for 'log_verbose_level'"),
    ({"log_format": 1}, "400", "expect string for 'log_format'"),
    ({"log_verbose_level": 2**31}, "400", "expect int32 for 'log_verbose_level'"),
    ({"log_info": False, "log_file": "/tmp/elsewhere.log"}, "501",
     "log file location can not be updated through network protocol"),
])
def test_bad_http_update_changes_nothing(http: Any, body: dict[str, Any], status: str,
                                         message: str) -> None:
    with pytest.raises(InferenceServerException) as refused:
        http.update_log_settings(body)
    assert (refused.value.status(), refused.value.message()) == (status, message)
    assert http.get_log_settings() == DEFAULTS


def test_an_unknown_setting_is_ignored_as_triton_ignores_it(http: Any, grpc: Any) -> None:
    assert http.update_log_settings({"log_verbose": 1, "log_warning": False}) == {
        **DEFAULTS, "log_warning": False}
    reply = grpc_settings(grpc.update_log_settings({"log_warnings": True, "log_warning": True}))
    assert reply == DEFAULTS
    assert http.update_log_settings({"log_verbose": 1}) == DEFAULTS


def test_verbose_logging_writes_tritons_line_for_each_request(
        server: ServerHandle, http: Any, grpc: Any) -> None:
    """At ``log_verbose_level`` 1 and up, as Triton: ``HTTP request: <evhtp method number>
    <path>`` per HTTP request, ``Process for <handler>, rpc_ok=1, <id> step START`` per gRPC
    call; at 0, neither."""
    infer_line = "HTTP request: 2 /v2/models/speaker/infer"
    before = server.log().count(infer_line)  # the module's server: earlier tests logged too
    quiet = speak(http)
    assert wait_for(server.log, f"W {quiet}").count(infer_line) == before
    http.update_log_settings({"log_verbose_level": 1})
    loud = speak(http)
    assert wait_for(server.log, f"W {loud}").count(infer_line) == before + 1
    assert grpc.is_server_live()
    tensor = grpcclient.InferInput("TOKEN", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"over-grpc"], dtype=object))
    grpc.infer("speaker", [tensor])
    log = wait_for(server.log, "Process for ModelInferHandler, rpc_ok=1, ")
    assert re.search(r"Process for ServerLive, rpc_ok=1, \d+ step START$", log, re.M), log
    assert re.search(r"Process for ModelInferHandler, rpc_ok=1, \d+ step START$", log, re.M)
    http.get_log_settings()
    wait_for(server.log, "HTTP request: 0 /v2/logging")
    grpc.update_log_settings({"log_verbose_level": 0})
    before = server.log().count(infer_line)
    again = speak(http)
    assert wait_for(server.log, f"W {again}").count(infer_line) == before


def test_malformed_http_bodies_are_refused(server: ServerHandle, http: Any) -> None:
    for body in (b"not json", b"[1]", b'"text"'):
        request = urllib.request.Request(f"http://{server.http_url}/v2/logging", data=body,
                                         method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=WAIT_SECS)
        assert refused.value.code == 400
        assert b"error" in refused.value.read()
    # An empty body and nulls update nothing, as in Triton.
    empty = urllib.request.Request(f"http://{server.http_url}/v2/logging", data=b"",
                                   method="POST")
    with urllib.request.urlopen(empty, timeout=WAIT_SECS) as answer:
        assert answer.status == 200
    assert http.update_log_settings({"log_info": None}) == DEFAULTS
    wrong_method = urllib.request.Request(f"http://{server.http_url}/v2/logging", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(wrong_method, timeout=WAIT_SECS)
    assert refused.value.code == 405
    assert http.get_log_settings() == DEFAULTS


def test_bad_grpc_update_changes_nothing(grpc: Any) -> None:
    for settings, code, message in (
        ({"log_verbose_level": 3, "log_format": "xml"}, "StatusCode.INVALID_ARGUMENT",
         "invalid argument for log_format, got: xml"),
        ({"log_file": "/tmp/elsewhere.log"}, "StatusCode.UNIMPLEMENTED",
         "log file location can not be updated through network protocol"),
    ):
        with pytest.raises(InferenceServerException) as refused:
            grpc.update_log_settings(settings)
        assert (refused.value.status(), refused.value.message()) == (code, message)
    # Wrong types, which tritonclient cannot send: straight through its stub.
    request = service_pb2.LogSettingsRequest()
    request.settings["log_verbose_level"].uint32_param = 2
    request.settings["log_error"].string_param = "no"
    with pytest.raises(Exception, match="expect boolean for 'log_error'") as refused:
        grpc._client_stub.LogSettings(request)
    assert "INVALID_ARGUMENT" in str(refused.value)
    assert grpc_settings(grpc.get_log_settings()) == DEFAULTS


def test_log_file_changes_when_allowed(inferd: InferdHarness, tmp_path: Path) -> None:
    server = inferd.start(speaker_repository(inferd), "--allow-log-file-updates=true")
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    moved = tmp_path / "moved.log"
    with pytest.raises(InferenceServerException) as refused:
        http.update_log_settings({"log_verbose_level": 1,
                                  "log_file": str(tmp_path / "no" / "such" / "x.log")})
    assert refused.value.status() == "400"
    assert refused.value.message().startswith(f"cannot write the log file '{tmp_path}/no/such")
    assert http.get_log_settings() == DEFAULTS
    assert http.update_log_settings({"log_file": str(moved)})["log_file"] == str(moved)
    token = speak(http)
    log = wait_for(lambda: moved.read_text(encoding="utf-8"), f"I {token}")
    executor_line(log, f"I {token}")
    assert "[main]" in log  # the main process writes there too
    assert f"I {token}" not in server.log()
    reply = grpc_settings(grpc.update_log_settings({"log_file": ""}))
    assert reply == DEFAULTS
    back = speak(http)
    executor_line(wait_for(server.log, f"I {back}"), f"I {back}")
    assert f"I {back}" not in moved.read_text(encoding="utf-8")


def test_logging_group_can_be_restricted(inferd: InferdHarness) -> None:
    server = inferd.start(inferd.repository(), "--http-restricted-api=logging:admin=s3cret",
                          "--grpc-restricted-protocol=logging:admin=s3cret")
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        http.get_log_settings()
    assert (refused.value.status(), refused.value.message()) == (
        "403", "This API is restricted, expecting header 'admin'")
    assert http.get_log_settings(headers={"admin": "s3cret"}) == DEFAULTS
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        grpc.update_log_settings({"log_verbose_level": 1})
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    metadata = {"triton-grpc-protocol-admin": "s3cret"}
    assert grpc_settings(grpc.get_log_settings(headers=metadata)) == DEFAULTS
    assert http.is_server_live()  # other groups are not restricted


def test_a_restarted_executor_keeps_the_current_settings(inferd: InferdHarness) -> None:
    server = inferd.start(speaker_repository(inferd))
    http = httpclient.InferenceServerClient(server.http_url)
    http.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    # The python model's instance has an executor process of its own.
    speakers = [int(pid) for pid in children.read_text().split()
                if b"executor/model/speaker" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(speakers) == 1
    os.kill(speakers[0], signal.SIGKILL)
    deadline = time.monotonic() + WAIT_SECS
    while not wait_for(server.log, "; restarting it") or not _ready(http, "speaker"):
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.1)
    token = speak(http)
    line = executor_line(wait_for(server.log, f"V {token}"), f"V {token}")
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z D \[executor/", line), line


def _ready(http: Any, model: str) -> bool:
    try:
        return bool(http.is_model_ready(model))
    except InferenceServerException:
        return False
