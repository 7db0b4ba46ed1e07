"""kernel/, plugins/ and protocols/ stay clean under ``mypy --strict`` and ruff (STYLE.md's
house rule), checked by ``.ci/typecheck``, which shows mypy the folders under their import
names so that every ``inferd`` import is resolved and checked across modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_kernel_and_protocols_are_mypy_strict_and_ruff_clean() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "typecheck")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True, text=True, timeout=580,
    )
    assert result.returncode == 0, result.stdout + result.stderr
