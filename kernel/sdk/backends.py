"""The plugin SDK for backends: the helpers a backend uses inside an executor process (see
``inferd.kernel.sdk`` for the contracts and the boundary). Batched instances
(``inferd.kernel.actors.executor.batched_instance``: one execute over a batch of requests,
configured tensors by name), config completion (``inferd.kernel.modelconfig.completion``: a config's
inputs and outputs from the model file, Triton's rules), the once-per-process thread settings
(``inferd.kernel.actors.executor.process_threads``), the device an instance runs on
(``inferd.kernel.runtime.devices``), the window of CUDA shared memory an output is written in place
(``inferd.kernel.actors.executor.device_memory``), a config as JSON or read from config.pbtxt
text (``inferd.kernel.modelconfig.reading``); and, from ``inferd.protocols``, what every backend
handles: the request and response messages and ``Tensor``, the errors an instance returns, and
the datatype and tensor helpers."""

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
from inferd.protocols.errors import (
    DeadlineExceeded,
    InferdError,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unsupported,
)
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import (
    config_type_to_datatype,
    datatype_of,
    datatype_to_config_type,
    deserialize_bytes,
    from_numpy,
    numpy_dtype,
    serialize_bytes,
)

__all__ = [
    "InferRequest", "InferResponse", "Tensor",
    "InferdError", "InvalidArgument", "NotFound", "Unavailable", "Unsupported", "Internal",
    "DeadlineExceeded",
    "config_type_to_datatype", "datatype_to_config_type", "numpy_dtype", "datatype_of",
    "from_numpy", "serialize_bytes", "deserialize_bytes",
    "BatchPlan", "BatchedInstance", "ConfiguredTensor", "NamedTensorInstance", "PreparedRequest",
    "DEFAULT_MAX_BATCH_SIZE", "DYNAMIC", "SignatureTensor", "batchable", "check_shape",
    "complete_declared",
    "default_max_batch_size", "fill_tensor_entry",
    "local_device_id", "written_window",
    "config_to_json", "parse_config_text", "FORK_PARAMETER", "forks_after_initialize",
    "Pools", "ProcessThreads", "thread_parameter",
]
