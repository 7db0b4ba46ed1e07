"""The TensorFlow backend plugin's hook module: tells inferd the backend exists.

It registers the backend by import path only and imports no framework: ``tensorflow`` is
imported by ``graphs.py``, inside the TensorFlow executor, when a model needs it, so this
plugin loads anywhere and only TensorFlow models become UNAVAILABLE where it is missing.
TensorFlow is isolated: its models share an executor process of their own (one per GPU),
never an interpreter with torch, onnxruntime or TensorRT.
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

TENSORFLOW_BACKEND = BackendSpec(
    name="tensorflow",
    entry="inferd.plugins.backends.tensorflow.backend:TensorFlowBackend",
    platforms=("tensorflow_savedmodel", "tensorflow_graphdef"),
    default_filename="model.savedmodel",
    isolate=True,
    # PyPI's `tensorflow` is the CUDA build on Linux; `tensorflow-cpu` has no GPU support.
    gpu_packages=("tensorflow",),
    # A SavedModel's signature names its tensors; a GraphDef says too little (as in Triton).
    auto_completes=True,
    auto_completes_only=("tensorflow_savedmodel",),
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(TENSORFLOW_BACKEND)
