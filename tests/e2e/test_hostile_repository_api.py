"""A hostile client against the repository API and the names it takes (issue 8, points 1-4, 8
and 10), over HTTP (raw ``http.client``, since tritonclient quotes what it sends) and gRPC
(tritonclient.grpc): path traversal through model names and ``file:`` overrides, names that
are not names, loads that fail half-way, config overrides that point outside the model
folder, NaN and infinities in JSON, and the run folders of servers that were killed.

The shared server runs with its own ``TMPDIR``, so every test can check that nothing was
written outside the server's private folders and that a refused load leaves nothing behind.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.client import Client
from inferd.protocols.errors import InferdError
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

ZMQ_LIMIT = 1 << 20
EXAMPLE_REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"

BAD_NAMES = {
    "slash": "a/b",
    "backslash": "a\\b",
    "dot": ".",
    "dotdot": "..",
    "traversal": "../../escaped",
    "hidden": ".hidden",
    "nul": "a\x00b",
    "crlf": "a\r\nFORGED log line",
    "escape": "a\x1b[31mb",
    "too_long": "m" * 300,
}


@pytest.fixture(scope="module")
def tmpdir_root(module_inferd: InferdHarness) -> Path:
    folder = module_inferd.folder / "tmp"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness, tmpdir_root: Path) -> ServerHandle:
    root = module_inferd.repository("simple", "identity_fp32")
    return module_inferd.start(
        root, "--model-control-mode=explicit", "--load-model=simple",
        "--load-model=identity_fp32", f"--zmq-max-input-size={ZMQ_LIMIT}",
        env={"TMPDIR": str(tmpdir_root)},
    )


def run_folder(server: ServerHandle, tmpdir_root: Path) -> Path:
    folders = list(tmpdir_root.glob(f"inferd-{server.process.pid}-*"))
    assert len(folders) == 1, folders
    return folders[0]


def override_folders(server: ServerHandle, tmpdir_root: Path) -> list[Path]:
    overrides = run_folder(server, tmpdir_root) / "overrides"
    return sorted(overrides.iterdir()) if overrides.exists() else []


def everything_under(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def raw(server: ServerHandle, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        data = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=data)
        response = connection.getresponse()
        content = response.read()
        return response.status, json.loads(content) if content else None
    finally:
        connection.close()


def index(server: ServerHandle) -> list[dict[str, Any]]:
    status, entries = raw(server, "POST", "/v2/repository/index")
    assert status == 200
    return list(entries)


def override_load(config: dict[str, Any], files: dict[str, bytes]) -> dict[str, Any]:
    parameters: dict[str, Any] = {"config": json.dumps(config)}
    parameters.update({f"file:{path}": base64.b64encode(data).decode() for path, data in
                       files.items()})
    return {"parameters": parameters}


def identity_config(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name, "backend": "onnxruntime", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        **fields,
    }


def identity_model() -> bytes:
    return (EXAMPLE_REPOSITORY / "identity_fp32" / "1" / "model.onnx").read_bytes()


def assert_serving(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        row = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(row)
        inputs[1].set_data_from_numpy(np.ones_like(row))
        result = client.infer("simple", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == (row + 1).tolist()
    finally:
        client.close()


# ---------------------------------------------------------------------- path traversal


def test_traversal_through_the_model_name_writes_nothing(
    server: ServerHandle, tmpdir_root: Path
) -> None:
    before = everything_under(tmpdir_root.parent)
    body = {"parameters": {"config": "{}", "file:f": "AAAA"}}
    status, reply = raw(server, "POST", "/v2/repository/models/..%2F..%2Fescaped/load", body)
    assert status == 400
    assert refusal("../../escaped", "/load") in reply["error"]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as error:
        client.load_model("../../x", config="{}", files={"file:f": b"AAAA"})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refusal("../../x", "/load") in error.value.message()
    client.close()
    written = everything_under(tmpdir_root.parent) - before
    # The server's log files grow; nothing else may appear anywhere under the test's folder.
    assert {path for path in written if not path.startswith("logs")} == set()
    assert not list(tmpdir_root.parent.rglob("escaped")) and not list(
        tmpdir_root.parent.rglob("x"))
    assert override_folders(server, tmpdir_root) == []


# ---------------------------------------------------------------------- model names


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_bad_names_are_refused_everywhere_with_400(
    server: ServerHandle, tmpdir_root: Path, name: str
) -> None:
    before = index(server)
    quoted = quote(name, safe="")
    config = {"parameters": {"config": json.dumps(identity_config(name))}}
    calls = [
        ("POST", f"/v2/repository/models/{quoted}/load", None),
        ("POST", f"/v2/repository/models/{quoted}/load", config),
        ("POST", f"/v2/repository/models/{quoted}/unload", None),
        ("GET", f"/v2/models/{quoted}", None),
        ("GET", f"/v2/models/{quoted}/config", None),
        ("GET", f"/v2/models/{quoted}/stats", None),
        ("GET", f"/v2/models/{quoted}/ready", None),
        ("POST", f"/v2/models/{quoted}/infer", {"inputs": []}),
    ]
    for method, path, body in calls:
        status, reply = raw(server, method, path, body)
        assert status == 400, (method, path, reply)
        assert refusal(name, path) in reply["error"], (method, path, reply)
        assert str(tmpdir_root) not in reply["error"]
        assert "\r" not in reply["error"] and "\n" not in reply["error"]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for path, call in (("/load", lambda: client.load_model(name)),
                           ("/unload", lambda: client.unload_model(name)),
                           ("", lambda: client.get_model_metadata(name))):
            with pytest.raises(InferenceServerException) as error:
                call()
            assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert refusal(name, path) in error.value.message()
    finally:
        client.close()
    assert index(server) == before
    assert not any(line.startswith("FORGED") for line in server.log().splitlines())
    assert_serving(server)


def refusal(name: str, path: str) -> str:
    """The words a request naming ``name`` is refused with: a load hears Triton's for the
    names Triton refuses to load (a ``/``, or ``..``), the rest inferd's."""
    if path.endswith("/load") and (name.strip() == ".." or "/" in name):
        return "model name must not contain path traversal characters"
    return "is not a valid model name"


def test_many_invalid_loads_do_not_grow_the_index(server: ServerHandle) -> None:
    before = index(server)
    for number in range(300):
        status, _ = raw(server, "POST", f"/v2/repository/models/bad%0A{number}/load")
        assert status == 400
        status, _ = raw(server, "POST", f"/v2/repository/models/no_such_model_{number}/load")
        assert status == 404
    assert index(server) == before


# ---------------------------------------------------------------------- failed loads


@pytest.mark.parametrize(
    "files",
    [
        {".": b"x"},
        {"1/.": b"x"},
        {"1/..": b"x"},
        {"1//model.onnx": b"x"},
        {"/abs/model.onnx": b"x"},
        {"1/a\x00b": b"x"},
        {"1/a\nb": b"x"},
        {"1/" + "n" * 300: b"x"},
        {"1/model.onnx": b"x" * 1024, "1/model.onnx/inner": b"x"},
        {"1\\..\\..\\model.onnx": b"x"},
    ],
    ids=["dot", "version-dot", "dotdot", "empty", "absolute", "nul", "newline", "long",
         "file-and-folder", "backslash"],
)
def test_refused_override_files_leave_nothing_behind(
    server: ServerHandle, tmpdir_root: Path, files: dict[str, bytes]
) -> None:
    before = index(server)
    big = {f"1/padding{i}": b"\0" * (1 << 20) for i in range(4)}  # written first, if at all
    status, reply = raw(server, "POST", "/v2/repository/models/override_model/load",
                        override_load(identity_config("override_model"), {**big, **files}))
    assert status == 400, reply
    assert "file override path" in reply["error"]
    assert override_folders(server, tmpdir_root) == []
    assert index(server) == before
    assert_serving(server)


def test_a_failing_override_load_removes_its_folder(
    server: ServerHandle, tmpdir_root: Path
) -> None:
    before = index(server)
    bad_model = override_load(identity_config("broken_override"), {"1/model.onnx": b"junk"})
    status, reply = raw(server, "POST", "/v2/repository/models/broken_override/load", bad_model)
    assert status == 400, reply
    assert override_folders(server, tmpdir_root) == []
    # The backend's error names the file as the model's, not by the server's folders.
    assert "broken_override/1/model.onnx" in reply["error"]
    assert str(tmpdir_root) not in reply["error"] and str(tmpdir_root) not in json.dumps(
        index(server))
    # A good one keeps its folder while it serves, and loses it at unload.
    good = override_load(identity_config("good_override"),
                         {"1/model.onnx": identity_model()})
    status, reply = raw(server, "POST", "/v2/repository/models/good_override/load", good)
    assert status == 200, reply
    folders = override_folders(server, tmpdir_root)
    assert len(folders) == 1 and oct(folders[0].stat().st_mode & 0o777) == "0o700"
    assert (folders[0] / "good_override" / "1" / "model.onnx").is_file()
    status, _ = raw(server, "POST", "/v2/repository/models/good_override/unload")
    assert status == 200
    assert override_folders(server, tmpdir_root) == []
    assert [e for e in index(server) if e["name"] not in ("broken_override", "good_override")
            ] == before


# ---------------------------------------------------------------------- config paths


@pytest.mark.parametrize(
    "filename",
    ["/etc/hostname", "/etc/no-such-file-here", "../../simple/1/model.onnx", "..", "a/b.onnx"],
)
def test_model_file_names_in_a_config_stay_in_the_version_folder(
    server: ServerHandle, filename: str
) -> None:
    config = identity_config("simple", default_model_filename=filename)
    status, reply = raw(server, "POST", "/v2/repository/models/simple/load",
                        {"parameters": {"config": json.dumps(config)}})
    assert status == 400
    # The same answer whether the file exists or not: no oracle for the server's disk.
    assert "'default_model_filename' must be a file name inside the version folder" in (
        reply["error"])
    config = identity_config("simple", cc_model_filenames={"8.0": filename})
    status, reply = raw(server, "POST", "/v2/repository/models/simple/load",
                        {"parameters": {"config": json.dumps(config)}})
    assert status == 400
    assert "cc_model_filenames" in reply["error"]
    assert_serving(server)  # a refused reload leaves the serving version alone


# ---------------------------------------------------------------------- JSON numbers


def test_nan_and_infinities_travel_as_valid_json(server: ServerHandle) -> None:
    values = [float("nan"), float("inf"), float("-inf"), 1.5]
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": values}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]}
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    # Triton's own spelling (bare NaN/Infinity, what Python's json writes) is accepted...
    connection.request("POST", "/v2/models/identity_fp32/infer", body=json.dumps(body))
    response = connection.getresponse()
    content = response.read()
    connection.close()
    assert response.status == 200, content

    def strict(constant: str) -> None:
        raise AssertionError(f"invalid JSON constant {constant} in {content!r}")

    # ...and the answer is strict JSON.
    output = json.loads(content, parse_constant=strict)["outputs"][0]
    assert output["data"] == ["NaN", "Infinity", "-Infinity", 1.5]
    # tritonclient decodes it to the same floats; and accepts the strings in requests too.
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.float32), binary_data=False)
    result = client.infer("identity_fp32", [tensor], outputs=[
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    got = result.as_numpy("OUTPUT0")
    client.close()
    assert np.isnan(got[0]) and got[1:].tolist() == [float("inf"), float("-inf"), 1.5]
    body["inputs"][0]["data"] = output["data"]
    status, reply = raw(server, "POST", "/v2/models/identity_fp32/infer", body)
    assert status == 200 and reply["outputs"][0]["data"] == output["data"]


# ---------------------------------------------------------------------- run folders


def test_run_folders_of_killed_servers_are_removed_at_start_up(
    inferd: InferdHarness, tmp_path: Path
) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    repository = inferd.repository("identity_fp32")
    env = {"TMPDIR": str(tmpdir)}
    killed = inferd.start(repository, env=env)
    killed_folder = next(tmpdir.glob(f"inferd-{killed.process.pid}-*"))
    assert (killed_folder / "hub").exists()  # the executors' IPC socket lives there
    os.killpg(killed.process.pid, signal.SIGKILL)
    killed.process.wait(10)
    killed.clean_exit = False
    assert killed_folder.exists()
    live_elsewhere = tmpdir / f"inferd-{os.getpid()}-keepme"  # a live pid: not stale
    live_elsewhere.mkdir()
    unrelated = tmpdir / "inferd-notapid"
    unrelated.mkdir()
    second = inferd.start(repository, env=env)
    deadline = time.monotonic() + 10
    while killed_folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not killed_folder.exists()
    assert live_elsewhere.exists() and unrelated.exists()
    own = next(tmpdir.glob(f"inferd-{second.process.pid}-*"))
    assert oct(own.stat().st_mode & 0o777) == "0o700"
    assert second.terminate() == 0
    assert not own.exists()  # a clean exit removes its own


def test_a_million_instances_is_refused_at_once(server: ServerHandle) -> None:
    config = identity_config("simple", instance_group=[{"count": 1_000_000, "kind": "KIND_CPU"}])
    started = time.monotonic()
    status, reply = raw(server, "POST", "/v2/repository/models/simple/load",
                        {"parameters": {"config": json.dumps(config)}})
    assert status == 400 and "at most 1024 are allowed" in reply["error"]
    assert time.monotonic() - started < 5
    assert_serving(server)


def test_a_zmq_frame_over_the_limit_drops_only_its_client(server: ServerHandle) -> None:
    small = np.arange(4, dtype=np.float32)
    with Client(server.url, timeout=3.0) as client:
        with pytest.raises(InferdError):
            client.infer("identity_fp32", {"INPUT0": np.zeros(ZMQ_LIMIT, dtype=np.float32)})
    with Client(server.url, timeout=10.0) as client:
        got = client.infer("identity_fp32", {"INPUT0": small}).as_numpy("OUTPUT0")
        assert got.tolist() == small.tolist()
        # Just under the limit (the header travels in a frame of its own) still goes through.
        under = np.ones(ZMQ_LIMIT // 4 - 16, dtype=np.float32)
        assert client.infer("identity_fp32", {"INPUT0": under}).as_numpy("OUTPUT0").sum() == (
            under.size)
