"""The GPUs the kernel sees without a framework (inferd.kernel.runtime.devices): NVIDIA's driver
folders, narrowed by CUDA_VISIBLE_DEVICES; which backends can use one; an executor's pinning."""

from __future__ import annotations

from pathlib import Path

from inferd.kernel.backend import BackendSpec
from inferd.kernel.runtime.devices import can_use_gpu, pinned_environment, visible_gpus


def driver_folder(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "gpus"
    for index in range(count):
        (folder / f"0000:0{index}:00.0").mkdir(parents=True)
    return folder


def test_every_gpu_the_driver_lists_is_visible_unless_cuda_visible_devices_narrows_them(
        tmp_path: Path) -> None:
    four = driver_folder(tmp_path, 4)
    assert visible_gpus({}, four) == (0, 1, 2, 3)
    # Inside the process CUDA numbers the visible devices from 0, as configs name them.
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, four) == (0, 1)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,9,2"}, four) == (0,)  # stops at a bad id
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, four) == ()
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, four) == ()
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-8d4e,GPU-11aa"}, four) == (0, 1)
    assert visible_gpus({}, tmp_path / "no-driver") == ()
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0"}, tmp_path / "no-driver") == ()


def test_a_backend_can_use_a_gpu_when_one_of_its_gpu_packages_is_installed() -> None:
    assert can_use_gpu(BackendSpec("a", "x:y", gpu_packages=("no-such-package", "numpy")))
    assert not can_use_gpu(BackendSpec("b", "x:y", gpu_packages=("no-such-package",)))
    assert not can_use_gpu(BackendSpec("c", "x:y"))
    assert not can_use_gpu(None)


def test_an_executor_for_a_gpu_sees_the_servers_device_of_that_id() -> None:
    assert pinned_environment(1, {}) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert pinned_environment(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == {"CUDA_VISIBLE_DEVICES": "6"}
