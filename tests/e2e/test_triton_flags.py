"""tritonserver's flags that deployment manifests pass, against real ``inferd serve``
processes: each implemented (``--strict-model-config``, ``--model-config-name``,
``--backend-config=...,default-max-batch-size=N``, ``--log-info/-warning/-error``,
``--log-format``, ``--log-file``) or accepted with a log line saying it changes nothing
(``--rate-limit``, an unread backend setting), ``--allow-sagemaker`` and
``--allow-vertex-ai`` refused with the reason, an unknown flag still an error."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"
WAIT_SECS = 30.0


def configless_simple(root: Path) -> None:
    """The ONNX ``simple`` model without its config (auto-complete fills it)."""
    (root / "bare" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "simple" / "1" / "model.onnx", root / "bare" / "1" / "model.onnx")


def test_backend_config_sets_the_auto_completed_batch_size(inferd: InferdHarness) -> None:
    root = inferd.repository()
    configless_simple(root)
    server = inferd.start(root, "--backend-config=onnxruntime,default-max-batch-size=16",
                          "--backend-config=tensorflow,allow-soft-placement=true")
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("bare")
    assert config["max_batch_size"] == 16
    assert ("--backend-config=tensorflow,allow-soft-placement=true: inferd's tensorflow "
            "backend do not read 'allow-soft-placement'") in server.log()


def test_strict_model_config_disables_auto_complete(inferd: InferdHarness) -> None:
    root = inferd.repository("simple")
    configless_simple(root)
    server = inferd.start(root, "--strict-model-config=true", "--exit-on-error=false")
    index = {entry["name"]: entry for entry in
             httpclient.InferenceServerClient(server.http_url).get_model_repository_index()}
    assert index["simple"]["state"] == "READY"
    assert index["bare"]["state"] == "UNAVAILABLE"
    assert "auto-complete is disabled" in index["bare"]["reason"]


def test_model_config_name_picks_a_models_custom_config(inferd: InferdHarness) -> None:
    root = inferd.repository("simple", "identity_fp32")
    custom = (root / "simple" / "config.pbtxt").read_text(encoding="utf-8").replace(
        "max_batch_size: 8", "max_batch_size: 2")
    (root / "simple" / "configs").mkdir()
    (root / "simple" / "configs" / "small.pbtxt").write_text(custom, encoding="utf-8")
    server = inferd.start(root, "--model-config-name=small")
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_model_config("simple")["max_batch_size"] == 2
    assert client.get_model_config("identity_fp32")["max_batch_size"] == 0  # its config.pbtxt


def test_logging_flags_shape_every_processs_log(inferd: InferdHarness, tmp_path: Path) -> None:
    log_file = tmp_path / "inferd.log"
    server = inferd.launch(inferd.repository("simple"), "--log-info=false",
                           "--log-format=ISO8601", f"--log-file={log_file}",
                           "--rate-limit=execution_count",
                           "--cpu-executor=process")  # simple in an executor process
    client = httpclient.InferenceServerClient(server.http_url)
    deadline = time.monotonic() + WAIT_SECS
    while not ready(client):
        assert server.process.poll() is None, server.log()
        assert time.monotonic() < deadline, "the server did not become ready"
        time.sleep(0.1)
    lines = log_file.read_text(encoding="utf-8").splitlines()
    records = [line for line in lines
               if re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", line)]
    assert records, lines
    assert all(" I [" not in line for line in records), records  # --log-info=false
    text = "\n".join(records)
    assert "--rate-limit=execution_count: inferd has no rate limiter" in text
    # The executor processes log by the same flags.
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                for pid in children.read_text().split()]
    executors = [command for command in commands if b"--hub" in command]
    assert executors and all(
        command[command.index(b"--log-info") + 1] == b"false"
        and command[command.index(b"--log-format") + 1] == b"ISO8601" for command in executors)
    assert "rate limiter" not in server.log()  # nothing went to standard error


def test_a_config_field_inferd_does_not_implement_fails_the_load_naming_it(
        inferd: InferdHarness) -> None:
    root = inferd.repository("simple")
    shutil.copytree(root / "simple", root / "warmed")
    config = (root / "warmed" / "config.pbtxt").read_text(encoding="utf-8").replace(
        'name: "simple"', 'name: "warmed"')
    config += 'model_operations { op_library_filename: [ "libcustom.so" ] }\n'
    (root / "warmed" / "config.pbtxt").write_text(config, encoding="utf-8")
    (root / "tagged").mkdir()
    shutil.copytree(root / "simple" / "1", root / "tagged" / "1")
    (root / "tagged" / "config.pbtxt").write_text(
        (root / "simple" / "config.pbtxt").read_text(encoding="utf-8").replace(
            'name: "simple"', 'name: "tagged"') + 'metric_tags { key: "team" value: "x" }\n',
        encoding="utf-8")
    server = inferd.start(root, "--exit-on-error=false")
    index = {entry["name"]: entry for entry in
             httpclient.InferenceServerClient(server.http_url).get_model_repository_index()}
    assert index["warmed"]["state"] == "UNAVAILABLE"
    assert index["warmed"]["reason"] == ("model 'warmed': model_operations is not supported: "
                                         "custom operation libraries are not loaded by inferd")
    assert index["tagged"]["state"] == index["simple"]["state"] == "READY"
    assert ("model 'tagged': metric_tags is ignored: inferd's metrics carry no custom tags"
            in server.log())


def ready(client: Any) -> bool:
    try:
        return bool(client.is_server_ready())
    except Exception:  # noqa: BLE001 - not listening yet
        return False


def test_endpoints_inferd_lacks_are_refused_and_unknown_flags_fail(
        inferd: InferdHarness) -> None:
    for flag, endpoint in (("--allow-sagemaker=true", "sagemaker"),
                           ("--allow-vertex-ai=true", "vertex ai")):
        server = inferd.launch(inferd.repository("simple"), flag)
        assert server.wait_exit(WAIT_SECS) == 1, server.log()
        assert f"inferd has no {endpoint} endpoint" in server.log()
    server = inferd.launch(inferd.repository("simple"), "--no-such-flag")
    assert server.wait_exit(WAIT_SECS) == 2
    assert "unrecognized arguments: --no-such-flag" in server.log()


def test_malformed_flag_values_fail_the_start_saying_what_is_expected(
        inferd: InferdHarness) -> None:
    for flag, message in (
            ("--backend-config=no-equals-sign",
             "--backend-config=no-equals-sign: expected [backend,]setting=value"),
            ("--model-config-name=../elsewhere",
             "--model-config-name=../elsewhere: a name of letters, digits, '-', '_' ")):
        server = inferd.launch(inferd.repository("simple"), flag)
        assert server.wait_exit(WAIT_SECS) == 1, server.log()
        assert message in server.log(), server.log()
