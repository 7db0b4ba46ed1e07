"""A real server for a plugin's own tests: ``serve(repository)``.

A plugin author tests their backend the way inferd tests its own: ``inferd serve`` started
as a separate process on free ports of 127.0.0.1, talked to with the real clients, stopped
at the end::

    from inferd.kernel.sdk.testing import serve

    def test_reverse(tmp_path):
        ...  # write tmp_path/<model>/config.pbtxt and tmp_path/<model>/1/
        with serve(tmp_path) as server:
            client = tritonclient.http.InferenceServerClient(server.http_url)
            ...

``serve`` returns once every frontend listens (the server logs "inferd is serving (" then),
and fails with the server's log when it exits or is not serving within ``timeout``. It
imports only the standard library, so importing it starts nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunningServer", "ServerFailed", "serve"]

SERVING_LINE = "inferd is serving ("  # the supervisor logs it once every frontend listens
PROTOCOLS = ("http", "grpc", "metrics", "zmq")
PORT_TAKEN = "address already in use"  # a free port taken meanwhile: start again
START_ATTEMPTS = 3
POLL_SECS = 0.05
STOP_SECS = 30.0


class ServerFailed(RuntimeError):
    """The server exited during start-up or was not serving in time; the message holds its
    log."""


@dataclass(frozen=True)
class RunningServer:
    """A started server: where each frontend listens, its process and its log file."""

    process: subprocess.Popen[bytes]
    ports: Mapping[str, int]
    log_path: Path

    @property
    def http_url(self) -> str:
        """``host:port`` as tritonclient.http takes it."""
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` as tritonclient.grpc takes it."""
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics']}/metrics"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def serve(repository: str | Path, *flags: str, env: Mapping[str, str] | None = None,
          timeout: float = 120.0) -> Iterator[RunningServer]:
    """``inferd serve --model-repository repository *flags`` (``env`` added to this
    process's environment) for the duration of the ``with`` block."""
    with tempfile.TemporaryDirectory(prefix="inferd-test-") as folder:
        for attempt in range(START_ATTEMPTS):
            server = _launch(Path(repository), flags, env or {}, Path(folder) / f"{attempt}.log")
            try:
                if _wait_until_serving(server, timeout):
                    break
            except BaseException:
                _stop(server.process)
                raise
        else:
            raise ServerFailed(f"inferd found a port taken at each of {START_ATTEMPTS} starts")
        try:
            yield server
        finally:
            _stop(server.process)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _launch(repository: Path, flags: tuple[str, ...], env: Mapping[str, str],
            log_path: Path) -> RunningServer:
    ports = {protocol: _free_port() for protocol in PROTOCOLS}
    command = [sys.executable, "-P", "-m", "inferd.kernel.cli.main", "serve",
               "--model-repository", str(repository), "--address", "127.0.0.1",
               *(f"--{protocol}-port={port}" for protocol, port in ports.items()), *flags]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, **env})
    return RunningServer(process, ports, log_path)


def _wait_until_serving(server: RunningServer, timeout: float) -> bool:
    """True once the server serves; False when it exited only because a port was taken."""
    deadline = time.monotonic() + timeout
    while SERVING_LINE not in server.log():
        code = server.process.poll()
        if code is not None:
            log = server.log()
            if PORT_TAKEN in log and "cannot start" in log:
                return False
            raise ServerFailed(f"inferd exited with code {code} during start-up; its log:\n{log}")
        if time.monotonic() > deadline:
            raise ServerFailed(f"inferd was not serving within {timeout} s; its log:\n"
                               f"{server.log()}")
        time.sleep(POLL_SECS)
    return True


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server drains and unloads), then SIGKILL for its whole process group."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_SECS)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
