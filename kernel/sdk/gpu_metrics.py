"""The GPUs' metrics through NVML (``nvidia-ml-py``, the ``gpu`` extra), with Triton's names.

Per GPU, labelled ``gpu_uuid``: ``nv_gpu_utilization`` (0.0 - 1.0), ``nv_gpu_memory_total_bytes``,
``nv_gpu_memory_used_bytes``, ``nv_gpu_power_usage`` and ``nv_gpu_power_limit`` (watts) and
``nv_energy_consumption`` (joules since the server started). Triton reads them through DCGM;
NVML gives the same figures without a DCGM daemon. ``pynvml`` is imported only by
``GpuMetrics.open``: on a machine without the package, without a driver or without a GPU it
returns ``None`` and the server has no GPU metric and no error. A query a GPU does not support
leaves only that sample out. Reads are blocking calls into the driver: call ``samples`` off the
event loop.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

__all__ = ["GpuMetrics"]

log = logging.getLogger(__name__)

Sample = tuple[str, dict[str, str], float]


class GpuMetrics:
    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles
        self._uuids = [_text(nvml.nvmlDeviceGetUUID(handle)) for handle in handles]
        # Energy since start: NVML counts millijoules since the driver was loaded.
        self._energy_start = [self._query(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
                              for handle in handles]

    @classmethod
    def open(cls, nvml: Any = None) -> GpuMetrics | None:
        """The GPUs NVML sees, or ``None`` where there is no NVML or no GPU."""
        if nvml is None:
            try:  # the gpu extra; absent on most CPU machines
                nvml = importlib.import_module("pynvml")
            except ImportError:
                return None
        try:
            nvml.nvmlInit()
        except Exception as error:  # NVMLError: no driver, no library
            log.debug("no GPU metrics: NVML cannot start (%s)", error)
            return None
        try:
            count = int(nvml.nvmlDeviceGetCount())
            handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
            if not handles:
                nvml.nvmlShutdown()
                return None
            return cls(nvml, handles)
        except Exception as error:
            log.warning("no GPU metrics: NVML failed to list the GPUs (%s)", error)
            _quietly(nvml.nvmlShutdown)
            return None

    def samples(self) -> list[Sample]:
        nvml = self._nvml
        samples: list[Sample] = []
        for handle, uuid, energy_start in zip(self._handles, self._uuids, self._energy_start,
                                              strict=True):
            labels = {"gpu_uuid": uuid}
            utilization = self._query(nvml.nvmlDeviceGetUtilizationRates, handle)
            if utilization is not None:
                samples.append(("nv_gpu_utilization", labels, utilization.gpu / 100.0))
            memory = self._query(nvml.nvmlDeviceGetMemoryInfo, handle)
            if memory is not None:
                samples += [("nv_gpu_memory_total_bytes", labels, float(memory.total)),
                            ("nv_gpu_memory_used_bytes", labels, float(memory.used))]
            power = self._query(nvml.nvmlDeviceGetPowerUsage, handle)  # milliwatts
            if power is not None:
                samples.append(("nv_gpu_power_usage", labels, power / 1000.0))
            limit = self._query(nvml.nvmlDeviceGetPowerManagementLimit, handle)
            if limit is not None:
                samples.append(("nv_gpu_power_limit", labels, limit / 1000.0))
            energy = self._query(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            if energy is not None and energy_start is not None:
                samples.append(("nv_energy_consumption", labels,
                                max(0.0, (energy - energy_start) / 1000.0)))
        return samples

    def close(self) -> None:
        _quietly(self._nvml.nvmlShutdown)

    @staticmethod
    def _query(function: Any, handle: Any) -> Any:
        try:
            return function(handle)
        except Exception:  # NVMLError_NotSupported and kin: this figure only is missing
            return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _quietly(function: Any) -> None:
    try:
        function()
    except Exception as error:
        log.debug("NVML: %s", error)
