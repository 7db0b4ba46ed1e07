"""The TensorFlow backend: SavedModels (``model.savedmodel/``) and GraphDefs
(``model.graphdef``) run as Triton's tensorflow backend runs them.

Owns the config's side of a TensorFlow model: which signature and graph tag a SavedModel is
served by (Triton's ``TF_SIGNATURE_DEF``, default ``serving_default``, and ``TF_GRAPH_TAG``,
default ``serve``), auto-completing inputs, outputs and ``max_batch_size`` from a
SavedModel's signature (a GraphDef says too little, so its config must list its tensors, as
in Triton), checking the config against the program, the thread pools
(``TF_NUM_INTRA_THREADS`` / ``TF_NUM_INTER_THREADS``, once per process), the device of each
instance (``KIND_GPU`` needs a GPU TensorFlow sees: never a silent CPU fallback), and how
many instances share one loaded program (``MAX_SESSION_SHARE_COUNT``, default 1: each its
own). Parameters it does not implement fail the load naming them. TensorFlow runs in an
executor process of its own (the spec's ``isolate``); calls into it are ``graphs``'s, the
batch skeleton the kernel's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk import Backend, Instance, Model, ModelContext
from inferd.kernel.sdk.batching import BatchPlan, ConfiguredTensor, NamedTensorInstance
from inferd.kernel.sdk.devices import local_device_id
from inferd.kernel.sdk.modelconfig import (
    DEFAULT_MAX_BATCH_SIZE,
    SignatureTensor,
    batchable,
    check_shape,
    complete_declared,
    default_max_batch_size,
)
from inferd.kernel.sdk.process_threads import ProcessThreads, thread_parameter
from inferd.plugins.backends.tensorflow import graphs
from inferd.protocols.errors import InferdError, Internal, InvalidArgument, Unavailable

BACKEND = "tensorflow"
SAVEDMODEL = "tensorflow_savedmodel"
GRAPHDEF = "tensorflow_graphdef"
DEFAULT_FILENAMES = {SAVEDMODEL: "model.savedmodel", GRAPHDEF: "model.graphdef"}

# Triton's tensorflow backend parameters.
SIGNATURE_PARAMETER, DEFAULT_SIGNATURE = "TF_SIGNATURE_DEF", "serving_default"
TAG_PARAMETER, DEFAULT_TAG = "TF_GRAPH_TAG", "serve"
SHARE_PARAMETER = "MAX_SESSION_SHARE_COUNT"
PER_SESSION_THREADS_PARAMETER = "TF_USE_PER_SESSION_THREADS"
INIT_OPS_PARAMETER = "TF_INIT_OPS_FILE"
TRUE_WORDS = ("true", "on", "1")

KIND = model_config_pb2.ModelInstanceGroup
CPU_DEVICE = "/CPU:0"

PROCESS_THREADS = ProcessThreads("tensorflow", "TF_NUM_INTRA_THREADS", "TF_NUM_INTER_THREADS",
                                 minimum=0)
"""TensorFlow's pools in this executor process (a count of 0 lets TensorFlow choose)."""


@dataclass(frozen=True, slots=True)
class ExecutionPlan(BatchPlan[ConfiguredTensor]):
    @classmethod
    def from_config(cls, config: ModelConfig, version: int) -> ExecutionPlan:
        return cls(model=config.name, version=str(version), batching=config.max_batch_size > 0,
                   inputs={entry.name: ConfiguredTensor.of(entry) for entry in config.input},
                   outputs=tuple(ConfiguredTensor.of(entry) for entry in config.output))


@dataclass(frozen=True, slots=True)
class Serving:
    """What the config's parameters say about serving the model file."""

    signature: str
    tag: str
    share_count: int

    @classmethod
    def from_config(cls, config: ModelConfig) -> Serving:
        parameters = config.parameters

        def text(key: str, default: str) -> str:
            value = parameters[key].string_value.strip() if key in parameters else ""
            if value and config.platform == GRAPHDEF:
                raise InvalidArgument(f"model '{config.name}': parameter {key} names a "
                                      "SavedModel's graph; a GraphDef has none")
            return value or default

        if INIT_OPS_PARAMETER in parameters:
            raise InvalidArgument(
                f"model '{config.name}': parameter {INIT_OPS_PARAMETER} is not supported by "
                "inferd's tensorflow backend; freeze the initialization into the GraphDef or "
                "serve a SavedModel, whose initializers run when it loads")
        per_session = parameters.get(PER_SESSION_THREADS_PARAMETER)
        if per_session is not None and per_session.string_value.strip().lower() in TRUE_WORDS:
            raise InvalidArgument(
                f"model '{config.name}': parameter {PER_SESSION_THREADS_PARAMETER} is not "
                "supported: TensorFlow 2 runs every model of a process on the process's pools "
                "(size them with TF_NUM_INTRA_THREADS and TF_NUM_INTER_THREADS)")
        return cls(signature=text(SIGNATURE_PARAMETER, DEFAULT_SIGNATURE),
                   tag=text(TAG_PARAMETER, DEFAULT_TAG),
                   share_count=thread_parameter(config, SHARE_PARAMETER) or 1)


def complete_config(config: ModelConfig, program: graphs.Program,
                    default_batch: int = DEFAULT_MAX_BATCH_SIZE) -> ModelConfig:
    """A copy of ``config`` with what it leaves out filled from a SavedModel's signature
    (``default_batch``: what a batchable model gets)."""
    completed = ModelConfig()
    completed.CopyFrom(config)
    completed.backend = completed.backend or BACKEND
    completed.platform = completed.platform or SAVEDMODEL
    known = [tensor for tensor in (*program.inputs, *program.outputs) if tensor.shape is not None]
    declares = bool(completed.input) or bool(completed.output)
    if (completed.max_batch_size == 0 and not declares and default_batch > 0
            and len(known) == len(program.inputs) + len(program.outputs)
            and batchable(cast(list[SignatureTensor], known))):
        completed.max_batch_size = default_batch
        if completed.WhichOneof("scheduling_choice") is None:
            completed.dynamic_batching.SetInParent()
    batching = completed.max_batch_size > 0
    for entries, tensors in ((completed.input, program.inputs),
                             (completed.output, program.outputs)):
        declared = {entry.name for entry in entries}
        for tensor in tensors:
            if tensor.shape is None and (not declared or tensor.name in declared):
                entry = next((e for e in entries if e.name == tensor.name), None)
                if entry is None or not entry.dims:
                    raise InvalidArgument(
                        f"model '{completed.name}': the signature's tensor '{tensor.name}' "
                        "has an unknown rank; declare its dims in the configuration")
        complete_declared(entries, cast(list[SignatureTensor],
                                        [t for t in tensors if t.shape is not None]), batching)
    return completed


def check_config(config: ModelConfig, program: graphs.Program, source: str) -> None:
    """Raise ``InvalidArgument`` where ``config`` and the program disagree; ``source`` names
    the program in messages ("the SavedModel's signature 'serving_default'")."""
    model = config.name
    for kind, tensors, entries in (("input", program.inputs, config.input),
                                   ("output", program.outputs, config.output)):
        by_name = {tensor.name: tensor for tensor in tensors}
        for entry in entries:
            tensor = by_name.get(entry.name)
            if tensor is None:
                raise InvalidArgument(
                    f"model '{model}': unexpected {kind} '{entry.name}', {source} has the "
                    f"{kind}s: {', '.join(by_name)}")
            where = f"model '{model}', {kind} '{entry.name}'"
            if tensor.data_type == model_config_pb2.TYPE_INVALID:
                raise InvalidArgument(f"{where}: TensorFlow dtype {tensor.dtype_name} has no "
                                      "config data type")
            if entry.data_type != tensor.data_type:
                raise InvalidArgument(
                    f"{where}: the configuration says {_type_name(entry.data_type)} but "
                    f"{source} has {_type_name(tensor.data_type)} ({tensor.dtype_name})")
            if tensor.shape is not None:
                check_shape(entry, tensor.shape, max_batch_size=config.max_batch_size,
                            where=where, source=source)
    configured = {entry.name.split(":")[0] for entry in config.input}
    missing = sorted(program.required - configured)
    if missing:
        raise InvalidArgument(
            f"model '{model}': {source} needs the input(s) {missing}, which the configuration "
            "does not list")


def instance_devices(config: ModelConfig, gpus: int, version: str) -> list[str]:
    """The TensorFlow device of each instance, in instance-group order (``count`` per listed
    GPU); raises for a GPU instance when TensorFlow sees no GPU."""
    devices: list[str] = []
    for group in config.instance_group:
        count = max(group.count, 1)
        if group.kind != KIND.KIND_GPU:
            devices += [CPU_DEVICE] * count
            continue
        if gpus == 0:
            raise Unavailable(
                f"model '{config.name}': instance group '{group.name}' is KIND_GPU but "
                f"TensorFlow {version} sees no GPU here (tensorflow-cpu has no GPU support); "
                "the tensorflow backend does not fall back to the CPU, use KIND_CPU for that")
        for gpu in list(group.gpus) or [0]:
            devices += [f"/GPU:{local_device_id(gpu)}"] * count
    return devices or [CPU_DEVICE]


class TensorFlowInstance(NamedTensorInstance):
    """One program on one device; programs may be shared by instances (``run`` is
    thread-safe), each instance is run by one executor thread at a time."""

    def __init__(self, program: graphs.Program, device: str, plan: ExecutionPlan) -> None:
        super().__init__(plan)
        self._program: graphs.Program | None = program
        self._device = device

    def close(self) -> None:
        self._program = None

    def _infer(self, inputs: dict[str, np.ndarray], output_plans: list[ConfiguredTensor]
               ) -> list[np.ndarray]:
        if self._program is None:
            raise RuntimeError("the instance is closed")
        return self._program.run(inputs, [plan.name for plan in output_plans], self._device)

    def _run_failure(self, error: Exception) -> InferdError:
        if isinstance(error, InferdError):
            return error
        # TensorFlow's OpError keeps the op's own words in ``message``, without the trace.
        message = str(getattr(error, "message", "") or error).strip().splitlines()
        text = message[0] if message else type(error).__name__
        if type(error).__name__ == "InvalidArgumentError":
            return InvalidArgument(f"TensorFlow refused the input of model "
                                   f"'{self._plan.model}': {text}")
        return Internal(f"TensorFlow failed to run model '{self._plan.model}': "
                        f"{type(error).__name__}: {text}")


class TensorFlowModel(Model):
    """One loaded version: its programs, loaded per device and shared by up to
    ``share_count`` instances each."""

    def __init__(self, config: ModelConfig, plan: ExecutionPlan, devices: list[str],
                 share_count: int, load: Callable[[str], graphs.Program],
                 first: graphs.Program) -> None:
        self.config = config
        self._plan = plan
        self._devices = devices
        self._share_count = share_count
        self._load = load
        # The program read for the signature serves the first instances of the first device.
        self._programs: dict[tuple[str, int], graphs.Program] = {(devices[0], 0): first}

    def create_instance(self, index: int) -> Instance:
        device = self._devices[index % len(self._devices)]
        ordinal = self._devices[:index % len(self._devices)].count(device)
        key = (device, ordinal // self._share_count)
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = self._load(device)
        return TensorFlowInstance(program, device, self._plan)

    def unload(self) -> None:
        self._programs.clear()


class TensorFlowBackend(Backend):
    name = BACKEND

    def __init__(self, import_tensorflow: Callable[[], ModuleType] | None = None) -> None:
        self._import_tensorflow = import_tensorflow or graphs.import_tensorflow

    def load_model(self, context: ModelContext) -> Model:
        config = ModelConfig()
        config.CopyFrom(context.config)
        config.name = config.name or context.name
        config.platform = config.platform or SAVEDMODEL
        serving = Serving.from_config(config)
        tf = self._import_tensorflow()
        PROCESS_THREADS.apply_to(graphs.thread_pools(tf), config, context.options)
        devices = instance_devices(config, graphs.gpu_count(tf), tf.__version__)
        path = context.model_file(DEFAULT_FILENAMES[config.platform])
        load = self._loader(tf, config, serving, path)
        try:
            first = load(devices[0])
        except InvalidArgument as error:
            raise InvalidArgument(f"model '{config.name}': {error.message}") from None
        if config.platform == SAVEDMODEL:
            source = f"the SavedModel's signature '{serving.signature}'"
            if context.auto_complete:
                config = complete_config(config, first,
                                         default_max_batch_size(context.options, BACKEND))
        else:
            source = "the GraphDef"
        check_config(config, first, source)
        plan = ExecutionPlan.from_config(config, context.version)
        return TensorFlowModel(config, plan, devices, serving.share_count, load, first)

    @staticmethod
    def _loader(tf: ModuleType, config: ModelConfig, serving: Serving, path: Any
                ) -> Callable[[str], graphs.Program]:
        if config.platform == SAVEDMODEL:
            return lambda device: graphs.load_savedmodel(tf, path, serving.tag,
                                                         serving.signature, device)
        inputs = [entry.name for entry in config.input]
        outputs = [entry.name for entry in config.output]
        return lambda device: graphs.load_graphdef(tf, path, inputs, outputs, device)


def _type_name(data_type: int) -> str:
    return str(model_config_pb2.DataType.Name(data_type))
