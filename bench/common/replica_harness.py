"""Many inferd replicas on one machine, for the replica test and bench.

This module owns what ``tests/e2e/test_replicas.py`` and ``bench/performance/replicas.py`` share
about the servers: starting N ``inferd serve`` replicas on free loopback ports over ONE
repository (a local path or a URL such as ``s3://host:port/bucket/prefix``, plus the
environment variables the servers need to read it), each the leader of its own process group,
waiting until each is ready, and stopping or killing them. The nginx in front of them is
``replica_nginx``'s, the clients' load ``steady_load``'s.

It raises ``RuntimeError``/``TimeoutError`` (with the process's log) rather than calling
pytest, so the bench can use it too; the test turns a missing nginx into a skip (or, under
CI, a failure). Both import it as ``bench.common.replica_harness``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.kernel.sdk import testing
from inferd.kernel.sdk.testing import free_port

START_TIMEOUT_SECS = 90.0  # three replicas importing onnxruntime at once on 2 cores
STOP_TIMEOUT_SECS = 20.0
POLL_SECS = 0.1
LOG_TAIL_CHARACTERS = 4000


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


@dataclass(frozen=True)
class Replica(testing.RunningServer):
    """One ``inferd serve`` process (the leader of its own process group), its ports and log:
    the shared harness's ``RunningServer`` (``http_url``, ``grpc_url``, ``metrics_url``) and
    its index among the replicas."""

    index: int

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def log_tail(self) -> str:
        return log_tail(self.log_path)

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
    return Replica(started.process, ports, started.log_path, index)


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
                       what=f"inferd replica {replica.index}", log=replica.log_path)
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas


