"""The GPUs this server may use, and which backends can use one, known without any framework.

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
from pathlib import Path

from inferd.kernel.sdk.backends import BackendSpec
from inferd.protocols.errors import Unavailable

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
PINNED_GPU_ENV = "INFERD_PINNED_GPU"
"""Set beside ``CUDA_VISIBLE_DEVICES`` in a GPU executor's environment: the GPU id (the
server's) of the one device that process sees."""


def visible_gpus(
    environ: Mapping[str, str] | None = None, driver_folder: Path = NVIDIA_GPUS
) -> tuple[int, ...]:
    """The GPU ids a model config may name on this machine (0, 1, ...)."""
    try:
        count = sum(1 for entry in os.scandir(driver_folder) if entry.is_dir())
    except OSError:
        count = 0
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(range(count))
    chosen: list[int] = []
    for item in visible.split(","):
        item = item.strip()
        # CUDA stops at the first entry that names no device; UUIDs (GPU-...) name one each.
        if item.isdigit() and int(item) < count:
            chosen.append(int(item))
        elif item.startswith(("GPU-", "MIG-")) and count:
            chosen.append(len(chosen))
        else:
            break
    # Inside the process the visible devices are numbered from 0 in the listed order.
    return tuple(range(len(chosen)))


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


def local_device_id(gpu: int, environ: Mapping[str, str] | None = None) -> int:
    """The CUDA device number a framework uses in this process for GPU ``gpu`` (an id as
    configs name it: the server's device number). In a GPU executor (``PINNED_GPU_ENV`` set)
    the one device it sees, 0, and ``Unavailable`` for any other GPU; in a process with the
    server's own ``CUDA_VISIBLE_DEVICES`` (the server, ``--executor-inline``, a CPU
    executor) the same number, whatever physical device or UUID it is, and ``Unavailable``
    where that process sees no such device."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    pinned = environ.get(PINNED_GPU_ENV)
    if pinned is not None:
        if pinned.strip() != str(gpu):
            raise Unavailable(
                f"GPU {gpu} is not visible in this executor process: it is pinned to GPU "
                f"{pinned} (CUDA_VISIBLE_DEVICES={visible!r})")
        return 0
    if visible is None:
        return gpu
    if 0 <= gpu < len(_listed_devices(visible)):
        return gpu
    raise Unavailable(f"GPU {gpu} is not visible in this process "
                      f"(CUDA_VISIBLE_DEVICES={visible!r})")


def _listed_devices(visible: str) -> list[str]:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value that CUDA numbers: up to the first one
    that is neither an index nor a UUID (CUDA ignores the rest)."""
    listed: list[str] = []
    for item in visible.split(","):
        item = item.strip()
        if not (item.isdigit() or item.startswith(("GPU-", "MIG-"))):
            break
        listed.append(item)
    return listed


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
