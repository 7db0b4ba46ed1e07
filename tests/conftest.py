"""Fixtures every test folder may use. ``redis_servers`` (one per module) starts Redis servers
on demand and kills them at teardown; ``s3_server`` (one per module) is one moto S3 server. What
they hand out is in the plain module tests/services.py, which tests import for its types and
its ``missing`` rule (skip, or fail under CI).

``anyio_backend`` runs every ``pytest.mark.anyio`` test on asyncio, the only loop the kernel
runs on (pyzmq cannot run on trio).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import RedisServers, S3Server

# The testing backend (plugins/backends/testing) is registered only where the tests run: this
# folder holds a distribution's metadata whose entry point names it, put on sys.path here and
# on PYTHONPATH for every server and executor the tests start.
TESTING_PLUGIN = str(Path(__file__).resolve().parent / "plugins" / "testing_plugin")
if TESTING_PLUGIN not in sys.path:
    sys.path.append(TESTING_PLUGIN)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [TESTING_PLUGIN, *filter(None, [os.environ.get("PYTHONPATH")])])

# The third-party example package's own tests run in a plugin author's venv, where the package
# is installed (tests/e2e/test_plugins.py), not in this suite.
collect_ignore = ["plugins/thirdparty_backend"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def redis_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServers]:
    servers = RedisServers(tmp_path_factory.mktemp("redis"))
    yield servers
    servers.stop_all()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()
