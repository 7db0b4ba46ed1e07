"""Where a backend's instance runs: its CUDA device, and the outputs written in place.

``local_device_id`` is the CUDA device number a framework uses in this process for a config's
GPU id; ``written_window`` the window of a client's CUDA shared memory an output may be written
in place, so it crosses no copy.

Both are the kernel's own (``inferd.kernel.runtime.devices`` pins executors to GPUs;
``inferd.kernel.actors.executor.device_memory`` maps clients' CUDA regions) and are
re-exported here: names the SDK takes from the kernel, listed in
``tests/plugins/test_sdk_boundary.py``.
"""

from __future__ import annotations

from inferd.kernel.actors.executor.device_memory import written_window
from inferd.kernel.runtime.devices import local_device_id

__all__ = ["local_device_id", "written_window"]
