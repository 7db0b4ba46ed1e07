"""The onnxruntime backend: loads ONNX models into onnxruntime sessions.

Owns importing onnxruntime (lazily, so only its models suffer when it is missing), finding the
model file, the session options and execution providers of each instance, and auto-completing
and validating the config against the model (rules in ``autocomplete``). Running requests is
``instance``'s job. The executor imports this module only when a model needs it.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk import Backend, Instance, Model, ModelContext
from inferd.kernel.sdk.devices import local_device_id
from inferd.kernel.sdk.modelconfig import default_max_batch_size
from inferd.plugins.backends.onnxruntime.autocomplete import (
    BACKEND,
    complete_config,
    model_tensor,
    validate_config,
)
from inferd.plugins.backends.onnxruntime.instance import ExecutionPlan, OnnxRuntimeInstance
from inferd.protocols.errors import InvalidArgument, Unavailable

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger(__name__)

DEFAULT_FILENAME = "model.onnx"
MISSING_ONNXRUNTIME = (
    "onnxruntime is not installed on this machine; install inferd[onnx] "
    "(or inferd[onnx-gpu] on a GPU machine)"
)
# The key Triton's onnxruntime backend reads from config `parameters`.
INTRA_OP_THREADS_PARAMETER = "intra_op_thread_count"
CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


def import_onnxruntime() -> ModuleType:
    # onnxruntime's POSIX telemetry (1.2x on) writes a ".ses" session file to $TMPDIR and
    # uploads events; a server does neither unasked. Read once, before its first import; a
    # value already in the server's environment is left as it is.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as error:
        raise Unavailable(f"{MISSING_ONNXRUNTIME} ({error})") from None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one instance runs: on the CPU, or on CUDA device ``device_id`` as this process
    numbers its visible devices."""

    cuda: bool
    device_id: int = 0


def instance_placements(config: ModelConfig, cuda_available: bool) -> list[Placement]:
    """One placement per instance, in instance-group order (``count`` per listed GPU)."""
    placements: list[Placement] = []
    for group in config.instance_group:
        count = max(group.count, 1)
        kind = group.kind
        if kind in (model_config_pb2.ModelInstanceGroup.KIND_CPU,
                    model_config_pb2.ModelInstanceGroup.KIND_MODEL) or (
            kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO and not cuda_available
        ):
            placements.extend(Placement(cuda=False) for _ in range(count))
            continue
        if not cuda_available:  # never a silent fallback to the CPU
            raise Unavailable(
                f"model '{config.name}': instance group '{group.name}' is KIND_GPU but "
                f"onnxruntime has no {CUDA_PROVIDER} here; install onnxruntime-gpu "
                "(inferd[onnx-gpu]) in place of onnxruntime on a machine with an NVIDIA GPU, "
                "or make the group KIND_CPU"
            )
        for gpu in list(group.gpus) or [0]:
            placement = Placement(cuda=True, device_id=local_device_id(gpu))
            placements.extend(placement for _ in range(count))
    return placements or [Placement(cuda=False)]


def _intra_op_threads(context: ModelContext) -> int:
    parameter = context.config.parameters.get(INTRA_OP_THREADS_PARAMETER)
    if parameter is None:
        return int(context.options.get("intra_op_threads", 1))
    try:
        threads = int(parameter.string_value)
    except ValueError:
        threads = -1
    if threads < 0:
        raise InvalidArgument(
            f"model '{context.name}': parameter {INTRA_OP_THREADS_PARAMETER} must be a "
            f"non-negative integer, got {parameter.string_value!r}"
        )
    return threads


def _model_path(context: ModelContext) -> Path:
    path = context.model_file(DEFAULT_FILENAME)
    if path.is_dir():
        # A folder holds the model with its external data files next to it.
        path = path / DEFAULT_FILENAME
    if not path.is_file():
        raise InvalidArgument(f"model '{context.name}': model file {path} does not exist")
    return path


class OnnxRuntimeModel(Model):
    """One loaded version: the completed config and what each instance's session needs."""

    def __init__(
        self,
        onnxruntime: ModuleType,
        path: Path,
        config: ModelConfig,
        name: str,
        version: int,
        intra_op_threads: int,
        first_session: tuple[Placement, Any],
    ) -> None:
        self.config = config
        self._onnxruntime = onnxruntime
        self._path = path
        self._intra_op_threads = intra_op_threads
        self._plan = ExecutionPlan.from_config(config, name, version)
        self._placements = instance_placements(config, _cuda_available(onnxruntime))
        # The session opened at load to read the model's signature serves the first instance
        # placed like it, so a large model is not loaded twice.
        self._spare_session: tuple[Placement, Any] | None = first_session

    def create_instance(self, index: int) -> Instance:
        placement = self._placements[index % len(self._placements)]
        if self._spare_session is not None and self._spare_session[0] == placement:
            session = self._spare_session[1]
            self._spare_session = None
        else:
            session = open_session(self._onnxruntime, self._path, placement, self._intra_op_threads)
        return OnnxRuntimeInstance(session, self._plan)

    def unload(self) -> None:
        self._spare_session = None


def _cuda_available(onnxruntime: ModuleType) -> bool:
    return CUDA_PROVIDER in onnxruntime.get_available_providers()


def open_session(
    onnxruntime: ModuleType, path: Path, placement: Placement, intra_op_threads: int
) -> Any:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    providers: list[Any] = [CPU_PROVIDER]
    if placement.cuda:
        providers.insert(0, (CUDA_PROVIDER, {"device_id": str(placement.device_id)}))
    try:
        session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=providers
        )
    except Exception as error:
        raise InvalidArgument(f"onnxruntime could not load {path}: {error}") from None
    if placement.cuda and CUDA_PROVIDER not in session.get_providers():
        # onnxruntime falls back to the CPU when CUDA cannot start (a driver or library
        # missing): a GPU instance that would quietly run on the CPU fails its load instead.
        raise Unavailable(
            f"onnxruntime could not use {CUDA_PROVIDER} on device {placement.device_id} for "
            f"{path.name} (it would run on {', '.join(session.get_providers())}); see the "
            "executor's log for onnxruntime's reason"
        )
    return session


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"

    def load_model(self, context: ModelContext) -> Model:
        onnxruntime = import_onnxruntime()
        path = _model_path(context)
        threads = _intra_op_threads(context)
        first_placement = instance_placements(context.config, _cuda_available(onnxruntime))[0]
        session = open_session(onnxruntime, path, first_placement, threads)
        config = _completed_config(context, session)
        return OnnxRuntimeModel(
            onnxruntime,
            path,
            config,
            name=context.name,
            version=context.version,
            intra_op_threads=threads,
            first_session=(first_placement, session),
        )


def _completed_config(context: ModelContext, session: Any) -> ModelConfig:
    """The config the model runs with: auto-completed from the session's signature (when the
    context allows it) and checked against it."""
    inputs = [model_tensor(arg.name, arg.type, arg.shape) for arg in session.get_inputs()]
    outputs = [model_tensor(arg.name, arg.type, arg.shape) for arg in session.get_outputs()]
    config = context.config
    if context.auto_complete:
        config = complete_config(config, inputs, outputs,
                                 default_max_batch_size(context.options, BACKEND))
    else:
        config = _copy(config)
    if not config.name:
        config.name = context.name
    validate_config(config, inputs, outputs)
    return config


def complete_offline(context: ModelContext) -> ModelConfig:
    """``BackendSpec.completion``: what a load would make of the config, from a CPU session
    opened on the model file here (no executor, no server), then dropped."""
    path = _model_path(context)
    session = open_session(import_onnxruntime(), path, Placement(cuda=False), 1)
    return _completed_config(context, session)


def _copy(config: ModelConfig) -> ModelConfig:
    copied = model_config_pb2.ModelConfig()
    copied.CopyFrom(config)
    return copied
