"""Fixtures every test folder may use: real Redis servers (Debian's ``redis-server``) on free
loopback ports, for the redis response cache.

``redis_servers`` (one per module) starts servers on demand (``redis_servers.start()``) with
no persistence (``--save '' --appendonly no``), waits (bounded) until each answers PING, and
kills them at teardown. Without ``redis-server`` on the PATH the tests that need it are skipped,
except under CI (the environment variable ``CI`` set), where they fail: a missing install must
never pass as green.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REDIS_START_TIMEOUT_SECS = 15.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def redis_answers(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis on ``port`` answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
            connection.sendall(b"FLUSHALL\r\n")
            assert connection.recv(64).startswith(b"+OK")


class RedisServers:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.servers: list[RedisServer] = []

    def start(self, *extra: str, port: int | None = None) -> RedisServer:
        """A new server, on ``port`` when given (to bring one back where it was)."""
        executable = shutil.which("redis-server")
        if executable is None:
            if os.environ.get("CI"):
                pytest.fail("redis-server is not installed (Debian's redis-server package); "
                            ".ci/run installs it")
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        port = port or _free_port()
        log_path = self.folder / f"redis-{port}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--daemonize", "no", "--dir", str(self.folder), *extra],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        server = RedisServer(port, process, log_path)
        self.servers.append(server)
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECS
        while not redis_answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                pytest.fail(f"redis-server did not start on port {port}:\n"
                            f"{log_path.read_text(errors='replace')}")
            time.sleep(0.05)
        return server

    def stop_all(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()


@pytest.fixture(scope="module")
def redis_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServers]:
    servers = RedisServers(tmp_path_factory.mktemp("redis"))
    yield servers
    servers.stop_all()
