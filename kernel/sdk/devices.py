"""Which GPUs a process sees, known without any framework, and the CUDA device number a
framework uses for a config's GPU id.

The main process never imports a framework (DESIGN), so it cannot ask CUDA. It reads what the
NVIDIA driver publishes instead: one folder per GPU under ``/proc/driver/nvidia/gpus``, in the
order CUDA numbers them, narrowed by ``CUDA_VISIBLE_DEVICES`` when it is set, as CUDA would
narrow it (``visible_gpus``). A GPU id, as configs and CUDA shared-memory regions name it, is
the server's own CUDA device number, as in Triton; a GPU executor process is pinned to one
(``PINNED_GPU_ENV``), where CUDA numbers it 0: ``local_device_id`` gives a framework that
number. The kernel pins executors (``inferd.kernel.runtime.devices``) with these. Imports only
the standard library and ``inferd.protocols``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from inferd.protocols.errors import Unavailable

__all__ = ["NVIDIA_GPUS", "PINNED_GPU_ENV", "local_device_id", "visible_gpus"]

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
