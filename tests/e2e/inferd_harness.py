"""The end-to-end harness: real ``inferd serve`` processes on free ports, and model
repositories built under a temporary folder from copies of the example one (and of other
model folders, such as the python models in tests/plugins/python_models). A plain module, so
tests import its types and helpers (``from tests.e2e.inferd_harness import ...``); the
fixtures handing out an ``InferdHarness`` are in tests/e2e/conftest.py. Ports, the command,
the wait on "inferd is serving (" and the start again when a port was taken are
``inferd.kernel.sdk.testing``'s, the launcher plugin authors and bench/ use too; this module
adds what the suite wants on top (pytest failures with the log, teardown checks).

Tests get an ``InferdHarness`` from the ``inferd`` fixture (one test) or ``module_inferd``
(shared by a module's tests, for a server several tests can use). ``harness.start`` launches
a server and waits (bounded) until the native client reports it live; ``harness.launch``
does not wait (for servers expected to exit). At teardown every server still running gets
SIGTERM and must exit 0 unless the test cleared ``handle.clean_exit``. Every failure message
carries the server's log (its stderr, shared with its executor processes), so a broken
start-up explains itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import TypeVar

import pytest

from inferd.kernel.sdk import testing
from inferd.kernel.sdk.testing import free_port
from inferd.protocols.client import Client

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_REPOSITORY = PROJECT_ROOT / "model_repository"
INFERD_ARGUMENTS = list(testing.INFERD_MODULE)
INFERD = [sys.executable, *INFERD_ARGUMENTS]

START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 30.0
POLL_SECS = 0.05
SERVING_LINE = testing.SERVING_LINE
T = TypeVar("T")


@dataclass
class ServerHandle:
    """A running (or exited) ``inferd serve`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    clean_exit: bool = True  # teardown asserts exit code 0 after SIGTERM
    ports: dict[str, int] = field(default_factory=dict)  # protocol -> port it was given

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the KServe gRPC frontend, as tritonclient.grpc takes it."""
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def http_url(self) -> str:
        """``host:port`` of the KServe HTTP frontend, as tritonclient.http takes it."""
        return f"127.0.0.1:{self.ports['http']}"

    def log(self) -> str:
        """Everything the server and its executors have written to stderr and stdout so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.url, timeout=timeout)

    def wait_exit(self, timeout: float) -> int:
        """The exit code, failing the test (with the log) if it takes over ``timeout`` s."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"inferd did not exit within {timeout} s; its log:\n{self.log()}")

    def terminate(self, timeout: float = STOP_TIMEOUT_SECS) -> int:
        """Send SIGTERM and return the exit code (bounded by ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self) -> None:
        """Last resort cleanup: the server and, through its process group (it leads one), any
        executor it left behind."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


# The HTTP server of every server started, where a test names none: the suite runs under
# each of ``--http-implementation`` loop (the default) and uvicorn through this variable.
HTTP_IMPLEMENTATION = os.environ.get("INFERD_TEST_HTTP_IMPLEMENTATION", "")


def launch(
    repository: Path | None, *flags: str, log_dir: Path, env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> ServerHandle:
    """Start ``inferd serve`` (with ``python``: another venv's, say) without waiting for it;
    every port is a free one (zmq given, the others so that concurrent servers never
    collide)."""
    ports = {protocol: free_port() for protocol in ("zmq", "http", "grpc", "metrics")}
    if HTTP_IMPLEMENTATION and not any(f.startswith("--http-implementation") for f in flags):
        flags = (*flags, f"--http-implementation={HTTP_IMPLEMENTATION}")
    command = testing.serve_command(repository, ports, *flags,
                                    launcher=(python, *INFERD_ARGUMENTS))
    log_dir.mkdir(parents=True, exist_ok=True)
    server = testing.launch(command, ports, log_dir / f"inferd-{ports['zmq']}.log",
                            env=_environment(env or {}), cwd=log_dir)
    return ServerHandle(f"tcp://127.0.0.1:{ports['zmq']}", server.process, server.log_path,
                        ports=ports)


def _environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``env`` over it; a ``PYTHONPATH`` in ``env`` goes
    before this process's (which registers the testing backend: tests/conftest.py)."""
    paths = [env.get("PYTHONPATH"), os.environ.get("PYTHONPATH")]
    return {**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def start_server(
    repository: Path | None, *flags: str, log_dir: Path, env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> ServerHandle:
    """Launch the server and return once every frontend listens: the native client reports
    it live and the server has logged that all its frontends started (they bind one after
    another, so zmq answering does not mean HTTP and gRPC do yet)."""
    for _attempt in range(PORT_ATTEMPTS):
        server = _started(repository, *flags, log_dir=log_dir, env=env, python=python)
        if server is not None:
            return server
    pytest.fail(f"inferd found a port taken at each of {PORT_ATTEMPTS} starts")


PORT_ATTEMPTS = testing.START_ATTEMPTS  # a start that fails on a port taken alone: again


def _started(
    repository: Path | None, *flags: str, log_dir: Path, env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> ServerHandle | None:
    """The server, once every frontend listens; None when it could not bind a port it was
    given."""
    server = launch(repository, *flags, log_dir=log_dir, env=env, python=python)
    running = testing.RunningServer(server.process, server.ports, server.log_path)
    try:
        serving = testing.wait_until_serving(running, START_TIMEOUT_SECS)
    except testing.ServerFailed as failure:
        server.kill()
        pytest.fail(str(failure))
    if not serving:
        server.kill()
        return None
    return server


WAIT_SECS = 30.0  # the bound on every wait for an event, far from how long any takes


def wait_for(condition: Callable[[], T | None], what: str,
             server: ServerHandle | None = None, timeout: float = WAIT_SECS) -> T:
    """``condition()``'s first truthy value, polled until ``timeout`` passes; then the test
    fails saying ``what`` it waited for (with the server's log when given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            log = f"; its log:\n{server.log()}" if server is not None else ""
            pytest.fail(f"waited {timeout} s for {what}{log}")
        time.sleep(POLL_SECS / 5)


def started_batches(path: Path) -> list[str]:
    """The lines a testing-backend model's ``started_file`` holds: one per batch started."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def wait_started(path: Path, batches: int = 1, server: ServerHandle | None = None) -> list[str]:
    """Once a testing-backend model has started ``batches`` batches (its ``started_file``)."""
    return wait_for(lambda: (lines := started_batches(path)) and len(lines) >= batches and lines,
                    f"{batches} batch(es) started in {path.name}", server)


def metric(server: ServerHandle, name: str, **labels: str) -> float | None:
    """One sample of the server's Prometheus text (``/metrics``), None when it has none."""
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        family, _, rest = sample.partition("{")
        if family == name and (not labels or wanted in rest):
            return float(value)
    return None


def pending(server: ServerHandle, model: str) -> int:
    """``model``'s requests queued or at an instance (``nv_inference_pending_request_count``)."""
    return int(metric(server, "nv_inference_pending_request_count", model=model) or 0)


def make_repository(root: Path, *examples: str, configs: dict[str, str] | None = None) -> Path:
    """A repository at ``root`` holding copies of the ``examples`` models and, for each
    ``configs`` entry, a model folder with that ``config.pbtxt`` and an empty version 1."""
    root.mkdir(parents=True, exist_ok=True)
    copy_models(root, EXAMPLE_REPOSITORY, *examples)
    for name, text in (configs or {}).items():
        add_model(root, name, text)
    return root


def copy_models(root: Path, source: Path, *names: str) -> Path:
    """Copies, in the repository at ``root``, of the ``names`` model folders of ``source``."""
    for name in names:
        shutil.copytree(source / name, root / name)
    return root


def add_model(root: Path, name: str, config_text: str) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config_text, encoding="utf-8")
    return folder


def testing_config(name: str, mode: str, instances: int = 1, **parameters: str) -> str:
    """A testing-backend model (``plugins/backends/testing``) echoing one FP32 [4] input."""
    lines = [
        f'name: "{name}"',
        'backend: "inferd_testing"',
        "max_batch_size: 0",
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]',
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]',
        f"instance_group [{{ count: {instances} kind: KIND_CPU }}]",
        f'parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}',
    ]
    lines += [
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        for key, value in parameters.items()
    ]
    return "\n".join(lines) + "\n"


class InferdHarness:
    """Starts servers whose logs and repositories live under ``folder``, and stops them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.servers: list[ServerHandle] = []
        self._repositories = count(1)

    def launch(
        self, repository: Path | None, *flags: str, env: dict[str, str] | None = None
    ) -> ServerHandle:
        server = launch(repository, *flags, log_dir=self.folder / "logs", env=env)
        self.servers.append(server)
        return server

    def start(
        self, repository: Path | None, *flags: str, env: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> ServerHandle:
        server = start_server(repository, *flags, log_dir=self.folder / "logs", env=env,
                              python=python)
        self.servers.append(server)
        return server

    def repository(self, *examples: str, configs: dict[str, str] | None = None) -> Path:
        root = self.folder / f"repository{next(self._repositories)}"
        return make_repository(root, *examples, configs=configs)

    testing_config = staticmethod(testing_config)
    copy_models = staticmethod(copy_models)

    def stop_all(self) -> None:
        problems = []
        for server in self.servers:
            try:
                if server.process.poll() is None:
                    code = server.terminate()
                    if server.clean_exit and code != 0:
                        problems.append(f"inferd exited with code {code}; its log:\n{server.log()}")
            finally:
                server.kill()
        assert not problems, "\n\n".join(problems)
