"""Which backends can use a GPU, and the environment that pins an executor to one.

Which GPUs this process sees (``visible_gpus``) and a framework's device number for a GPU id
(``local_device_id``) are ``inferd.kernel.sdk.devices``'s, as backends use them too.

The main process never imports a framework (DESIGN), so it cannot ask CUDA. It reads what the
NVIDIA driver publishes instead: one folder per GPU under ``/proc/driver/nvidia/gpus``, in the
order CUDA numbers them (by PCI bus id, as ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), narrowed by
``CUDA_VISIBLE_DEVICES`` when it is set, as CUDA would narrow it. A backend can use a GPU when
one of the distributions its spec names in ``gpu_packages`` is installed (``onnxruntime-gpu``;
a CUDA build of torch brings NVIDIA's runtime wheels): that decides what ``KIND_AUTO`` (and a
config without ``instance_group``) becomes, as in Triton: GPU where the backend and a GPU are
present, CPU otherwise. Whether the framework then really runs on the GPU is the backend's to
check at load (never a silent CPU fallback).

A GPU id, as configs (``gpus: [..]``) and CUDA shared-memory regions name it, is the server's
own CUDA device number, as in Triton: the position of the device in the server's
``CUDA_VISIBLE_DEVICES`` (CUDA numbers the listed devices 0, 1, ... in list order), not a
physical index. A GPU executor process is pinned to one of them (``pinned_environment``: the
server's entry for it, a physical index or a UUID alike), where CUDA numbers it 0;
``local_device_id`` gives a framework that number. Nothing here needs to map a UUID to a
physical index (which only NVML could), so none is mapped.
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
