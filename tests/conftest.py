"""Fixtures every test folder may use: real services on free loopback ports. Redis servers
(Debian's ``redis-server``) for the redis response cache, and an S3-compatible server (moto in
server mode, its own process) for remote model repositories.

``redis_servers`` (one per module) starts servers on demand (``redis_servers.start()``) with
no persistence (``--save '' --appendonly no``), waits (bounded) until each answers PING, and
kills them at teardown. ``s3_server`` (one per module) is one moto server with fake credentials;
``s3_server.upload(folder, "bucket/prefix")`` copies a local folder into a bucket, and
``s3_server.env`` holds the AWS variables a server under test reads. Without
``redis-server`` on the PATH the tests that need it are skipped, except under CI (the
environment variable ``CI`` set), where they fail: a missing install must never pass as green.

``anyio_backend`` runs every ``pytest.mark.anyio`` test on asyncio, the only loop the kernel
runs on (pyzmq cannot run on trio).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REDIS_START_TIMEOUT_SECS = 15.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s, waiting (bounded) for the process to go."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def answers(port: int, request: bytes, reply: bytes, timeout: float = 1.0) -> bool:
    """Whether a server on loopback ``port`` answers ``request`` with ``reply``'s start."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(request)
            return connection.recv(64).startswith(reply)
    except OSError:
        return False


def redis_answers(port: int) -> bool:
    """Whether a Redis on ``port`` answers PING."""
    return answers(port, b"PING\r\n", b"+PONG")


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_process(self.process)

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


S3_START_TIMEOUT_SECS = 30.0
S3_ACCESS_KEY = "testing-access-key"
S3_SECRET_KEY = "testing-secret-key"
S3_REGION = "us-east-1"


def s3_answers(port: int) -> bool:
    """Whether an HTTP server on ``port`` answers (moto's root lists the buckets)."""
    return answers(port, b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", b"HTTP/")


class S3Server:
    """One moto server process on loopback, speaking S3 at ``endpoint``."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        # A given port: a new server where a stopped one was (storage coming back).
        self.port = port or _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / f"moto-{self.port}.log"
        # What a server under test (or its AWS SDK) reads; never real credentials.
        self.env = {
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_DEFAULT_REGION": S3_REGION,
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + S3_START_TIMEOUT_SECS
        while not s3_answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"moto server did not start on port {self.port}:\n"
                            f"{self.log_path.read_text(errors='replace')}")
            time.sleep(0.1)

    def url(self, path: str) -> str:
        """Triton's custom-endpoint form of ``bucket/prefix``: ``s3://host:port/bucket/prefix``."""
        return f"s3://127.0.0.1:{self.port}/{path.strip('/')}"

    def client(self) -> Any:
        """A boto3 S3 client on this server (to arrange and change what a test reads)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=S3_REGION,
                            aws_access_key_id=S3_ACCESS_KEY,
                            aws_secret_access_key=S3_SECRET_KEY)

    def upload(self, folder: Path, path: str) -> None:
        """Every file under ``folder`` into ``bucket/prefix`` (the bucket made when missing)."""
        bucket, _, prefix = path.strip("/").partition("/")
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = "/".join(filter(None, (prefix, file.relative_to(folder).as_posix())))
            client.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()
