"""The plugin SDK for backends: the helpers a backend uses inside an executor process (see
``inferd.kernel.sdk`` for the contracts and the boundary). Batched instances
(``inferd.kernel.actors.executor.batched_instance``: one execute over a batch of requests,
configured tensors by name), config completion (``inferd.kernel.modelconfig.completion``: a config's
inputs and outputs from the model file, Triton's rules), the once-per-process thread settings
(``inferd.kernel.actors.executor.process_threads``), the device an instance runs on
(``inferd.kernel.runtime.devices``), the window of CUDA shared memory an output is written in place
(``inferd.kernel.actors.executor.device_memory``) and a config as JSON or read from config.pbtxt
text (``inferd.kernel.modelconfig.reading``)."""

from __future__ import annotations

from inferd.kernel.actors.executor.batched_instance import (
    BatchedInstance,
    BatchPlan,
    ConfiguredTensor,
    NamedTensorInstance,
    PreparedRequest,
)
from inferd.kernel.actors.executor.device_memory import written_window
from inferd.kernel.actors.executor.process_threads import Pools, ProcessThreads, thread_parameter
from inferd.kernel.modelconfig.completion import (
    DEFAULT_MAX_BATCH_SIZE,
    DYNAMIC,
    SignatureTensor,
    batchable,
    check_shape,
    complete_declared,
    default_max_batch_size,
    fill_tensor_entry,
)
from inferd.kernel.modelconfig.reading import config_to_json, parse_config_text
from inferd.kernel.modelconfig.validation import FORK_PARAMETER, forks_after_initialize
from inferd.kernel.runtime.devices import local_device_id

__all__ = [
    "BatchPlan", "BatchedInstance", "ConfiguredTensor", "NamedTensorInstance", "PreparedRequest",
    "DEFAULT_MAX_BATCH_SIZE", "DYNAMIC", "SignatureTensor", "batchable", "check_shape",
    "complete_declared",
    "default_max_batch_size", "fill_tensor_entry",
    "local_device_id", "written_window",
    "config_to_json", "parse_config_text", "FORK_PARAMETER", "forks_after_initialize",
    "Pools", "ProcessThreads", "thread_parameter",
]
