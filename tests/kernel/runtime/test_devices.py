"""The GPUs the kernel sees without a framework (inferd.kernel.runtime.devices): NVIDIA's driver
folders, narrowed by CUDA_VISIBLE_DEVICES; which backends can use one; an executor's pinning and
the device number a framework uses in it.

What the device numbers follow is CUDA's documented CUDA_VISIBLE_DEVICES: the devices it lists
(indices or GPU-/MIG- UUIDs) are the process's devices 0, 1, ... in the listed order, up to the
first entry that names none; empty: no device; unset: every device. Configs name a GPU by the
server's number (Triton's), so a process with the server's list uses the same number and an
executor pinned to one entry uses 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.kernel.runtime.devices import can_use_gpu, pinned_environment
from inferd.kernel.sdk.backends import BackendSpec
from inferd.kernel.sdk.devices import PINNED_GPU_ENV, local_device_id, visible_gpus
from inferd.protocols.errors import Unavailable


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
    assert pinned_environment(1, {}) == {"CUDA_VISIBLE_DEVICES": "1", PINNED_GPU_ENV: "1"}
    assert pinned_environment(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == {
        "CUDA_VISIBLE_DEVICES": "6", PINNED_GPU_ENV: "1"}
    assert pinned_environment(0, {"CUDA_VISIBLE_DEVICES": "MIG-5c1e,MIG-77aa"}) == {
        "CUDA_VISIBLE_DEVICES": "MIG-5c1e", PINNED_GPU_ENV: "0"}


SERVER_LISTS = {
    "unset": None,
    "reordered": "1,0",
    "subset": "2",
    "gpu uuids": "GPU-8d4e0b1c-aaaa-bbbb-cccc-0123456789ab,GPU-11aa22bb-dddd-eeee-ffff-01234567",
    "mig uuid": "MIG-5c1e0d2f-1111-2222-3333-0123456789ab",
}


@pytest.mark.parametrize("visible", SERVER_LISTS.values(), ids=SERVER_LISTS.keys())
def test_every_gpu_a_config_may_name_is_one_device_number_in_each_process(
        tmp_path: Path, visible: str | None) -> None:
    server = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    gpus = visible_gpus(server, driver_folder(tmp_path, 4))
    assert gpus  # each list names at least one of the four devices
    for gpu in gpus:
        # The server's own process (and --executor-inline, a CPU executor): CUDA numbers the
        # listed devices in list order, as the server numbered them for configs.
        assert local_device_id(gpu, server) == gpu
        # The executor of that GPU sees its one device, which CUDA numbers 0.
        executor = {**server, **pinned_environment(gpu, server)}
        assert local_device_id(gpu, executor) == 0
        for other in gpus:
            if other != gpu:
                with pytest.raises(Unavailable, match=f"GPU {other} is not visible in this "
                                                      f"executor process: it is pinned to GPU "
                                                      f"{gpu}"):
                    local_device_id(other, executor)


def test_a_reordered_list_keeps_the_servers_numbers() -> None:
    # CUDA_VISIBLE_DEVICES=1,0: the process's device 0 is physical 1, which configs call GPU 0.
    reordered = {"CUDA_VISIBLE_DEVICES": "1,0"}
    assert [local_device_id(gpu, reordered) for gpu in (0, 1)] == [0, 1]
    assert pinned_environment(0, reordered)["CUDA_VISIBLE_DEVICES"] == "1"
    assert pinned_environment(1, reordered)["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_gpu_the_process_cannot_see_is_refused_by_name() -> None:
    assert local_device_id(3, {}) == 3  # unset: every device the driver has, by its number
    for visible in ("", "-1", "2", "1,9x,2", "GPU-8d4e"):
        listed = 0 if visible in ("", "-1") else 1
        with pytest.raises(Unavailable, match=rf"GPU {listed} is not visible in this process "
                                              rf"\(CUDA_VISIBLE_DEVICES='{visible}'\)"):
            local_device_id(listed, {"CUDA_VISIBLE_DEVICES": visible})
