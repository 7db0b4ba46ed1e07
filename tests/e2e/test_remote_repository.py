"""Remote model repositories (issue 14): real servers reading an S3 bucket on a moto server on
loopback (Triton's ``s3://host:port/bucket/path`` form), through tritonclient over HTTP and
gRPC. NONE mode serves python and ONNX models from the bucket; a restart with the same cache
folder fetches nothing unchanged and then only the changed file (the fetch counters); POLL
mode picks up a changed config, a new version folder and a removed model; the storage going
away keeps what serves serving with the index saying why, and its return is picked up;
missing credentials and an unknown bucket are clear errors at start-up and on an EXPLICIT
load; a hostile object key is refused."""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.services import S3Server
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY, PROJECT_ROOT


PYTHON_MODELS = PROJECT_ROOT / "tests" / "plugins" / "python_models"
POLL_SECS = 0.5
WAIT_SECS = 30.0
NO_CREDENTIALS = {
    # Nothing for botocore to find: no keys, no files, no instance metadata to wait for.
    "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config", "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Storage:
    """The module's S3 server, which a test may stop and bring back on the same port with
    the objects it held."""

    def __init__(self, server: S3Server, folder: Path) -> None:
        self.server = server
        self.folder = folder
        self.objects: dict[tuple[str, str], bytes] = {}  # (bucket, key) -> its bytes

    @property
    def env(self) -> dict[str, str]:
        return {**self.server.env, "AWS_EC2_METADATA_DISABLED": "true"}

    def upload(self, folder: Path, path: str) -> None:
        self.server.upload(folder, path)
        bucket, _, prefix = path.partition("/")
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            self.objects[bucket, f"{prefix}/{file.relative_to(folder).as_posix()}"] = \
                file.read_bytes()

    def put(self, path: str, body: bytes) -> None:
        bucket, _, key = path.partition("/")
        self.server.client().put_object(Bucket=bucket, Key=key, Body=body)
        self.objects[bucket, key] = body

    def delete_prefix(self, path: str) -> None:
        bucket, _, prefix = path.partition("/")
        client = self.server.client()
        for (in_bucket, key) in list(self.objects):
            if in_bucket == bucket and key.startswith(prefix.rstrip("/") + "/"):
                client.delete_object(Bucket=bucket, Key=key)
                del self.objects[in_bucket, key]

    def restart(self, first: str) -> None:
        """A new S3 server on the same port, given the same objects (the same bytes: the
        same ETags), those under ``first`` before the others."""
        self.server = S3Server(self.folder, port=self.server.port)
        client = self.server.client()
        for bucket in sorted({bucket for bucket, _ in self.objects}):
            client.create_bucket(Bucket=bucket)
        for (bucket, key), body in sorted(self.objects.items(),
                                          key=lambda item: not "/".join(item[0]).startswith(first)):
            client.put_object(Bucket=bucket, Key=key, Body=body)


@pytest.fixture(scope="module")
def storage(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Any:
    holder = Storage(s3_server, tmp_path_factory.mktemp("s3-again"))
    yield holder
    holder.server.stop()


def model_folder(tmp: Path, *models: tuple[str, Path]) -> Path:
    """A local repository of copies of ``models`` ((name, source folder)) to upload."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name, source in models:
        shutil.copytree(source, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def wait_for(condition: Callable[[], bool], what: str, server: Any = None) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        if time.monotonic() > deadline:
            log = server.log() if server is not None else ""
            pytest.fail(f"timed out waiting for {what}\n{log[-6000:]}")
        time.sleep(0.1)


def index(server: Any) -> list[dict[str, str]]:
    entries: list[dict[str, str]] = httpclient.InferenceServerClient(
        server.http_url).get_model_repository_index()
    return entries


def entry(server: Any, name: str) -> list[tuple[str, str, str]]:
    return [(e.get("version", ""), e.get("state", ""), e.get("reason", ""))
            for e in index(server) if e["name"] == name]


def fetched(server: Any) -> tuple[float, float]:
    """(files, bytes) the server's remote loads fetched so far (its metrics)."""
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = []
    for family in ("files", "bytes"):
        found = re.search(rf"^inferd_repository_fetched_{family}_total{{.*}} (\S+)$", text, re.M)
        assert found, text
        values.append(float(found.group(1)))
    return values[0], values[1]


def simple_sums(client_module: Any, url: str) -> list[int]:
    """``simple``'s sums of one row 0..15 with itself, through tritonclient's ``client_module``
    (``tritonclient.http`` or ``tritonclient.grpc``)."""
    row = np.arange(16, dtype=np.int32).reshape(1, 16)
    client = client_module.InferenceServerClient(url)
    inputs = [client_module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(row)
    output: list[int] = client.infer("simple", inputs).as_numpy("OUTPUT0")[0].tolist()
    return output


def simple_sums_http(server: Any) -> list[int]:
    return simple_sums(httpclient, server.http_url)


def simple_sums_grpc(server: Any) -> list[int]:
    return simple_sums(grpcclient, server.grpc_url)


EXPECTED_SUMS = [2 * i for i in range(16)]


# ---------------------------------------------------------------------- NONE mode, restarts


def test_none_mode_serves_python_and_onnx_models_and_a_restart_fetches_only_changes(
    module_inferd: Any, storage: Storage, tmp_path: Path
) -> None:
    local = model_folder(tmp_path / "none", ("simple", EXAMPLE_REPOSITORY / "simple"),
                         ("add_sub", PYTHON_MODELS / "add_sub"))
    storage.upload(local, "models/none")
    cache = tmp_path / "cache"
    flags = ("--model-repository", storage.server.url("models/none"),
             "--repository-cache-dir", str(cache))
    server = module_inferd.start(None, *flags, env=storage.env)
    assert simple_sums_http(server) == EXPECTED_SUMS
    assert simple_sums_grpc(server) == EXPECTED_SUMS
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor, value in zip(inputs, (3.0, 1.0), strict=True):
        tensor.set_data_from_numpy(np.full(4, value, dtype=np.float32))
    assert client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist() == [4.0] * 4
    files = sorted(p for p in local.rglob("*") if p.is_file())
    assert fetched(server) == (len(files), sum(p.stat().st_size for p in files))
    assert "model 'simple': fetched 2 of 2 files" in server.log()
    assert server.terminate() == 0

    again = module_inferd.start(None, *flags, env=storage.env)
    assert fetched(again) == (0, 0)  # the same cache folder: nothing downloaded again
    assert "model 'simple': fetched 0 of 2 files" in again.log()
    assert simple_sums_grpc(again) == EXPECTED_SUMS
    assert again.terminate() == 0

    config = (local / "simple" / "config.pbtxt").read_bytes() + b"# changed\n"
    storage.put("models/none/simple/config.pbtxt", config)
    third = module_inferd.start(None, *flags, env=storage.env)
    assert fetched(third) == (1, len(config))  # only the changed file
    assert simple_sums_http(third) == EXPECTED_SUMS
    assert third.terminate() == 0


# ---------------------------------------------------------------------- POLL mode


@pytest.fixture(scope="module")
def poll_server(module_inferd: Any, storage: Storage, tmp_path_factory: Any) -> Any:
    local = model_folder(tmp_path_factory.mktemp("poll") / "repo",
                         ("simple", EXAMPLE_REPOSITORY / "simple"),
                         ("identity_fp32", EXAMPLE_REPOSITORY / "identity_fp32"))
    # A testing-backend model that kills its executor when asked (the outage test's crash).
    (local / "crasher" / "1").mkdir(parents=True)
    (local / "crasher" / "config.pbtxt").write_text(module_inferd.testing_config("crasher", "crash"))
    (local / "crasher" / "1" / "README").write_text("the testing backend reads no file\n")
    storage.upload(local, "models/poll")
    return module_inferd.start(
        None, "--model-repository", storage.server.url("models/poll"),
        "--repository-cache-dir", str(tmp_path_factory.mktemp("poll-cache")),
        "--model-control-mode", "poll", "--repository-poll-secs", str(POLL_SECS),
        "--exit-on-error=false",
        "--cpu-executor=process",  # simple shares the crasher's process: both reload
        env=storage.env)


def max_batch_size(server: Any) -> int:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("simple")
    return int(config.get("max_batch_size", 0))


def test_poll_picks_up_a_changed_config(poll_server: Any, storage: Storage) -> None:
    assert max_batch_size(poll_server) == 8
    config = (EXAMPLE_REPOSITORY / "simple" / "config.pbtxt").read_text()
    storage.put("models/poll/simple/config.pbtxt",
                config.replace("max_batch_size: 8", "max_batch_size: 4").encode())
    wait_for(lambda: max_batch_size(poll_server) == 4, "the changed config", poll_server)
    assert simple_sums_http(poll_server) == EXPECTED_SUMS


def test_poll_loads_a_new_version_folder(poll_server: Any, storage: Storage) -> None:
    storage.put("models/poll/simple/2/model.onnx",
                (EXAMPLE_REPOSITORY / "simple" / "1" / "model.onnx").read_bytes())
    wait_for(lambda: ("2", "READY", "") in entry(poll_server, "simple"), "version 2",
             poll_server)
    client = grpcclient.InferenceServerClient(poll_server.grpc_url)
    assert client.is_model_ready("simple", "2")


def test_poll_unloads_a_removed_model(poll_server: Any, storage: Storage) -> None:
    assert entry(poll_server, "identity_fp32")[0][1] == "READY"
    storage.delete_prefix("models/poll/identity_fp32")
    wait_for(lambda: not entry(poll_server, "identity_fp32"), "identity_fp32 gone", poll_server)


# ---------------------------------------------------------------------- EXPLICIT mode


@pytest.fixture(scope="module")
def explicit_server(module_inferd: Any, storage: Storage, tmp_path_factory: Any) -> Any:
    local = model_folder(tmp_path_factory.mktemp("explicit") / "repo",
                         ("simple", EXAMPLE_REPOSITORY / "simple"),
                         ("identity_fp32", EXAMPLE_REPOSITORY / "identity_fp32"))
    storage.upload(local, "models/explicit")
    # A local root beside the remote ones: identity_fp32 is in both, accumulate only here.
    beside = model_folder(tmp_path_factory.mktemp("beside") / "repo",
                          ("identity_fp32", EXAMPLE_REPOSITORY / "identity_fp32"),
                          ("accumulate", EXAMPLE_REPOSITORY / "accumulate"))
    return module_inferd.start(
        beside, "--model-repository", storage.server.url("models/explicit"),
        "--model-repository", storage.server.url("nosuchbucket/models"),
        "--repository-cache-dir", str(tmp_path_factory.mktemp("explicit-cache")),
        "--model-control-mode", "explicit", env=storage.env)


def test_explicit_load_from_s3_and_an_unknown_bucket_is_named(explicit_server: Any) -> None:
    client = httpclient.InferenceServerClient(explicit_server.http_url)
    client.load_model("simple")
    assert simple_sums_http(explicit_server) == EXPECTED_SUMS
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("elsewhere")
    assert "failed to load 'elsewhere': the model repository s3://127.0.0.1:" in str(refused.value)
    assert "/nosuchbucket/models cannot be read: no such bucket" in str(refused.value)
    assert refused.value.status() == "400"


def test_a_remote_root_beside_a_local_one_keeps_the_two_roots_rule(explicit_server: Any) -> None:
    client = httpclient.InferenceServerClient(explicit_server.http_url)
    client.load_model("accumulate")  # local only
    assert client.is_model_ready("accumulate")
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("identity_fp32")
    assert str(refused.value.message()) == (
        "failed to load 'identity_fp32': model appears in two or more repositories")
    assert ("", "UNAVAILABLE", "model appears in two or more repositories") \
        in entry(explicit_server, "identity_fp32")


def test_a_hostile_object_key_is_refused(explicit_server: Any, storage: Storage,
                                         tmp_path: Path) -> None:
    config = (EXAMPLE_REPOSITORY / "simple" / "config.pbtxt").read_text()
    storage.put("models/explicit/hostile/config.pbtxt",
                config.replace('name: "simple"', 'name: "hostile"').encode())
    storage.put("models/explicit/hostile/1/model.onnx",
                (EXAMPLE_REPOSITORY / "simple" / "1" / "model.onnx").read_bytes())
    storage.put("models/explicit/hostile/1/../../../../escaped.txt", b"outside")
    client = grpcclient.InferenceServerClient(explicit_server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("hostile")
    message = str(refused.value)
    assert "failed to load 'hostile'" in message and "is refused" in message, message
    assert "'1/../../../../escaped.txt'" in message
    assert not list(tmp_path.parent.rglob("escaped.txt"))
    storage.delete_prefix("models/explicit/hostile")


def test_missing_credentials_fail_the_start_and_an_explicit_load(
    module_inferd: Any, storage: Storage, tmp_path: Path
) -> None:
    url = storage.server.url("models/explicit")
    flags = ("--model-repository", url, "--repository-cache-dir", str(tmp_path / "cache"))
    refused = module_inferd.launch(None, *flags, env=NO_CREDENTIALS)
    assert refused.wait_exit(WAIT_SECS) == 1
    assert f"the model repository {url} cannot be read: no credentials were found" \
        in refused.log()
    server = module_inferd.start(None, *flags, "--model-control-mode", "explicit",
                                 env=NO_CREDENTIALS)
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("simple")
    assert (f"failed to load 'simple': the model repository {url} cannot be read: no "
            "credentials were found") in str(failed.value)
    assert not client.is_model_ready("simple")


def test_credentials_from_a_profile_in_a_shared_credentials_file(
    module_inferd: Any, storage: Storage, tmp_path: Path
) -> None:
    """No key in the environment: botocore's chain finds AWS_PROFILE's section of
    AWS_SHARED_CREDENTIALS_FILE (without it, the start fails as above)."""
    storage.upload(model_folder(tmp_path / "repo", ("simple", EXAMPLE_REPOSITORY / "simple")),
                   "models/profile")
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[inferd-test]\naws_access_key_id = {storage.env['AWS_ACCESS_KEY_ID']}"
                           f"\naws_secret_access_key = {storage.env['AWS_SECRET_ACCESS_KEY']}\n")
    env = {**NO_CREDENTIALS, "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
           "AWS_PROFILE": "inferd-test"}
    server = module_inferd.start(
        None, "--model-repository", storage.server.url("models/profile"),
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--repository-cache-dir", str(tmp_path / "cache"), env=env)
    assert simple_sums_grpc(server) == EXPECTED_SUMS
    assert server.terminate() == 0


def test_an_unknown_bucket_fails_the_start(module_inferd: Any, storage: Storage,
                                           tmp_path: Path) -> None:
    url = storage.server.url("nosuchbucket/models")
    refused = module_inferd.launch(None, "--model-repository", url,
                                   "--repository-cache-dir", str(tmp_path), env=storage.env)
    assert refused.wait_exit(WAIT_SECS) == 1
    assert f"cannot start: the model repository {url} cannot be read: no such bucket" \
        in refused.log()


def test_a_hung_endpoint_fails_within_the_timeout(module_inferd: Any, storage: Storage,
                                                  tmp_path: Path) -> None:
    """An endpoint that accepts connections and never answers: each request gives up after
    --repository-timeout-secs (tried twice), so the start fails in seconds, naming why."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        url = f"s3://127.0.0.1:{listener.getsockname()[1]}/bucket/models"
        started = time.monotonic()
        refused = module_inferd.launch(None, "--model-repository", url,
                                       "--repository-cache-dir", str(tmp_path),
                                       "--repository-timeout-secs", "1", env=storage.env)
        assert refused.wait_exit(WAIT_SECS) == 1
        assert time.monotonic() - started < 25
        assert f"the model repository {url} cannot be read: the storage did not answer in " \
               "time" in refused.log()
    finally:
        listener.close()
        for connection in held:
            connection.close()


# ---------------------------------------------------------------------- storage going away


def test_storage_going_away_keeps_models_serving_and_its_return_is_picked_up(
    poll_server: Any, explicit_server: Any, storage: Storage
) -> None:
    httpclient.InferenceServerClient(explicit_server.http_url).load_model("simple")
    storage.server.stop()

    def says_why() -> bool:
        ready = [reason for _, state, reason in entry(poll_server, "simple") if state == "READY"]
        return bool(ready) and all("cannot be read" in reason for reason in ready)

    wait_for(says_why, "the index to say why", poll_server)
    assert simple_sums_http(poll_server) == EXPECTED_SUMS
    assert simple_sums_grpc(poll_server) == EXPECTED_SUMS
    time.sleep(3 * POLL_SECS)  # several failed polls: still nothing unloaded
    assert says_why()
    explicit = httpclient.InferenceServerClient(explicit_server.http_url)
    with pytest.raises(InferenceServerException) as failed:
        explicit.load_model("simple")
    assert "failed to load 'simple': the model repository s3://" in str(failed.value)
    assert "cannot be read: the storage cannot be reached" in str(failed.value)
    assert simple_sums_grpc(explicit_server) == EXPECTED_SUMS  # what served still serves

    # An executor that dies during the outage comes back with its models, from the cache.
    crash = httpclient.InferInput("INPUT0", [4], "FP32")
    crash.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    with pytest.raises(InferenceServerException):
        httpclient.InferenceServerClient(poll_server.http_url).infer("crasher", [crash])
    wait_for(lambda: poll_server.log().count("loading the copy in the repository cache") >= 2,
             "the reloads from the cache", poll_server)
    wait_for(lambda: httpclient.InferenceServerClient(poll_server.http_url).is_model_ready(
        "simple"), "simple READY again", poll_server)
    assert simple_sums_http(poll_server) == EXPECTED_SUMS

    storage.restart(first="models/poll/")  # the same port, the same objects

    def cleared() -> bool:
        ready = [reason for _, state, reason in entry(poll_server, "simple") if state == "READY"]
        return bool(ready) and all(reason == "" for reason in ready)

    wait_for(cleared, "the index to clear", poll_server)
    assert "poll: loading nothing; unloading simple" not in poll_server.log()
    assert "answers again" in poll_server.log()
    config = (EXAMPLE_REPOSITORY / "simple" / "config.pbtxt").read_text()
    storage.put("models/poll/simple/config.pbtxt",
                config.replace("max_batch_size: 8", "max_batch_size: 2").encode())
    wait_for(lambda: max_batch_size(poll_server) == 2, "a change after the return", poll_server)
    explicit.load_model("simple")
