"""What a model version takes from its executor's process at load and gives back at unload.

Owns the two readings (the resident memory of this executor's process, with its children:
the python backend's stub processes; and, where a CUDA driver and NVML are present, the device
memory NVML reports for this process's pid on every GPU), a version's ``Footprint`` (their
growth over its load) and ``give_back``: what an unload does once the version's instances and
model are closed so that the freed memory leaves the process instead of waiting in caches:
cycles holding sessions collected, torch's CUDA cache emptied (where torch is already imported
and CUDA started), and glibc's free lists trimmed (``malloc_trim(0)``; no-op on another C
library). onnxruntime needs nothing more: a session's CPU arena is its own and goes with it.
In the server's own process (the inline executor) the readings are that process's alone, so
concurrent loads, unloads or traffic move them too: the figures are the process's change, as
an operator watching ``ps`` would see it. Readers never raise; None where the system has no
answer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from inferd.kernel.sdk.memory_meter import resident_bytes
from inferd.kernel.sdk.process_metrics import process_usage
from inferd.protocols.messages import VersionUnloaded

log = logging.getLogger(__name__)

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Reading:
    """This process's memory now: resident bytes, and device bytes (None: no GPU reading)."""

    resident: int
    device: int | None


@dataclass(frozen=True, slots=True)
class Footprint:
    """What a version took at load: the growth of each reading (never below 0)."""

    resident: int
    device: int | None

    @staticmethod
    def between(before: Reading, after: Reading) -> Footprint:
        device = (max(0, after.device - before.device)
                  if after.device is not None and before.device is not None else None)
        return Footprint(max(0, after.resident - before.resident), device)


class ProcessMemory:
    """The readings of this executor's process. ``with_children``: count the processes below
    it (an executor process's python stubs); the server's own process counts itself only,
    its children being the other executors."""

    def __init__(self, with_children: bool) -> None:
        self._with_children = with_children
        self._nvml: Any = None
        self._nvml_tried = False

    def reading(self) -> Reading:
        pid = os.getpid()
        resident: int | None
        if self._with_children:
            resident = resident_bytes(pid)
        else:
            usage = process_usage(pid)
            resident = usage[1] if usage is not None else None
        return Reading(resident or 0, self._device_bytes(pid))

    def _device_bytes(self, pid: int) -> int | None:
        """The device memory NVML counts for ``pid`` on every GPU; None without NVML or a
        GPU (no CUDA on this machine: nothing to read)."""
        nvml = self._open_nvml()
        if nvml is None:
            return None
        try:
            total = 0
            for index in range(int(nvml.nvmlDeviceGetCount())):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if process.pid == pid and process.usedGpuMemory:
                        total += int(process.usedGpuMemory)
            return total
        except Exception:  # NVMLError: a driver that does not answer per process
            return None

    def _open_nvml(self) -> Any:
        if not self._nvml_tried:
            self._nvml_tried = True
            try:
                nvml = importlib.import_module("pynvml")
                nvml.nvmlInit()
                if int(nvml.nvmlDeviceGetCount()) > 0:
                    self._nvml = nvml
            except Exception:  # no gpu extra, no driver, no GPU
                self._nvml = None
        return self._nvml


def give_back() -> None:
    """Return what the closed versions freed to the system (see the module's docstring)."""
    gc.collect()
    torch = sys.modules.get("torch")  # never imported here for this
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        except Exception as error:  # a broken CUDA context must not fail the unload
            log.warning("torch.cuda.empty_cache() failed: %s", error)
    trim_heap()


def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # glibc's; musl and others have none
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def trim_heap() -> bool:
    """``malloc_trim(0)``: glibc hands the free pages of every arena back to the system.
    False where there is no glibc (nothing done)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def describe(footprint: Footprint) -> str:
    """``412.0 MiB resident`` and, with a GPU reading, ``, 1.2 GiB on the GPU``."""
    text = f"{mebibytes(footprint.resident)} resident"
    if footprint.device is not None:
        text += f", {mebibytes(footprint.device)} on the GPU"
    return text


def mebibytes(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


def unloading(name: str, version: int, footprint: Footprint, before: Reading,
              memory: ProcessMemory) -> VersionUnloaded:
    """After a version's instances and model are closed (``before``: the reading before they
    were): give the memory back, read what came back, log it and say it to control."""
    give_back()
    after = memory.reading()
    returned = Footprint.between(after, before)
    log.info("unloaded %s version %d: gave back %s (its load took %s)", name, version,
             describe(returned), describe(footprint))
    return VersionUnloaded(footprint.resident, returned.resident, footprint.device,
                           returned.device)


def measured_load(name: str, version: int, before: Reading, after: Reading) -> Footprint:
    """What a load took, between the readings ``before`` and ``after`` it; logged."""
    footprint = Footprint.between(before, after)
    log.info("%s version %d took %s at load", name, version, describe(footprint))
    return footprint
