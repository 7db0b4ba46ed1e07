"""Starting and stopping ``inferd serve`` for the bench scripts.

This module owns what every bench that needs a real server repeats: free loopback ports, the
``inferd serve`` command line with every protocol on one of them (or any other server's command,
for the peers), the server's log file, a bounded wait until a model is ready (through the
gRPC, HTTP or native zmq client, or any predicate), and the stop: SIGTERM, a bounded wait,
then SIGKILL. It measures nothing and prints nothing; the scripts (run as
``python bench/X.py``, so this folder is on ``sys.path``) import it as ``serving``.
"""

from __future__ import annotations

import shutil
import signal
import socket
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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
    command = [*launcher(python), "serve", "--model-repository", str(repository)]
    for protocol, port in ports.items():
        command += [f"--{protocol}-address=127.0.0.1", f"--{protocol}-port={port}"]
    command += flags
    return start_process([*prefix, *command], ports, log=log, cwd=cwd)


def start_process(
    command: Sequence[str], ports: dict[str, int], *, log: Path, cwd: Path | None = None,
    environment: dict[str, str] | None = None, name: str = "inferd serve",
) -> Server:
    """Any server's ``command``, already told to listen on ``ports``, with stdout and stderr
    into ``log``. Returns at once, without waiting for readiness."""
    with log.open("wb") as output:
        process = subprocess.Popen(list(command), cwd=cwd, env=environment,
                                   stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT)
    return Server(process, ports, log, name)


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
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@contextmanager
def running(
    repository: Path, *flags: str, log: Path, model: str, via: str, cwd: Path | None = None,
    timeout: float = START_TIMEOUT_SECS, grace: float = STOP_TIMEOUT_SECS,
    prefix: Sequence[str] = (), python: str = "",
) -> Iterator[Server]:
    """A server started as ``start`` does, once ``model`` is ready over ``via``; stopped on
    the way out, however the block ends."""
    server = start(repository, *flags, log=log, cwd=cwd, prefix=prefix, python=python)
    try:
        wait_model_ready(server, model, via=via, timeout=timeout)
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

