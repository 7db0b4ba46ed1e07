"""Fixtures for end-to-end tests: ``inferd`` (a harness for one test) and ``module_inferd``
(one shared by a module's tests). The harness itself, its types and helpers are in the plain
module tests/e2e/inferd_harness.py, which tests import; a conftest is never imported as a
module (pytest loads it once, under a name of its own, and an import would make a second copy
with its own state, such as the ports already handed out).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.inferd_harness import InferdHarness


@pytest.fixture
def inferd(tmp_path: Path) -> Iterator[InferdHarness]:
    harness = InferdHarness(tmp_path)
    yield harness
    harness.stop_all()


@pytest.fixture(scope="module")
def module_inferd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdHarness]:
    harness = InferdHarness(tmp_path_factory.mktemp("inferd"))
    yield harness
    harness.stop_all()
