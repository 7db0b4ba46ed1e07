"""The TensorRT backend plugin's hook module: tells inferd the backend exists.

It registers the backend by import path only and imports no framework: ``tensorrt`` and
cuda-python are imported by ``engine.py``, inside a GPU executor, when a model needs them, so
this plugin loads anywhere and only TensorRT models become UNAVAILABLE where they are missing.
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

TENSORRT_BACKEND = BackendSpec(
    name="tensorrt",
    entry="inferd.plugins.backends.tensorrt.backend:TensorRTBackend",
    platforms=("tensorrt_plan",),
    default_filename="model.plan",
    gpu_packages=("tensorrt", "tensorrt-cu12", "tensorrt-cu13"),
    auto_completes=True,  # from the engine's bindings
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(TENSORRT_BACKEND)
