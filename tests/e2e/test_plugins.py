"""Plugins end to end: a third-party backend distribution, built and installed from
``tests/plugins/thirdparty_backend``, serves a model; the deny-list switches it off; and a
framework that cannot be imported makes only its own models UNAVAILABLE, with the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

THIRD_PARTY = Path(__file__).resolve().parents[1] / "plugins" / "thirdparty_backend"

REVERSE_CONFIG = """
name: "rev"
backend: "reverse"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]
"""


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third-party distribution, built and installed into a folder of its own."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(THIRD_PARTY)],
        check=True, timeout=180, capture_output=True,
    )
    assert (target / "inferd_reverse" / "backend.py").exists()
    assert any(target.glob("inferd_reverse-1.0.0.dist-info/entry_points.txt"))
    return target


def test_a_pip_installed_backend_serves_a_model(inferd: Any, installed_plugin: Path) -> None:
    repository = inferd.repository(configs={"rev": REVERSE_CONFIG})
    server = inferd.start(repository, env={"PYTHONPATH": str(installed_plugin)})
    with server.client() as client:
        assert [(e.name, e.state) for e in client.index()] == [("rev", "READY")]
        result = client.infer("rev", {"INPUT0": np.array([1, 2, 3, 4], dtype=np.int32)})
        assert result.as_numpy("OUTPUT0").tolist() == [4, 3, 2, 1]


def test_a_denied_plugin_leaves_its_models_unavailable(inferd: Any, installed_plugin: Path) -> None:
    repository = inferd.repository("simple", configs={"rev": REVERSE_CONFIG})
    server = inferd.start(
        repository, "--exit-on-error=false",
        env={"PYTHONPATH": str(installed_plugin), "INFERD_DISABLE_PLUGINS": "reverse"},
    )
    with server.client() as client:
        entries = {e.name: e for e in client.index()}
        assert entries["simple"].state == "READY"
        assert entries["rev"].state == "UNAVAILABLE"
        assert "reverse" in entries["rev"].reason


def test_a_framework_missing_from_the_machine_fails_only_its_models(
    inferd: Any, tmp_path: Path
) -> None:
    # A package named onnxruntime that refuses to import stands for a machine without it.
    blocker = tmp_path / "no-onnxruntime" / "onnxruntime"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        'raise ImportError("No module named \'onnxruntime\' (hidden by the test)")\n'
    )
    echo = inferd.testing_config("echo", "echo")
    repository = inferd.repository("simple", configs={"echo": echo})
    server = inferd.start(
        repository, "--exit-on-error=false", env={"PYTHONPATH": str(blocker.parent)}
    )
    with server.client() as client:
        entries = {e.name: e for e in client.index()}
        assert entries["simple"].state == "UNAVAILABLE"
        assert "onnxruntime is not installed" in entries["simple"].reason
        assert entries["echo"].state == "READY"
        data = np.arange(4, dtype=np.float32)
        assert client.infer("echo", {"INPUT0": data}).as_numpy("OUTPUT0").tolist() == [0, 1, 2, 3]
