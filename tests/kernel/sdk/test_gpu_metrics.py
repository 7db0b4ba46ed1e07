"""The NVML reader against a small fake of the ``pynvml`` module (the third-party library,
not an inferd component): Triton's GPU metric names and units, the ``gpu_uuid`` label, a
query the GPU does not support left out, and no NVML or no GPU meaning no metric."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from inferd.kernel.sdk.gpu_metrics import GpuMetrics


class NVMLError(Exception):
    pass


class FakeNvml:
    """What ``pynvml`` offers that the reader uses, for ``gpus`` fake GPUs."""

    def __init__(self, gpus: int = 2, *, init_fails: bool = False) -> None:
        self.gpus = gpus
        self.init_fails = init_fails
        self.energy_mj = 5_000_000
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        uuid = f"GPU-0000-{handle}"
        return uuid.encode() if handle else uuid  # older pynvml returns bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=40 + handle, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(handle + 1) << 30, free=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 123_456  # milliwatts

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        if handle == 1:
            raise NVMLError("Not Supported")
        return 300_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self.energy_mj


def test_samples_have_tritons_names_units_and_labels() -> None:
    nvml = FakeNvml()
    gpus = GpuMetrics.open(nvml)
    assert gpus is not None
    nvml.energy_mj += 2500  # 2.5 J since the server started
    samples = {(name, labels["gpu_uuid"]): value for name, labels, value in gpus.samples()}
    assert samples[("nv_gpu_utilization", "GPU-0000-0")] == 0.40
    assert samples[("nv_gpu_utilization", "GPU-0000-1")] == 0.41
    assert samples[("nv_gpu_memory_total_bytes", "GPU-0000-0")] == 80 << 30
    assert samples[("nv_gpu_memory_used_bytes", "GPU-0000-1")] == 2 << 30
    assert samples[("nv_gpu_power_usage", "GPU-0000-0")] == 123.456
    assert samples[("nv_gpu_power_limit", "GPU-0000-0")] == 300.0
    assert ("nv_gpu_power_limit", "GPU-0000-1") not in samples  # not supported: left out
    assert samples[("nv_energy_consumption", "GPU-0000-1")] == 2.5
    gpus.close()
    assert nvml.shut_down


def test_no_nvml_or_no_gpu_is_no_metrics_and_no_error() -> None:
    assert GpuMetrics.open(FakeNvml(init_fails=True)) is None
    empty = FakeNvml(gpus=0)
    assert GpuMetrics.open(empty) is None and empty.shut_down


def test_the_real_module_without_a_gpu_is_clean() -> None:
    # pynvml absent, or present without a driver: None either way on a machine without GPU;
    # with a GPU it reads it.
    gpus = GpuMetrics.open()
    if gpus is not None:
        assert all(labels["gpu_uuid"] for _, labels, _ in gpus.samples())
        gpus.close()
