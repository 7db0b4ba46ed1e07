"""Real services for tests on free loopback ports, in a plain module tests import
(``from tests.services import ...``; the fixtures are in tests/conftest.py). Redis servers
(Debian's ``redis-server``) for the redis response cache, and an S3-compatible server (moto in
server mode, its own process) for remote model repositories.

``RedisServers.start()`` starts a server with no persistence (``--save '' --appendonly no``),
waits (bounded) until it answers PING; ``stop_all`` kills them. ``S3Server`` is one moto server
with fake credentials; ``upload(folder, "bucket/prefix")`` copies a local folder into a bucket,
and ``env`` holds the AWS variables a server under test reads.

``missing(what, install)`` is how a test meets something not installed: it skips, except under
CI (the environment variable ``CI`` set), where it fails, since a missing install must never
pass as green. ``import_or_missing`` is ``pytest.importorskip`` with that rule.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

REDIS_START_TIMEOUT_SECS = 15.0


def missing(what: str, install: str) -> NoReturn:
    """Skip the test for lack of ``what`` (``install`` says how to get it), or fail under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not installed under CI ({install})")
    # Allowed at module level too (a module needing a framework skips whole); in a test, the
    # test alone.
    pytest.skip(f"{what} is not installed ({install})", allow_module_level=True)


def import_or_missing(module: str, install: str) -> Any:
    """The imported ``module``, or ``missing`` when it cannot be imported."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"python module {module}", install)


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
            missing("redis-server", "apt-get install redis-server; .ci/run installs it")
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
