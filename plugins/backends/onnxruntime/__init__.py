"""The onnxruntime backend plugin's hook module: tells inferd the backend exists.

It registers the backend by import path only. It must import no framework: onnxruntime is
imported by ``backend.py``, inside the executor, when a model needs it, so this plugin loads
on a machine without onnxruntime and only its models become UNAVAILABLE there.
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

ONNXRUNTIME_BACKEND = BackendSpec(
    name="onnxruntime",
    entry="inferd.plugins.backends.onnxruntime.backend:OnnxRuntimeBackend",
    platforms=("onnxruntime_onnx",),
    default_filename="model.onnx",
    gpu_packages=("onnxruntime-gpu",),
    completion="inferd.plugins.backends.onnxruntime.backend:complete_offline",
    auto_completes=True,
    # Native and thread-safe: its CPU instances run in the server's process by default.
    runs_in_server=True,
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(ONNXRUNTIME_BACKEND)
