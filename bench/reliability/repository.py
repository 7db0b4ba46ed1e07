"""The model repository the reliability scripts (``fuzz_http``, ``chaos``) serve.

Owns its contents: ``simple`` and ``identity_fp32`` (onnxruntime) from the example repository,
``add_sub`` (the python backend) from the tests' python models, and ``add_then_identity``, an
ensemble of ``add_sub`` followed by ``identity_fp32``. It starts nothing; the scripts and
tests/e2e/test_openapi.py import it as ``bench.reliability.repository``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "model_repository"
PYTHON_MODELS = ROOT / "tests" / "plugins" / "python_models"

ENSEMBLE = "add_then_identity"
ENSEMBLE_CONFIG = f"""name: "{ENSEMBLE}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "add_sub" model_version: -1
     input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "B" }}
     output_map {{ key: "OUTPUT0" value: "sum" }} }},
  {{ model_name: "identity_fp32" model_version: -1
     input_map {{ key: "INPUT0" value: "sum" }} output_map {{ key: "OUTPUT0" value: "SUM" }} }}
] }}
"""

MODELS = ("simple", "identity_fp32", "add_sub", ENSEMBLE)


def build(folder: Path) -> Path:
    """The repository, written under ``folder``; returns its root."""
    root = folder / "repository"
    root.mkdir(parents=True, exist_ok=True)
    for name in ("simple", "identity_fp32"):
        shutil.copytree(EXAMPLES / name, root / name)
    shutil.copytree(PYTHON_MODELS / "add_sub", root / "add_sub")
    (root / ENSEMBLE / "1").mkdir(parents=True)
    (root / ENSEMBLE / "config.pbtxt").write_text(ENSEMBLE_CONFIG, encoding="utf-8")
    return root
