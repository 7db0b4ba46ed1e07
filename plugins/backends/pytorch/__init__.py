"""The PyTorch backend plugin's hook module: tells inferd the backend exists.

It registers the backend by import path only. It must import no framework: torch is imported
by ``backend.py``, inside the executor, when a model needs it, so this plugin loads on a
machine without torch and only its models become UNAVAILABLE there. ``model.pt``
(TorchScript) is its default file; ``model.pt2`` (``torch.export``) is the kernel's second
built-in torch file name (``inferd.kernel.modelconfig.reading.MODEL_FILES``).
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

PYTORCH_BACKEND = BackendSpec(
    name="pytorch",
    entry="inferd.plugins.backends.pytorch.backend:PyTorchBackend",
    platforms=("pytorch_libtorch",),
    default_filename="model.pt",
    # A CUDA build of torch installs NVIDIA's CUDA runtime wheels; the CPU build does not.
    gpu_packages=("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime"),
    # Native and thread-safe: its CPU instances run in the server's process by default.
    runs_in_server=True,
    # A torch.export file carries its tensors' names and shapes; TorchScript does not.
    auto_completes=True,
    auto_completes_only=("model.pt2",),
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(PYTORCH_BACKEND)
