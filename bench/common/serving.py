"""Starting and stopping ``inferd serve`` for the bench scripts.

The ports, the ``inferd serve`` command line, the launch (its own process group, stdout and
stderr into a log file) and the stop (SIGTERM, a bounded wait, then SIGKILL for the group)
are ``inferd.kernel.sdk.testing``'s, the launcher the tests use too. This module adds what
benchmarks need on top: another interpreter's inferd (an earlier checkout's, to compare),
any other server's command (the peers), a bounded wait until a model is ready (through the
gRPC, HTTP or native zmq client, or any predicate), and a start again on other ports when
one was taken. It measures nothing and prints nothing; the scripts import it as
``bench.common.serving``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inferd.kernel.sdk import testing
from inferd.kernel.sdk.testing import free_port

PROTOCOLS = ("http", "grpc", "zmq", "metrics")
START_TIMEOUT_SECS = 120.0  # a loaded machine may take a while to import onnxruntime
STOP_TIMEOUT_SECS = 60.0
POLL_SECS = 0.2
LOG_TAIL_CHARACTERS = 3000


@dataclass(frozen=True)
class Server:
    """A started ``inferd serve``: its process, the port of each protocol, and its log."""

    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    log: Path
    name: str = "inferd serve"  # how errors name it: the peers' benches start others too

    def address(self, protocol: str) -> str:
        """``host:port`` of a frontend, as tritonclient and perf_analyzer take it."""
        return f"127.0.0.1:{self.ports[protocol]}"

    @property
    def zmq_url(self) -> str:
        """The native client's URL."""
        return f"tcp://{self.address('zmq')}"

    def log_tail(self, characters: int = LOG_TAIL_CHARACTERS) -> str:
        return self.log.read_text(errors="replace")[-characters:]


def launcher(python: str = "") -> list[str]:
    """The venv's ``inferd`` script, or the module it runs when there is no script; with
    ``python``, that interpreter's inferd (another checkout's venv, say, whose tree may
    predate today's module names: its own script knows where its entry point is)."""
    interpreter = python or sys.executable
    script = Path(interpreter).parent / "inferd"
    return [str(script)] if script.exists() else [interpreter, "-m", "inferd.kernel.cli.main"]


def start(
    repository: Path, *flags: str, log: Path, cwd: Path | None = None,
    prefix: Sequence[str] = (), python: str = "",
) -> Server:
    """``inferd serve`` on ``repository`` with ``flags``, every protocol on a free 127.0.0.1
    port, stdout and stderr into ``log``. Returns at once, without waiting for readiness.
    ``prefix`` goes before the command (``taskset -c 1``, say); ``python`` picks another
    interpreter's inferd (``launcher``)."""
    ports = {protocol: free_port() for protocol in PROTOCOLS}
    command = testing.serve_command(repository, ports, *flags,
                                    launcher=[*prefix, *launcher(python)])
    return start_process(command, ports, log=log, cwd=cwd)


def start_process(
    command: Sequence[str], ports: dict[str, int], *, log: Path, cwd: Path | None = None,
    environment: dict[str, str] | None = None, name: str = "inferd serve",
) -> Server:
    """Any server's ``command``, already told to listen on ``ports``, with stdout and stderr
    into ``log``. Returns at once, without waiting for readiness."""
    started = testing.launch(command, ports, log, env=environment, cwd=cwd)
    return Server(started.process, ports, log, name)


def wait_ready(
    server: Server, ready: Callable[[], bool], *, timeout: float = START_TIMEOUT_SECS
) -> None:
    """Poll ``ready`` until it says yes; fail with the log's tail if the server exits first
    or ``timeout`` seconds pass. ``ready`` answers no (rather than raising) while the server
    is not listening yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with code {server.process.returncode} "
                               f"during start-up:\n{server.log_tail()}")
        if ready():
            return
        time.sleep(POLL_SECS)
    raise TimeoutError(f"{server.name} was not ready within {timeout:g} s:\n{server.log_tail()}")


def wait_model_ready(
    server: Server, model: str, *, via: str, timeout: float = START_TIMEOUT_SECS
) -> None:
    """``wait_ready`` asking whether ``model`` is ready over ``via``: grpc, http or zmq."""
    if via == "grpc":
        import tritonclient.grpc as grpcclient

        with grpcclient.InferenceServerClient(server.address("grpc")) as client:

            def grpc_ready() -> bool:
                try:
                    return bool(client.is_model_ready(model))
                except Exception:  # noqa: BLE001 - not listening yet
                    return False

            wait_ready(server, grpc_ready, timeout=timeout)
    elif via == "http":
        url = f"http://{server.address('http')}/v2/models/{model}/ready"

        def http_ready() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    return bool(response.status == 200)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False

        wait_ready(server, http_ready, timeout=timeout)
    elif via == "zmq":
        from inferd.protocols.client import Client
        from inferd.protocols.errors import InferdError

        with Client(server.zmq_url, timeout=1.0) as native:

            def zmq_ready() -> bool:
                try:
                    return native.is_model_ready(model)
                except InferdError:  # not listening yet: the request timed out
                    return False

            wait_ready(server, zmq_ready, timeout=timeout)
    else:
        raise ValueError(f"no client for {via!r}: grpc, http or zmq")


def stop_process(process: subprocess.Popen[bytes], *, grace: float = STOP_TIMEOUT_SECS) -> None:
    """SIGTERM, then SIGKILL (for its whole process group) if it has not exited within
    ``grace`` seconds."""
    testing.stop(process, grace)


@contextmanager
def running(
    repository: Path, *flags: str, log: Path, model: str, via: str, cwd: Path | None = None,
    timeout: float = START_TIMEOUT_SECS, grace: float = STOP_TIMEOUT_SECS,
    prefix: Sequence[str] = (), python: str = "",
) -> Iterator[Server]:
    """A server started as ``start`` does, once ``model`` is ready over ``via`` (started
    again on other ports when one was taken); stopped on the way out, however the block
    ends."""
    for attempt in range(1, testing.START_ATTEMPTS + 1):
        server = start(repository, *flags, log=log, cwd=cwd, prefix=prefix, python=python)
        try:
            wait_model_ready(server, model, via=via, timeout=timeout)
            break
        except RuntimeError:
            stop_process(server.process, grace=grace)
            if attempt == testing.START_ATTEMPTS or not testing.port_taken(server.log_tail()):
                raise
        except BaseException:
            stop_process(server.process, grace=grace)
            raise
    try:
        yield server
    finally:
        stop_process(server.process, grace=grace)


@contextmanager
def temporary_folder(prefix: str) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)

