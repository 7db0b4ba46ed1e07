"""Remote repository URLs and the local mirror, without a cloud: Triton's s3://, gs:// and
as:// forms and fsspec's az:// mapped to fsspec filesystems; a missing extra named; storage
failures turned into one sentence; and ``RepositoryMirror`` over a stand-in object store
(a dict behind fsspec's three calls it uses), fetching only what changed, removing what went,
keeping its record across instances, refusing hostile keys, and never reading a failing
listing as an empty bucket."""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inferd.kernel.actors.repository.fingerprints import version_fingerprints
from inferd.kernel.actors.repository.mirror import RepositoryMirror
from inferd.kernel.actors.repository import remote_storage
from inferd.kernel.actors.repository.remote_storage import (
    RemoteLocation,
    check_url,
    describe_error,
    is_remote_url,
    open_filesystem,
)
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.protocols.errors import InvalidArgument, NotFound

STORAGES = Plugins.load().storages()  # the installed plugins': s3, gs, as and az


def parse_url(url: str, env: dict[str, str] | None = None) -> RemoteLocation:
    """The kernel's ``parse_url`` with the installed plugins' storages."""
    return remote_storage.parse_url(url, env, storages=STORAGES)

# ---------------------------------------------------------------------- URL forms


def test_which_roots_are_remote() -> None:
    for url in ("s3://b/p", "S3://b/p", "gs://b", "as://a/c/p", "az://c/p"):
        assert is_remote_url(url, STORAGES)
    for path in ("model_repository", "/srv/models", "file:///srv/models", "http://h/p", "s3:/x"):
        assert not is_remote_url(path, STORAGES)


def test_s3_bucket_and_path_use_botocore_s_own_endpoint_and_credentials() -> None:
    location = parse_url("s3://bucket/path/to/repo/", env={})
    assert (location.scheme, location.root) == ("s3", "bucket/path/to/repo")
    assert "endpoint_url" not in location.options
    assert "key" not in location.options and "secret" not in location.options
    timeouts = location.options["config_kwargs"]
    assert timeouts["connect_timeout"] > 0 and timeouts["read_timeout"] > 0
    assert parse_url("s3://bucket", env={}).root == "bucket"


@pytest.mark.parametrize(("url", "endpoint"), [
    ("s3://127.0.0.1:9000/bucket/path", "http://127.0.0.1:9000"),
    ("s3://minio.local:9000/bucket/path", "http://minio.local:9000"),
    ("s3://http://minio.local:9000/bucket/path", "http://minio.local:9000"),
    ("s3://https://minio.local:9443/bucket/path", "https://minio.local:9443"),
])
def test_s3_custom_endpoint_forms_are_triton_s(url: str, endpoint: str) -> None:
    location = parse_url(url, env={})
    assert location.options["endpoint_url"] == endpoint
    assert location.root == "bucket/path"


def test_s3_region_comes_from_aws_region_or_aws_default_region() -> None:
    assert parse_url("s3://b/p", env={"AWS_DEFAULT_REGION": "eu-west-1"}).options[
        "client_kwargs"] == {"region_name": "eu-west-1"}
    assert parse_url("s3://b/p", env={"AWS_REGION": "ap-south-1",
                                      "AWS_DEFAULT_REGION": "eu-west-1"}).options[
        "client_kwargs"] == {"region_name": "ap-south-1"}


def test_gs_maps_to_gcsfs_with_google_application_credentials() -> None:
    location = parse_url("gs://bucket/models", env={"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"})
    assert (location.scheme, location.root, location.extra) == ("gs", "bucket/models", "gcs")
    assert location.options["token"] == "/k.json"
    assert "token" not in parse_url("gs://bucket/models", env={}).options


def test_as_is_triton_s_azure_form_and_az_is_fsspec_s() -> None:
    location = parse_url("as://account/container/models", env={"AZURE_STORAGE_KEY": "k"})
    assert (location.root, location.extra) == ("container/models", "azure")
    assert location.options["account_name"] == "account"
    assert location.options["account_key"] == "k"
    host = parse_url("as://acct.blob.core.windows.net/container/m", env={})
    assert host.options["account_name"] == "acct"
    # As Triton: AZURE_STORAGE_ACCOUNT wins over the URL's account.
    assert parse_url("as://url-account/c/m", env={"AZURE_STORAGE_ACCOUNT": "env"}).options[
        "account_name"] == "env"
    fsspec_form = parse_url("az://container/models", env={"AZURE_STORAGE_ACCOUNT": "acct"})
    assert (fsspec_form.root, fsspec_form.options["account_name"]) == ("container/models", "acct")


@pytest.mark.parametrize("url", [
    "s3://", "s3:///", "gs://", "as://account", "as://account/", "s3://b/../etc",
    "s3://b/p\\q", "s3://https://host/bucket/path",
])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_url(url, env={})


@pytest.mark.parametrize(("url", "module", "extra"), [
    ("gs://bucket/models", "gcsfs", "gcs"),
    ("as://account/container/models", "adlfs", "azure"),
    ("az://container/models", "adlfs", "azure"),
    ("s3://bucket/models", "s3fs", "s3"),
])
def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, url: str, module: str,
                                  extra: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as when not installed
    for call in (lambda u: check_url(u, STORAGES),
                 lambda u: open_filesystem(parse_url(u, env={}), STORAGES)):
        with pytest.raises(InvalidArgument) as refused:
            call(url)
        assert f"pip install 'inferd[{extra}]'" in refused.value.message
        assert url in refused.value.message


def test_serve_with_a_missing_extra_exits_1_naming_it(tmp_path: Path) -> None:
    (tmp_path / "gcsfs.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "inferd.kernel.cli.main", "serve",
         "--model-repository", "gs://bucket/models"],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "gs://bucket/models: gs:// repositories need the gcsfs package: " \
           "pip install 'inferd[gcs]'" in done.stderr


# ---------------------------------------------------------------------- failures in words


def test_storage_failures_are_one_sentence_naming_the_url_and_cause() -> None:
    from botocore.exceptions import (
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    url = "s3://host:9000/bucket/models"
    cases = {
        NoCredentialsError(): "no credentials were found",
        EndpointConnectionError(endpoint_url="http://host:9000/bucket?list-type=2&prefix=x"):
            "the storage cannot be reached (Could not connect to the endpoint URL: "
            "\"http://host:9000/bucket\")",
        ReadTimeoutError(endpoint_url="http://host:9000/"): "the storage did not answer in time",
        FileNotFoundError("The specified bucket does not exist"): "no such bucket",
        PermissionError("Access Denied"): "access denied (Access Denied)",
        OSError("InvalidAccessKeyId: The AWS Access Key Id you provided does not exist"):
            "the credentials were refused",
    }
    for error, cause in cases.items():
        sentence = describe_error(url, error, STORAGES)
        assert sentence.startswith(f"the model repository {url} cannot be read: "), sentence
        assert cause in sentence, sentence


# ---------------------------------------------------------------------- the mirror


class ObjectStore:
    """A stand-in bucket behind the three fsspec calls the mirror makes (``ls``, ``find``,
    ``get_file``), counting them; ``down`` makes every call fail as a dead endpoint."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, float]] = {}
        self.calls: list[str] = []
        self.down = False

    def put(self, path: str, body: bytes, when: float = 1_700_000_000.0) -> None:
        self.objects[path] = (body, when)

    def _check(self, call: str) -> None:
        self.calls.append(call)
        if self.down:
            raise ConnectionError("Could not connect to the endpoint URL")

    def _info(self, path: str) -> dict[str, Any]:
        body, when = self.objects[path]
        return {"name": path, "type": "file", "size": len(body),
                "ETag": f'"{hashlib.md5(body).hexdigest()}"',  # noqa: S324 (S3's ETag)
                "LastModified": datetime.datetime.fromtimestamp(when, datetime.UTC)}

    def ls(self, path: str, detail: bool = True, refresh: bool = False) -> list[dict[str, Any]]:
        self._check("ls")
        folders = {key[len(path) + 1:].split("/", 1)[0] for key in self.objects
                   if key.startswith(path + "/")}
        return [{"name": f"{path}/{folder}", "type": "directory", "size": 0}
                for folder in sorted(folders)]

    def find(self, path: str, detail: bool = True, withdirs: bool = False) -> dict[str, Any]:
        self._check("find")
        return {key: self._info(key) for key in self.objects if key.startswith(path + "/")}

    def get_file(self, source: str, target: str) -> None:
        self._check("get_file")
        Path(target).write_bytes(self.objects[source][0])


URL = "s3://bucket/repo"


@pytest.fixture
def store() -> ObjectStore:
    store = ObjectStore()
    store.put("bucket/repo/m/config.pbtxt", b'name: "m"\n')
    store.put("bucket/repo/m/labels.txt", b"a\nb\n")
    store.put("bucket/repo/m/1/model.onnx", b"one")
    store.put("bucket/repo/m/2/model.onnx", b"two")
    store.put("bucket/repo/m/.hidden", b"editor swap file")
    store.put("bucket/repo/other/config.pbtxt", b'name: "other"\n')
    return store


def fetch(mirror: RepositoryMirror, name: str, versions: list[int]) -> Path:
    with mirror.fetching(name) as started:
        started.versions(versions)
        return started.folder


def test_listing_never_downloads_and_polls_are_one_listing(store: ObjectStore,
                                                           tmp_path: Path) -> None:
    mirror = RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES)
    assert mirror.names() == (("m", "other"), {})
    fingerprints, problems = mirror.fingerprints()
    assert set(fingerprints) == {"m", "other"} and not problems
    assert store.calls == ["ls", "find"]
    assert not any(tmp_path.rglob("*.onnx"))
    store.put("bucket/repo/m/.hidden", b"changed swap file")
    assert mirror.fingerprints()[0] == fingerprints  # hidden entries are not the model
    store.put("bucket/repo/m/1/model.onnx", b"ONE")
    assert mirror.fingerprints()[0]["m"] != fingerprints["m"]
    assert mirror.fingerprints()[0]["other"] == fingerprints["other"]


def test_a_load_fetches_the_shared_files_and_the_chosen_versions_only(
    store: ObjectStore, tmp_path: Path
) -> None:
    mirror = RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES)
    folder = fetch(mirror, "m", [2])
    assert (folder / "config.pbtxt").read_bytes() == b'name: "m"\n'
    assert (folder / "labels.txt").is_file()
    assert (folder / "2" / "model.onnx").read_bytes() == b"two"
    assert (folder / "1").is_dir() and not any((folder / "1").iterdir())  # seen, not fetched
    assert not (folder / ".hidden").exists()
    assert (mirror.fetched_files, mirror.fetched_bytes) == (3, 10 + 4 + 3)
    assert (folder / "2" / "model.onnx").stat().st_mtime == 1_700_000_000.0
    assert not [p for p in folder.rglob(".*")]  # no temporary file left behind


def test_only_changed_files_are_fetched_again_even_by_a_new_mirror(
    store: ObjectStore, tmp_path: Path
) -> None:
    folder = fetch(RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES), "m", [1, 2])
    before = version_fingerprints(folder, [1, 2])
    again = RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES)  # a restarted server
    store.calls.clear()
    fetch(again, "m", [1, 2])
    assert again.fetched_files == 0 and "get_file" not in store.calls
    assert version_fingerprints(folder, [1, 2]) == before
    store.put("bucket/repo/m/2/model.onnx", b"TWO!", when=1_700_000_100.0)
    fetch(again, "m", [1, 2])
    assert (again.fetched_files, again.fetched_bytes) == (1, 4)
    after = version_fingerprints(folder, [1, 2])
    assert after[1] == before[1] and after[2] != before[2]


def test_files_and_versions_gone_from_the_bucket_leave_the_cache(
    store: ObjectStore, tmp_path: Path
) -> None:
    mirror = RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES)
    folder = fetch(mirror, "m", [1, 2])
    del store.objects["bucket/repo/m/labels.txt"]
    del store.objects["bucket/repo/m/1/model.onnx"]
    fetch(mirror, "m", [2])
    assert not (folder / "labels.txt").exists()
    assert not (folder / "1").exists()
    assert (folder / "2" / "model.onnx").is_file()
    for key in [k for k in store.objects if k.startswith("bucket/repo/m/")]:
        del store.objects[key]
    with pytest.raises(NotFound):
        fetch(mirror, "m", [2])


@pytest.mark.parametrize("key", ["1/../../../escaped", "1/..\\..\\escaped", "1//x", "./x", "1/x/"])
def test_a_hostile_key_is_refused_and_nothing_is_written(store: ObjectStore, tmp_path: Path,
                                                         key: str) -> None:
    store.put(f"bucket/repo/m/{key}", b"outside")
    mirror = RepositoryMirror(URL, tmp_path / "cache", filesystem=store, storages=STORAGES)
    with pytest.raises(InvalidArgument) as refused:
        fetch(mirror, "m", [1])
    assert "is refused" in refused.value.message and URL in refused.value.message
    assert "get_file" not in store.calls
    assert not list(tmp_path.rglob("escaped"))


def test_a_failing_listing_is_never_an_empty_bucket(store: ObjectStore, tmp_path: Path) -> None:
    mirror = RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES)
    assert mirror.names()[0] == ("m", "other")
    store.down = True
    names, problems = mirror.names()
    assert names == ("m", "other")
    assert set(problems) == {"m", "other"}
    assert problems["m"].startswith(f"the model repository {URL} cannot be read: the storage "
                                    "cannot be reached")
    fingerprints, problems = mirror.fingerprints()
    assert fingerprints == {} and set(problems) == {"m", "other"}
    assert mirror.check() == problems["m"]
    with pytest.raises(InvalidArgument) as failed:
        fetch(mirror, "m", [1])
    assert failed.value.message == problems["m"]
    store.down = False
    assert mirror.names() == (("m", "other"), {}) and mirror.check() == ""


def test_a_key_that_is_both_a_file_and_a_folder_is_refused(store: ObjectStore,
                                                           tmp_path: Path) -> None:
    store.put("bucket/repo/m/1", b"a file where the version folder is")
    mirror = RepositoryMirror(URL, tmp_path, filesystem=store, storages=STORAGES)
    with pytest.raises(InvalidArgument) as refused:
        fetch(mirror, "m", [1])
    assert "a file and a folder of the same name" in refused.value.message


def test_a_cache_that_cannot_be_written_is_named(store: ObjectStore, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    mirror = RepositoryMirror(URL, tmp_path / "file", filesystem=store, storages=STORAGES)
    with pytest.raises(InvalidArgument) as refused:
        fetch(mirror, "m", [1])
    assert refused.value.message.startswith(
        "model 'm': the repository cache (--repository-cache-dir) cannot be written: ")
