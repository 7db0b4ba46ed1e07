"""Which backends can use a GPU, and the environment that pins an executor process to one.

Which GPUs this process sees (``visible_gpus``, read from the driver: the main process never
imports a framework) and the device number a framework uses for a GPU id
(``local_device_id``) are ``inferd.kernel.sdk.devices``', as backends use them too. A backend
can use a GPU when one of the distributions its spec names in ``gpu_packages`` is installed
(``onnxruntime-gpu``; a CUDA build of torch brings NVIDIA's runtime wheels): that decides what
``KIND_AUTO`` (and a config without ``instance_group``) becomes, as in Triton: GPU where the
backend and a GPU are present, CPU otherwise. Whether the framework then really runs on the
GPU is the backend's to check at load (never a silent CPU fallback). A GPU executor process is
pinned to one GPU id (``pinned_environment``: the server's ``CUDA_VISIBLE_DEVICES`` entry for
it, a physical index or a UUID alike), where CUDA numbers it 0. Nothing here maps a UUID to a
physical index (which only NVML could).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping

from inferd.kernel.sdk.backends import BackendSpec
from inferd.kernel.sdk.devices import PINNED_GPU_ENV


def can_use_gpu(spec: BackendSpec | None) -> bool:
    """Whether ``spec``'s backend has what it needs to run on a GPU installed here."""
    if spec is None:
        return False
    return any(_installed(name) for name in spec.gpu_packages)


def pinned_environment(gpu: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment that shows an executor process only GPU ``gpu`` (an id as configs
    name it, so the server's own ``CUDA_VISIBLE_DEVICES`` entry for it), and says which it is
    (``PINNED_GPU_ENV``)."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return {"CUDA_VISIBLE_DEVICES": str(gpu), PINNED_GPU_ENV: str(gpu)}
    entries = [item.strip() for item in visible.split(",") if item.strip()]
    return {"CUDA_VISIBLE_DEVICES": entries[gpu] if gpu < len(entries) else str(gpu),
            PINNED_GPU_ENV: str(gpu)}


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
