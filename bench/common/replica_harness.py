"""Many inferd replicas on one machine behind a real nginx, for the replica test and bench.

This module owns what ``tests/e2e/test_replicas.py`` and ``bench/performance/replicas.py`` share:
starting N ``inferd serve`` replicas on free loopback ports over ONE repository (a local path
or a URL such as ``s3://host:port/bucket/prefix``, plus the environment variables the servers
need to read it), writing an nginx configuration that balances HTTP and gRPC over them,
running Debian's nginx in the foreground as an ordinary child process (every file it writes
inside one temporary folder), and a steady closed-loop load of tritonclient HTTP and gRPC
requests that counts successes and failures with their messages.

It raises ``RuntimeError``/``TimeoutError`` (with the process's log) rather than calling
pytest, so the bench can use it too; the test turns a missing nginx into a skip (or, under
CI, a failure). Both import it as ``bench.common.replica_harness``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferd.kernel.sdk import testing
from inferd.kernel.sdk.testing import free_port

START_TIMEOUT_SECS = 90.0  # three replicas importing onnxruntime at once on 2 cores
NGINX_START_TIMEOUT_SECS = 15.0
STOP_TIMEOUT_SECS = 20.0
POLL_SECS = 0.1
LOG_TAIL_CHARACTERS = 4000
REQUEST_TIMEOUT_SECS = 20.0  # one inference through nginx; past it the request failed
HEALTH_PATH = "/nginx-health"  # answered by nginx itself: it is up, whatever the replicas do

def launcher() -> list[str]:
    """The running interpreter's ``inferd`` (the module, so any venv works)."""
    return [sys.executable, *testing.INFERD_MODULE]


def log_tail(path: Path, characters: int = LOG_TAIL_CHARACTERS) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-characters:]
    except OSError:
        return "(no log)"


def wait_until(
    ready: Callable[[], bool], *, timeout: float, process: subprocess.Popen[bytes],
    what: str, log: Path,
) -> None:
    """Poll ``ready`` until it says yes; raise with the log's tail when ``process`` exits
    first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} during start-up:"
                               f"\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} was not ready within {timeout:g} s:\n{log_tail(log)}")
        time.sleep(POLL_SECS)


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def stop_group(process: subprocess.Popen[bytes], *, grace: float = STOP_TIMEOUT_SECS) -> int | None:
    """SIGTERM the process, SIGKILL its whole group (it leads one) after ``grace`` seconds or
    once it has exited (so no executor is left behind). Returns its exit code."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    code = process.poll()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
    return code


# ------------------------------------------------------------------------------ replicas


@dataclass
class Replica:
    """One ``inferd serve`` process (the leader of its own process group) and its ports."""

    index: int
    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    log: Path

    @property
    def http_url(self) -> str:
        """``host:port`` of its KServe HTTP frontend, as tritonclient.http takes it."""
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def log_tail(self) -> str:
        return log_tail(self.log)

    def ready(self, model: str | None) -> bool:
        path = f"/v2/models/{model}/ready" if model else "/v2/health/ready"
        return http_ok(f"http://{self.http_url}{path}") and port_open(self.ports["grpc"])

    def kill(self) -> None:
        """SIGKILL the server and its executors at once: a crash, not a shutdown."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> int | None:
        return stop_group(self.process)


def port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def launch_replica(
    index: int, repository: str | Path, flags: Sequence[str], *, folder: Path,
    env: Mapping[str, str] | None = None, prefix: Sequence[str] = (),
) -> Replica:
    """``inferd serve`` over ``repository`` with every protocol on a free 127.0.0.1 port,
    its output into ``folder/replica-<index>.log``; returns at once."""
    ports = {protocol: free_port() for protocol in ("http", "grpc", "metrics", "zmq")}
    if isinstance(repository, Path):
        repository = repository.resolve()  # the replica runs in its own folder
    command = testing.serve_command(repository, ports, *flags,
                                    launcher=[*prefix, *launcher()])
    folder.mkdir(parents=True, exist_ok=True)
    started = testing.launch(command, ports, folder / f"replica-{index}.log",
                             env={**os.environ, **(env or {})}, cwd=folder)
    return Replica(index, started.process, ports, started.log_path)


def start_replicas(
    count: int, repository: str | Path, *flags: str, folder: Path,
    env: Mapping[str, str] | None = None, model: str | None = None,
    timeout: float = START_TIMEOUT_SECS, prefix: Sequence[str] = (),
    replica_flags: Callable[[int], Sequence[str]] | None = None,
) -> list[Replica]:
    """``count`` replicas over the same ``repository``, started together (their start-ups
    overlap), returned once each answers ready on HTTP (``model`` ready when given) and
    listens on gRPC. ``replica_flags(index)`` adds flags of one replica's own (a cache
    folder, say). On failure every replica started is stopped before raising."""
    replicas = [launch_replica(index, repository,
                               [*flags, *(replica_flags(index) if replica_flags else ())],
                               folder=folder, env=env, prefix=prefix)
                for index in range(count)]
    try:
        for replica in replicas:
            wait_until(lambda replica=replica: replica.ready(model),  # type: ignore[misc]
                       timeout=timeout, process=replica.process,
                       what=f"inferd replica {replica.index}", log=replica.log)
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas


# ------------------------------------------------------------------------------ nginx


def nginx_executable() -> str | None:
    """Debian's nginx (``/usr/sbin`` is not on every PATH)."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def nginx_config(
    folder: Path, *, http_port: int, grpc_port: int, http_upstreams: Sequence[str],
    grpc_upstreams: Sequence[str], workers: int = 1, statistics_from: int | None = None,
) -> str:
    """An nginx.conf whose every path lies in ``folder``: one HTTP/1.1 listener proxying to
    the replicas' HTTP ports and one cleartext HTTP/2 listener passing gRPC to their gRPC
    ports, each upstream with keepalive connections, round robin. ``statistics_from`` sends
    the statistics endpoints to that one replica (perf_analyzer compares the counts it reads
    before and after each window; read from different replicas they would go backwards)."""
    user = pwd.getpwuid(os.getuid()).pw_name
    http_servers = "\n".join(f"        server {address} max_fails=1 fail_timeout=2s;"
                             for address in http_upstreams)
    grpc_servers = "\n".join(f"        server {address} max_fails=1 fail_timeout=2s;"
                             for address in grpc_upstreams)
    http_statistics = grpc_statistics = ""
    if statistics_from is not None:
        http_statistics = f"""
        location ~ ^/v2/models/[^/]+(/versions/[^/]+)?/stats$ {{
            proxy_pass http://{http_upstreams[statistics_from]};
        }}"""
        grpc_statistics = f"""
        location = /inference.GRPCInferenceService/ModelStatistics {{
            grpc_pass grpc://{grpc_upstreams[statistics_from]};
        }}"""
    # nginx's gRPC proxy streams a request's body to the upstream unbuffered
    # (ngx_http_grpc_handler sets request_body_no_buffering), so a gRPC request whose
    # replica dies after the body went out cannot be retried: its client sees UNAVAILABLE
    # ("Received http2 header with status: 502"). HTTP request bodies are buffered and are
    # retried. (Making nginx read a gRPC body whole first, with a mirror subrequest, let
    # such requests be retried, but some retries then hung until the client's deadline: a
    # fast UNAVAILABLE a client can retry is the better failure.)
    # gRPC also retries on invalid_header: a retry on a surviving replica's keepalive
    # connection was seen to read a stray frame of that connection's previous stream
    # ("upstream sent frame for unknown stream"), which nginx counts as an invalid header;
    # the request then simply goes to the next replica.
    # Retrying an inference on the next replica is safe here: nginx retries a request that
    # never reached a replica (connection refused: the replica is down), one a replica
    # refused (502/503: not ready, shutting down), or one whose replica died before
    # answering (connection reset while nginx waited for the response header); the models
    # served are stateless (no sequence batching), so running a request twice gives the
    # same answer and changes nothing. "non_idempotent" is needed because inference is a
    # POST (gRPC: always POST), which nginx otherwise never retries.
    return f"""# Generated by bench/common/replica_harness.py; every path is inside {folder}.
worker_processes {workers};
user {user};
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {folder}/client_body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    client_max_body_size 64m;
    client_body_buffer_size 1m;  # HTTP bodies (buffered for retries) in memory up to 1 MiB
    keepalive_requests 1000000;

    upstream inferd_http {{
{http_servers}
        keepalive 64;
    }}
    upstream inferd_grpc {{
{grpc_servers}
        keepalive 64;
    }}

    server {{
        listen 127.0.0.1:{http_port};
        location = {HEALTH_PATH} {{ return 200 "nginx\\n"; }}
        location / {{
            proxy_pass http://inferd_http;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 2s;
            proxy_read_timeout 60s;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 0;
        }}{http_statistics}
    }}

    server {{
        listen 127.0.0.1:{grpc_port} http2;
        location / {{
            grpc_pass grpc://inferd_grpc;
            grpc_connect_timeout 2s;
            grpc_read_timeout 60s;
            grpc_next_upstream error timeout invalid_header http_502 http_503 non_idempotent;
            grpc_next_upstream_tries 0;
        }}{grpc_statistics}
    }}
}}
"""


@dataclass
class Nginx:
    """A foreground nginx master (and its workers) with its ports and folder."""

    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    folder: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def address(self, protocol: str) -> str:
        return {"http": self.http_url, "grpc": self.grpc_url}[protocol]

    @property
    def error_log(self) -> Path:
        return self.folder / "error.log"

    def log_tail(self) -> str:
        return log_tail(self.folder / "nginx.out") + "\n" + log_tail(self.error_log)

    def stop(self) -> None:
        # SIGTERM is nginx's fast shutdown; the group kill catches a worker left behind.
        stop_group(self.process, grace=10)


def start_nginx(
    folder: Path, replicas: Sequence[Replica], *, workers: int = 1,
    statistics_from: int | None = None, timeout: float = NGINX_START_TIMEOUT_SECS,
) -> Nginx:
    """nginx in the foreground (``daemon off``) on two free ports, balancing over
    ``replicas`` (``nginx_config`` says how); returned once it answers its own health
    location on HTTP and accepts connections on the gRPC port."""
    executable = nginx_executable()
    if executable is None:
        raise FileNotFoundError("nginx is not installed (apt-get install nginx)")
    folder.mkdir(parents=True, exist_ok=True)
    for temporary in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (folder / temporary).mkdir(exist_ok=True)
    http_port, grpc_port = free_port(), free_port()
    config = folder / "nginx.conf"
    config.write_text(nginx_config(
        folder, http_port=http_port, grpc_port=grpc_port,
        http_upstreams=[replica.http_url for replica in replicas],
        grpc_upstreams=[replica.grpc_url for replica in replicas],
        workers=workers, statistics_from=statistics_from), encoding="utf-8")
    output = folder / "nginx.out"
    with output.open("wb") as log:
        # -e (nginx >= 1.19.5) keeps the start-up's own error log out of /var/log/nginx.
        process = subprocess.Popen(
            [executable, "-e", str(folder / "error.log"), "-p", str(folder), "-c", str(config),
             "-g", "daemon off;"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    nginx = Nginx(process, http_port, grpc_port, folder)
    try:
        wait_until(lambda: http_ok(f"http://{nginx.http_url}{HEALTH_PATH}")
                   and port_open(grpc_port), timeout=timeout, process=process, what="nginx",
                   log=output)
    except BaseException as error:
        nginx.stop()
        raise RuntimeError(f"{error}\n{log_tail(nginx.error_log)}") from error
    return nginx


# ------------------------------------------------------------------------------ load


def simple_inputs() -> dict[str, np.ndarray]:
    """``simple``'s two INT32 [1, 16] inputs."""
    row = np.arange(16, dtype=np.int32).reshape(1, 16)
    return {"INPUT0": row, "INPUT1": np.ones_like(row)}


@dataclass
class Failure:
    at: float  # time.monotonic() when it failed
    protocol: str
    message: str


@dataclass
class LoadCounts:
    successes: Counter[str] = field(default_factory=Counter)  # per protocol
    failures: list[Failure] = field(default_factory=list)

    @property
    def total_successes(self) -> int:
        return sum(self.successes.values())

    def summary(self) -> str:
        kinds = Counter(f"{f.protocol}: {f.message[:200]}" for f in self.failures)
        lines = [f"{dict(self.successes)} succeeded, {len(self.failures)} failed"]
        lines += [f"  {n} x {kind}" for kind, n in kinds.most_common()]
        return "\n".join(lines)


class SteadyLoad:
    """A closed loop of ``http_workers`` tritonclient HTTP and ``grpc_workers`` tritonclient
    gRPC threads, each with its own client, each sending ``simple`` inferences back to back
    to ``http_url``/``grpc_url`` and checking the sums. ``counts()`` and ``since(mark)``
    read the tallies while it runs."""

    def __init__(self, http_url: str, grpc_url: str, *, model: str = "simple",
                 http_workers: int = 1, grpc_workers: int = 1) -> None:
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.model = model
        self.concurrency = http_workers + grpc_workers
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._counts = LoadCounts()
        self._threads = [threading.Thread(target=self._run, args=(protocol,), daemon=True,
                                          name=f"load-{protocol}-{i}")
                         for protocol, workers in (("http", http_workers),
                                                   ("grpc", grpc_workers))
                         for i in range(workers)]

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> LoadCounts:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT_SECS + 5)
        return self.counts()

    def counts(self) -> LoadCounts:
        with self._lock:
            return LoadCounts(Counter(self._counts.successes), list(self._counts.failures))

    def since(self, mark: LoadCounts) -> LoadCounts:
        now = self.counts()
        return LoadCounts(now.successes - mark.successes, now.failures[len(mark.failures):])

    def _record(self, protocol: str, error: str | None) -> None:
        with self._lock:
            if error is None:
                self._counts.successes[protocol] += 1
            else:
                self._counts.failures.append(Failure(time.monotonic(), protocol, error))

    def _run(self, protocol: str) -> None:
        infer = self._http_infer() if protocol == "http" else self._grpc_infer()
        expected = simple_inputs()["INPUT0"] + simple_inputs()["INPUT1"]
        while not self._stop.is_set():
            try:
                sums = infer()
                error = None if np.array_equal(sums, expected) else f"wrong sums {sums}"
            except Exception as failure:  # noqa: BLE001 - every failure is counted and kept
                error = f"{type(failure).__name__}: {failure}"
            self._record(protocol, error)

    def _http_infer(self) -> Callable[[], np.ndarray]:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(
            self.http_url, connection_timeout=REQUEST_TIMEOUT_SECS,
            network_timeout=REQUEST_TIMEOUT_SECS)
        inputs = []
        for name, value in simple_inputs().items():
            tensor = httpclient.InferInput(name, list(value.shape), "INT32")
            tensor.set_data_from_numpy(value, binary_data=True)
            inputs.append(tensor)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]

        def infer() -> np.ndarray:
            result = client.infer(self.model, inputs, outputs=outputs)
            return result.as_numpy("OUTPUT0")  # type: ignore[no-any-return]

        return infer

    def _grpc_infer(self) -> Callable[[], np.ndarray]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc_url)
        inputs = []
        for name, value in simple_inputs().items():
            tensor = grpcclient.InferInput(name, list(value.shape), "INT32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]

        def infer() -> np.ndarray:
            result = client.infer(self.model, inputs, outputs=outputs,
                                  client_timeout=REQUEST_TIMEOUT_SECS)
            return result.as_numpy("OUTPUT0")  # type: ignore[no-any-return]

        return infer


@contextlib.contextmanager
def replicas_behind_nginx(
    count: int, repository: str | Path, *flags: str, folder: Path,
    env: Mapping[str, str] | None = None, model: str | None = None, workers: int = 1,
    statistics_from: int | None = None,
) -> Iterator[tuple[list[Replica], Nginx]]:
    """``count`` replicas and an nginx in front of them, all stopped on the way out."""
    replicas = start_replicas(count, repository, *flags, folder=folder / "replicas", env=env,
                              model=model)
    try:
        nginx = start_nginx(folder / "nginx", replicas, workers=workers,
                            statistics_from=statistics_from)
        try:
            yield replicas, nginx
        finally:
            nginx.stop()
    finally:
        for replica in replicas:
            replica.stop()
