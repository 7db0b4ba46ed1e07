"""Three inferd replicas in POLL mode sharing ONE repository, behind a real nginx (Debian's
package, run in the foreground with a generated config): steady tritonclient HTTP and gRPC load
through nginx; a config change in the shared repository reaches every replica (each asked on
its own port) with zero failed requests through nginx; then one replica is SIGKILLed and the
clients see no failures beyond its in-flight requests while the other two carry the load.

The harness (replicas on free ports: ``bench/common/replica_harness.py``; the nginx config and
process: ``replica_nginx.py``; the load driver: ``steady_load.py``) is shared with
``bench/performance/replicas.py``. The repository is one
parameter: one bucket on the moto server of ``tests/conftest.py`` (``s3_repository``, the
issue's setting), and a shared local folder (``local_repository``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.common import replica_harness, replica_nginx
from bench.common.steady_load import SteadyLoad
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY
from tests.services import missing

MODEL = "simple"
REPLICAS = 3
POLL_SECS = 0.5
WAIT_SECS = 30.0  # bounds every wait for the replicas (a loaded 2-core machine is slow)
HTTP_WORKERS = GRPC_WORKERS = 2
SETTLE_SUCCESSES = 50  # the load is running, through every protocol, before anything changes


@dataclass
class SharedRepository:
    """What every replica gets as ``--model-repository`` (a path or a URL), the environment
    the servers need to read it, the flags of each replica's own (by index), and how a test
    writes one file of it (path relative to the repository root)."""

    location: str | Path
    write: Callable[[str, bytes], None]
    env: dict[str, str] = field(default_factory=dict)
    replica_flags: Callable[[int], list[str]] = lambda index: []


def local_repository(folder: Path) -> SharedRepository:
    shutil.copytree(EXAMPLE_REPOSITORY / MODEL, folder / MODEL)

    def write(path: str, content: bytes) -> None:
        (folder / path).write_bytes(content)

    return SharedRepository(folder, write)


def s3_repository(s3_server: Any, folder: Path) -> SharedRepository:
    """The same repository in a bucket of the moto server (``tests/conftest.py``)."""
    shutil.copytree(EXAMPLE_REPOSITORY / MODEL, folder / MODEL)
    s3_server.upload(folder, "replicas/repository")
    client = s3_server.client()

    def write(path: str, content: bytes) -> None:
        client.put_object(Bucket="replicas", Key=f"repository/{path}", Body=content)

    def replica_flags(index: int) -> list[str]:
        # Each replica its own local cache of the bucket, as separate machines would have.
        return [f"--repository-cache-dir={folder / f'cache-{index}'}"]

    return SharedRepository(s3_server.url("replicas/repository"), write, dict(s3_server.env),
                            replica_flags)


@pytest.fixture(scope="module", params=["s3", "local"])
def shared(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> SharedRepository:
    """The issue's setting (one bucket on the moto server), and a shared local folder."""
    folder = tmp_path_factory.mktemp("repository")
    if request.param == "s3":
        return s3_repository(request.getfixturevalue("s3_server"), folder)
    return local_repository(folder)


@pytest.fixture(scope="module")
def cluster(
    shared: SharedRepository, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[replica_harness.Replica], replica_nginx.Nginx]]:
    if replica_nginx.nginx_executable() is None:
        missing("nginx", "apt-get install nginx; .ci/run installs it")
    folder = tmp_path_factory.mktemp("replicas")
    flags = ["--model-control-mode=poll", f"--repository-poll-secs={POLL_SECS}"]
    replicas = replica_harness.start_replicas(REPLICAS, shared.location, *flags,
                                              folder=folder / "replicas", env=shared.env,
                                              model=MODEL, replica_flags=shared.replica_flags)
    nginx = None
    try:
        nginx = replica_nginx.start_nginx(folder / "nginx", replicas)
        yield replicas, nginx
    finally:
        if nginx is not None:
            nginx.stop()
        codes = {replica.index: replica.stop() for replica in replicas
                 if replica.process.poll() is None}
        unclean = {index: code for index, code in codes.items() if code != 0}
        assert not unclean, f"replicas exited uncleanly: {unclean}\n" + "\n".join(
            replicas[index].log_tail() for index in unclean)


def wait_for(condition: Callable[[], bool], what: str, explain: Callable[[], str]) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{explain()}"
        time.sleep(0.1)


def successes(replica: replica_harness.Replica) -> int:
    """The replica's own count of successful ``simple`` inferences (its statistics)."""
    client = httpclient.InferenceServerClient(replica.http_url)
    try:
        stats = client.get_inference_statistics(MODEL)["model_stats"]
        return sum(int(entry["inference_stats"]["success"]["count"]) for entry in stats)
    finally:
        client.close()


def max_batch_size(replica: replica_harness.Replica) -> int:
    client = httpclient.InferenceServerClient(replica.http_url)
    try:
        return int(client.get_model_config(MODEL).get("max_batch_size", 0))
    finally:
        client.close()


def steady_load(nginx: replica_nginx.Nginx) -> SteadyLoad:
    return SteadyLoad(nginx.http_url, nginx.grpc_url, model=MODEL,
                                      http_workers=HTTP_WORKERS, grpc_workers=GRPC_WORKERS)


def wait_running(load: SteadyLoad) -> None:
    wait_for(lambda: min(load.counts().successes[p] for p in ("http", "grpc")) >= SETTLE_SUCCESSES
             or bool(load.counts().failures),
             "the load to run through nginx", lambda: load.counts().summary())
    assert not load.counts().failures, load.counts().summary()


def test_a_config_change_reaches_every_replica_with_no_failed_request(
    cluster: tuple[list[replica_harness.Replica], replica_nginx.Nginx],
    shared: SharedRepository,
) -> None:
    replicas, nginx = cluster
    assert [max_batch_size(replica) for replica in replicas] == [8] * REPLICAS
    config = (EXAMPLE_REPOSITORY / MODEL / "config.pbtxt").read_text()
    assert "max_batch_size: 8" in config
    with steady_load(nginx) as load:
        wait_running(load)
        shared.write(f"{MODEL}/config.pbtxt",
                     config.replace("max_batch_size: 8", "max_batch_size: 4").encode())
        # Each replica, asked on its own port, reloads the model from the shared repository.
        wait_for(lambda: all(max_batch_size(replica) == 4 for replica in replicas),
                 "every replica to pick up max_batch_size 4",
                 lambda: "\n".join(f"replica {r.index}: {max_batch_size(r)}\n{r.log_tail()}"
                                   for r in replicas))
        # ... and keeps serving the load nginx spreads over all three after its reload.
        after_reload = [successes(replica) for replica in replicas]
        wait_for(lambda: all(successes(r) > after_reload[r.index] for r in replicas),
                 "every replica to serve after its reload",
                 lambda: f"{after_reload} -> {[successes(r) for r in replicas]}")
        counts = load.stop()
    print(f"\nconfig change under load through nginx: {counts.summary()}")
    assert not counts.failures, counts.summary()
    assert min(counts.successes["http"], counts.successes["grpc"]) >= SETTLE_SUCCESSES
    grpc = grpcclient.InferenceServerClient(nginx.grpc_url)
    assert grpc.get_model_config(MODEL, as_json=True)["config"]["max_batch_size"] == 4
    grpc.close()


def test_a_killed_replica_costs_at_most_its_in_flight_requests(
    cluster: tuple[list[replica_harness.Replica], replica_nginx.Nginx],
) -> None:
    replicas, nginx = cluster
    victim, survivors = replicas[0], replicas[1:]
    with steady_load(nginx) as load:
        wait_running(load)
        before = [successes(replica) for replica in survivors]
        # The mark comes first: a request the kill breaks may be counted before kill() returns.
        at_kill = load.counts()
        victim.kill()
        assert victim.process.poll() is not None
        # The other two carry on: through nginx, and each by its own count.
        wait_for(lambda: load.since(at_kill).total_successes >= 4 * SETTLE_SUCCESSES
                 and all(successes(r) > n for r, n in zip(survivors, before, strict=True)),
                 "the load to continue on the two other replicas",
                 lambda: load.since(at_kill).summary())
        counts = load.stop()
    failed_after_kill = len(counts.failures) - len(at_kill.failures)
    print(f"\nSIGKILL of one replica of {REPLICAS} under load (concurrency {load.concurrency}) "
          f"through nginx: {failed_after_kill} failed after the kill; {counts.summary()}")
    assert len(at_kill.failures) == 0, at_kill.summary()
    # Only requests in flight on the victim may fail, so at most one per client thread.
    # nginx retries the HTTP ones on the next replica (proxy_next_upstream error ...
    # non_idempotent, the body is buffered); a gRPC request whose body nginx already streamed
    # to the victim cannot be retried, so 0 to GRPC_WORKERS gRPC failures are expected.
    assert failed_after_kill <= load.concurrency, counts.summary()
    assert not [f for f in counts.failures if f.protocol == "http"], counts.summary()
    assert min(counts.successes["http"] - at_kill.successes["http"],
               counts.successes["grpc"] - at_kill.successes["grpc"]) > 0, counts.summary()

