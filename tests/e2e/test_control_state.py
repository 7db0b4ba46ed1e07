"""``--model-control-state`` end to end (an inferd extension): EXPLICIT replicas that agree on
what is loaded. Real servers over real sockets share one record, on a local path or on a real
S3-compatible server (moto): a replica started on the record serves what another loaded, with
the same config and file overrides; a running replica follows another's loads, reloads and
unloads; two replicas loading at once lose nothing; a bad record refuses the start."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.kernel.sdk.control_state import Entry, Record, digest, dump_record, parse_record
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY, InferdHarness, ServerHandle

WAIT_SECS = 45.0
POLL = "0.3"  # --model-control-state-poll-secs of the following replicas
MODELS = ("echo", "other", *(f"c{i}" for i in range(6)))
ONNX_FILE = (EXAMPLE_REPOSITORY / "identity_fp32" / "1" / "model.onnx").read_bytes()
UPLOADED = {
    "name": "uploaded", "backend": "onnxruntime", "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}


ENSEMBLE = """name: "pair"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "part" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
"""


def echo_config(name: str, tag: str) -> str:
    """A config override of a testing model: the repository's, with a ``tag`` parameter."""
    return json.dumps({
        "name": name, "backend": "inferd_testing", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "parameters": {"mode": {"string_value": "echo"}, "tag": {"string_value": tag}},
    })


@pytest.fixture(scope="module")
def repository(module_inferd: InferdHarness) -> Path:
    configs = {name: module_inferd.testing_config(name, "echo") for name in (*MODELS, "part")}
    configs["pair"] = ENSEMBLE
    root: Path = module_inferd.repository(configs=configs)
    return root


def start(harness: InferdHarness, repository: Path, record: str, *flags: str,
          env: dict[str, str] | None = None) -> ServerHandle:
    return harness.start(repository, "--model-control-mode", "explicit",
                         "--model-control-state", record, *flags, env=env)


def http(server: ServerHandle) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url, network_timeout=60)


def ready(server: ServerHandle) -> set[str]:
    index = http(server).get_model_repository_index()
    return {row["name"] for row in index if row.get("state") == "READY"}


def tag(server: ServerHandle, name: str) -> str:
    config = http(server).get_model_config(name)
    value: str = config.get("parameters", {}).get("tag", {}).get("string_value", "")
    return value


def wait_until(condition: Callable[[], bool], what: str, server: ServerHandle) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {WAIT_SECS} s; the server's log:\n{server.log()}")
        time.sleep(0.1)


def infer_uploaded(server: ServerHandle) -> None:
    values = np.arange(5, dtype=np.float32)
    data = httpclient.InferInput("INPUT0", [5], "FP32")
    data.set_data_from_numpy(values)
    result = http(server).infer("uploaded", [data])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def read(path: Path) -> Record:
    return parse_record(path.read_bytes(), str(path))


def test_a_replica_started_on_the_record_serves_what_another_loaded(
    module_inferd: InferdHarness, repository: Path, tmp_path: Path
) -> None:
    path = tmp_path / "state.json"
    a = start(module_inferd, repository, str(path), "--model-control-state-poll-secs", "0")
    http(a).load_model("echo", config=echo_config("echo", "from-a"))
    grpc = grpcclient.InferenceServerClient(a.grpc_url)
    grpc.load_model("uploaded", config=json.dumps(UPLOADED),
                    files={"file:1/model.onnx": ONNX_FILE})
    http(a).load_model("other")  # no overrides: the repository's
    record = read(path)
    assert record.generation == 3
    assert record.models["echo"] == Entry(echo_config("echo", "from-a"))
    assert record.models["other"] == Entry()
    # The file is beside the record, named by its digest, not inlined in it.
    assert record.models["uploaded"].files == {"1/model.onnx": digest(ONNX_FILE)}
    assert (tmp_path / "state.json.files" / digest(ONNX_FILE)).read_bytes() == ONNX_FILE
    assert len(path.read_bytes()) < 4096
    http(a).load_model("other")  # a load that matches the record writes nothing
    assert read(path).generation == 3

    b = start(module_inferd, repository, str(path), "--model-control-state-poll-secs", "0")
    assert ready(b) == {"echo", "other", "uploaded"}
    assert tag(b, "echo") == "from-a"
    infer_uploaded(b)
    assert read(path).generation == 3  # applying the record wrote nothing back
    assert b.terminate() == 0

    http(a).unload_model("echo")
    assert "echo" not in read(path).models and read(path).generation == 4
    with pytest.raises(Exception, match="failed to load 'c0'"):
        http(a).load_model("c0", config='{"name": "c0", "backend": "no-such-backend"}')
    assert read(path).generation == 4  # a failed load changes nothing
    b = start(module_inferd, repository, str(path), "--model-control-state-poll-secs", "0")
    assert ready(b) == {"other", "uploaded"}
    assert a.terminate() == 0 and b.terminate() == 0


def test_a_running_replica_follows_the_record(
    module_inferd: InferdHarness, repository: Path, tmp_path: Path
) -> None:
    path = str(tmp_path / "state.json")
    a = start(module_inferd, repository, path, "--model-control-state-poll-secs", POLL)
    b = start(module_inferd, repository, path, "--model-control-state-poll-secs", POLL)
    http(a).load_model("echo", config=echo_config("echo", "first"))
    wait_until(lambda: "echo" in ready(b), "B loads what A loaded", b)
    assert tag(b, "echo") == "first"
    http(a).load_model("echo", config=echo_config("echo", "second"))  # a reload, changed
    wait_until(lambda: tag(b, "echo") == "second", "B reloads what A changed", b)
    http(b).load_model("other")  # and the other way round
    wait_until(lambda: "other" in ready(a), "A loads what B loaded", a)
    generation = read(Path(path)).generation
    time.sleep(4 * float(POLL))  # following wrote nothing back: no bouncing between replicas
    assert read(Path(path)).generation == generation == 3
    http(a).unload_model("echo")
    wait_until(lambda: "echo" not in ready(b), "B unloads what A unloaded", b)
    assert ready(a) == ready(b) == {"other"}
    assert "the control-state record" in b.log()
    # An ensemble: its composing model comes with it, and goes with unload_dependents.
    http(a).load_model("pair")
    wait_until(lambda: {"pair", "part"} <= ready(b), "B loads the ensemble A loaded", b)
    assert set(read(Path(path)).models) == {"other", "pair"}
    http(a).unload_model("pair", unload_dependents=True)
    assert ready(a) == {"other"}
    wait_until(lambda: ready(b) == {"other"}, "B unloads the ensemble and its composing model",
               b)
    assert a.terminate() == 0 and b.terminate() == 0


def test_two_replicas_loading_at_once_lose_nothing(
    module_inferd: InferdHarness, repository: Path, tmp_path: Path
) -> None:
    path = tmp_path / "state.json"
    a = start(module_inferd, repository, str(path), "--model-control-state-poll-secs", POLL)
    b = start(module_inferd, repository, str(path), "--model-control-state-poll-secs", POLL)
    names = [f"c{i}" for i in range(6)]
    errors: list[BaseException] = []

    def load(server: ServerHandle, name: str) -> None:
        try:
            http(server).load_model(name, config=echo_config(name, name))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=load, args=(a if i % 2 else b, name))
               for i, name in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECS)
    assert not errors, errors
    record = read(path)
    assert set(record.models) == set(names) and record.generation == len(names)
    for server in (a, b):
        wait_until(lambda server=server: set(names) <= ready(server),  # type: ignore[misc]
                   "each replica serves every model either loaded", server)
    assert {tag(a, name) for name in names} == set(names)
    assert a.terminate() == 0 and b.terminate() == 0


def test_a_record_on_s3(module_inferd: InferdHarness, repository: Path, s3_server: Any) -> None:
    s3_server.client().create_bucket(Bucket="replicas")
    url = s3_server.url("replicas/state/record.json")
    a = start(module_inferd, repository, url, "--model-control-state-poll-secs", POLL,
              env=s3_server.env)
    b = start(module_inferd, repository, url, "--model-control-state-poll-secs", POLL,
              env=s3_server.env)
    http(a).load_model("uploaded", config=json.dumps(UPLOADED),
                       files={"file:1/model.onnx": ONNX_FILE})
    http(b).load_model("echo", config=echo_config("echo", "on-s3"))
    wait_until(lambda: ready(a) == ready(b) == {"echo", "uploaded"},
               "both replicas serve both models", b)
    infer_uploaded(b)
    body = s3_server.client().get_object(Bucket="replicas", Key="state/record.json")["Body"]
    record = parse_record(body.read(), url)
    assert set(record.models) == {"echo", "uploaded"} and record.generation == 2
    stored = s3_server.client().get_object(
        Bucket="replicas", Key=f"state/record.json.files/{digest(ONNX_FILE)}")["Body"].read()
    assert stored == ONNX_FILE
    http(a).unload_model("uploaded")
    wait_until(lambda: ready(b) == {"echo"}, "B unloads what A unloaded", b)
    c = start(module_inferd, repository, url, "--model-control-state-poll-secs", "0",
              env=s3_server.env)
    assert ready(c) == {"echo"} and tag(c, "echo") == "on-s3"
    for server in (a, b, c):
        assert server.terminate() == 0


def test_a_failing_entry_stops_nothing_and_an_unreadable_record_keeps_what_serves(
    module_inferd: InferdHarness, repository: Path, tmp_path: Path
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(dump_record(Record(5, {"ghost": Entry(), "echo": Entry()})))
    server = start(module_inferd, repository, str(path), "--model-control-state-poll-secs",
                   POLL)  # --exit-on-error is true: a record entry does not make it exit
    rows = {row["name"]: row for row in http(server).get_model_repository_index()}
    assert rows["echo"]["state"] == "READY"
    assert rows["ghost"]["state"] == "UNAVAILABLE"
    assert "ghost" in rows["ghost"]["reason"] and "control-state record" in rows["ghost"]["reason"]
    path.write_bytes(b"{torn")
    wait_until(lambda: "cannot follow the control-state record" in server.log(),
               "the replica says the record became unreadable", server)
    assert ready(server) == {"echo"}  # and keeps serving what it had
    path.write_bytes(dump_record(Record(6, {"other": Entry()})))
    wait_until(lambda: ready(server) == {"other"}, "it follows the record again", server)
    rows = {row["name"]: row for row in http(server).get_model_repository_index()}
    assert "reason" not in rows.get("ghost", {})
    path.unlink()  # a record that vanishes is not an empty one: nothing is unloaded
    wait_until(lambda: "the record is gone" in server.log(), "the replica says so", server)
    assert ready(server) == {"other"}
    path.write_bytes(dump_record(Record(6, {"other": Entry()})))
    wait_until(lambda: "is readable again" in server.log(), "it reads it again", server)
    # A load the record cannot take (its files folder is a file here) is loaded, and says
    # that the other replicas will not follow; the record is unchanged.
    (tmp_path / "state.json.files").write_bytes(b"")
    with pytest.raises(Exception, match="'uploaded' is loaded, but --model-control-state was "
                                        "not updated"):
        http(server).load_model("uploaded", config=json.dumps(UPLOADED),
                                files={"file:1/model.onnx": ONNX_FILE})
    assert read(path) == Record(6, {"other": Entry()})
    assert ready(server) == {"other", "uploaded"}
    assert server.terminate() == 0


@pytest.mark.parametrize(("flags", "record", "message"), [
    (("--model-control-mode", "poll"), None,
     "Use of '--model-control-state' requires setting '--model-control-mode=explicit'"),
    (("--model-control-mode", "explicit"), b"{not json",
     "state.json: not a model control state record (not JSON"),
    (("--model-control-mode", "explicit"),
     json.dumps({"format": "inferd-model-control-state", "version": 9}).encode(),
     "written in format version 9 by a newer inferd"),
])
def test_start_up_refusals(module_inferd: InferdHarness, repository: Path, tmp_path: Path,
                           flags: tuple[str, ...], record: bytes | None, message: str) -> None:
    path = tmp_path / "state.json"
    if record is not None:
        path.write_bytes(record)
    server = module_inferd.launch(repository, *flags, "--model-control-state", str(path))
    assert server.wait_exit(60) == 1
    assert message in server.log()
    if record is not None:
        assert str(path) in server.log()
