"""The metrics tritonserver reads "per interval": the machine's CPU and memory (``nv_cpu_*``,
``--allow-cpu-metrics``) and the GPUs' (``nv_gpu_*``, ``--allow-gpu-metrics``, through NVML
when a GPU is present), read every ``--metrics-interval-ms`` off the event loop and kept for
the scrapes in between. CPU utilization is the busy share since the previous reading, so it is
only meaningful from the second one on (the first reading is taken at start)."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc

from inferd.kernel.sdk.gpu_metrics import GpuMetrics
from inferd.kernel.sdk.metrics_config import MetricsConfig
from inferd.kernel.sdk.process_metrics import CpuUtilization, machine_memory

log = logging.getLogger(__name__)

Sample = tuple[str, dict[str, str], float]


class IntervalMetrics:
    def __init__(self, config: MetricsConfig) -> None:
        self.config = config
        self.samples: list[Sample] = []
        self._cpu = CpuUtilization()
        self._gpus: GpuMetrics | None = None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Read now (started once the first reading is there, so the first scrape has it),
        then every interval, until cancelled."""
        if self.config.gpu_metrics:
            self._gpus = await anyio.to_thread.run_sync(GpuMetrics.open)
            if self._gpus is not None:
                log.info("GPU metrics through NVML")
        try:
            self.samples = await anyio.to_thread.run_sync(self._read)
            task_status.started()
            while True:
                await anyio.sleep(self.config.interval_ms / 1000)
                self.samples = await anyio.to_thread.run_sync(self._read)
        finally:
            if self._gpus is not None:
                self._gpus.close()

    def _read(self) -> list[Sample]:
        samples: list[Sample] = []
        if self.config.cpu_metrics:
            utilization = self._cpu.read()
            if utilization is not None:
                samples.append(("nv_cpu_utilization", {}, utilization))
            memory = machine_memory()
            if memory is not None:
                samples += [("nv_cpu_memory_total_bytes", {}, memory[0]),
                            ("nv_cpu_memory_used_bytes", {}, memory[1])]
        if self._gpus is not None:
            try:
                samples += self._gpus.samples()
            except Exception:  # a driver in trouble must not stop the other metrics
                log.exception("reading the GPU metrics failed")
        return samples
