"""What the server's models hold in memory, read from the system: the resident memory of the
server's process and every process below it (its executors), from ``/proc``; a GPU's used
and total memory through NVML (the gpu extra), where there is one; the size of a model's
files. Readers return None where the system has no answer, never raise. The memory budget
(``inferd.plugins.on_demand.budget``) measures a load's footprint with them.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from inferd.kernel.sdk.process_metrics import PROC, machine_memory, process_usage

__all__ = ["MemoryMeter", "folder_bytes"]


def folder_bytes(path: str) -> int:
    """The size of a model's files: the estimate of a footprint never measured."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (the executors), from ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            parent = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(parents.get(pid, ()))
    return tree


def resident_bytes(root: int) -> int | None:
    usages = [process_usage(pid) for pid in process_tree(root)]
    held = [usage[1] for usage in usages if usage is not None]
    return sum(held) if held else None


class MemoryMeter:
    """What a device holds now: the server's processes' resident memory (cpu), or the used
    memory NVML reports (gpuN); None where it cannot be read."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def reading(self, device: str) -> int | None:
        if device == "cpu":
            return resident_bytes(os.getpid())
        nvml = self._open_nvml()
        if nvml is None:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(device[3:]))
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # NVMLError: a GPU it does not see
            return None

    def total(self, device: str) -> int | None:
        if device == "cpu":
            memory = machine_memory()
            return memory[0] if memory else None
        nvml = self._open_nvml()
        if nvml is None:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(device[3:]))
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception:
            return None

    def _open_nvml(self) -> Any:
        if self._nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
                nvml.nvmlInit()
            except Exception:  # no gpu extra, no driver
                return None
            self._nvml = nvml
        return self._nvml
