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

It is also the one way inferd's own tests (tests/e2e/inferd_harness.py) and benchmarks
(bench/common/serving.py) start a server: they add their own waits and failure reports on top
of ``free_port``, ``serve_command``, ``launch``, ``wait_until_serving`` and ``stop``.
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunningServer", "ServerFailed", "serve",
           "free_port", "launch", "port_taken", "serve_command", "stop", "wait_until_serving"]

SERVING_LINE = "inferd is serving ("  # the supervisor logs it once every frontend listens
PROTOCOLS = ("http", "grpc", "metrics", "zmq")
PORT_TAKEN = "address already in use"  # a free port taken meanwhile: start again
START_ATTEMPTS = 3
# -P as the ``inferd`` script runs: the working directory not on sys.path, so a folder named
# like an installed package there cannot shadow it in the server or its executors.
INFERD_MODULE = ("-P", "-m", "inferd.kernel.cli.main")
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
            ports = {protocol: free_port() for protocol in PROTOCOLS}
            server = launch(serve_command(Path(repository), ports, *flags), ports,
                            Path(folder) / f"{attempt}.log", env={**os.environ, **(env or {})})
            try:
                if wait_until_serving(server, timeout):
                    break
            except BaseException:
                stop(server.process)
                raise
        else:
            raise ServerFailed(f"inferd found a port taken at each of {START_ATTEMPTS} starts")
        try:
            yield server
        finally:
            stop(server.process)


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on now, never one this process handed out before: the
    kernel may offer a just-released port again, and two frontends of one server (or two
    servers) would then collide."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def serve_command(repository: str | Path | None, ports: Mapping[str, int], *flags: str,
                  launcher: Sequence[str] = (sys.executable, *INFERD_MODULE)) -> list[str]:
    """``inferd serve`` with each frontend of ``ports`` on 127.0.0.1 (one ``--X-address`` and
    ``--X-port`` per protocol, which every inferd release takes), ``flags`` last.
    ``launcher`` runs inferd: this interpreter's by default, another venv's ``inferd`` script
    for a benchmark comparing releases."""
    command = [*launcher, "serve"]
    for protocol, port in ports.items():
        command += [f"--{protocol}-address=127.0.0.1", f"--{protocol}-port={port}"]
    if repository is not None:
        command += ["--model-repository", str(repository)]
    return [*command, *flags]


def launch(command: Sequence[str], ports: Mapping[str, int], log_path: Path, *,
           env: Mapping[str, str] | None = None, cwd: Path | None = None) -> RunningServer:
    """Start ``command`` (a server told to listen on ``ports``) in a process group of its own,
    stdout and stderr into ``log_path``, ``env`` as its whole environment (this process's
    when None). Returns at once."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=cwd, env=dict(env) if env is not None else None)
    return RunningServer(process, dict(ports), log_path)


def port_taken(log: str) -> bool:
    """Whether a server that exited did so only because a port it was given was taken: free
    when chosen, not when bound (an outgoing connection may take it meanwhile)."""
    return PORT_TAKEN in log and "cannot start" in log


def wait_until_serving(server: RunningServer, timeout: float) -> bool:
    """True once the server serves; False when it exited only because a port was taken
    (start it again on other ports); ``ServerFailed`` with its log otherwise."""
    deadline = time.monotonic() + timeout
    while SERVING_LINE not in server.log():
        code = server.process.poll()
        if code is not None:
            log = server.log()
            if port_taken(log):
                return False
            raise ServerFailed(f"inferd exited with code {code} during start-up; its log:\n{log}")
        if time.monotonic() > deadline:
            raise ServerFailed(f"inferd was not serving within {timeout} s; its log:\n"
                               f"{server.log()}")
        time.sleep(POLL_SECS)
    return True


def stop(process: subprocess.Popen[bytes], grace: float = STOP_SECS) -> int:
    """SIGTERM (the server drains and unloads), up to ``grace`` seconds to exit, then SIGKILL
    for its whole process group (an executor left behind too). Returns the exit code."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.wait()
