#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (a few minutes): sets up its own venv in
# bench/.peers/gpu-venv (torch's default CUDA build, onnxruntime-gpu, inferd from this checkout
# without the onnx extra, so onnxruntime and onnxruntime-gpu never meet), then runs
# bench/gpu_check.py: a TorchScript model and an ONNX model served on CUDA next to their CPU
# twins, the answers compared, throughput CPU vs GPU printed. Arguments go to gpu_check.py
# (--seconds, --batch, --concurrency; --cpu-only for a smoke run without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=bench/.peers/gpu-venv
if [[ " $* " != *" --cpu-only "* ]] && ! nvidia-smi -L; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); --cpu-only runs without one" >&2
    exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "== setting up $VENV (torch with CUDA and onnxruntime-gpu: several GB)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet torch onnxruntime-gpu onnx
    "$VENV/bin/pip" install --quiet -e .
fi
"$VENV/bin/python" -c "import torch, onnxruntime; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers())"
exec "$VENV/bin/python" bench/gpu_check.py "$@"
