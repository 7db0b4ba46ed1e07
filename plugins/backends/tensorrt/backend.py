"""The TensorRT backend: serialized engines (``model.plan``) run on the GPU of their executor.

Owns loading an engine (``tensorrt`` imported here, inside a GPU executor, never in the main
process), auto-completing the config from the engine's I/O tensors (names, types, shapes;
``max_batch_size`` from the first optimization profile when every input's first dimension is
dynamic, as Triton's TensorRT backend does), checking the config against the engine, and one
execution context and CUDA stream per instance (the group's ``profile`` picks its
optimization profile). TensorRT runs on GPUs only: a ``KIND_CPU`` group fails the load. The
calls into TensorRT and CUDA are ``engine``'s; the batch skeleton is the kernel's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk import Backend, Instance, Model, ModelContext
from inferd.kernel.sdk.batching import BatchPlan, ConfiguredTensor, NamedTensorInstance
from inferd.kernel.sdk.modelconfig import check_shape, fill_tensor_entry
from inferd.plugins.backends.tensorrt import engine as trt_engine
from inferd.protocols.errors import InferdError, Internal, InvalidArgument, Unavailable
from inferd.protocols.messages import Tensor
from inferd.protocols.tensors import numpy_dtype

DEFAULT_FILENAME = "model.plan"
PLATFORM = "tensorrt_plan"
BACKEND = "tensorrt"
KIND = model_config_pb2.ModelInstanceGroup


TensorPlan = ConfiguredTensor


@dataclass(frozen=True, slots=True)
class EnginePlan(BatchPlan[TensorPlan]):
    @classmethod
    def from_config(cls, config: ModelConfig, model: str, version: int) -> EnginePlan:
        return cls(model=model, version=str(version), batching=config.max_batch_size > 0,
                   inputs={entry.name: ConfiguredTensor.of(entry) for entry in config.input},
                   outputs=tuple(ConfiguredTensor.of(entry) for entry in config.output))


def complete_config(config: ModelConfig, signature: trt_engine.Signature) -> ModelConfig:
    """A copy of ``config`` with what it leaves out filled from the engine."""
    completed = ModelConfig()
    completed.CopyFrom(config)
    completed.platform = completed.platform or PLATFORM
    completed.backend = completed.backend or BACKEND
    declares = bool(completed.input) or bool(completed.output)
    tensors = (*signature.inputs, *signature.outputs)
    dynamic_batch = bool(tensors) and all(t.shape and t.shape[0] == -1 for t in tensors)
    if completed.max_batch_size == 0 and not declares and dynamic_batch and signature.inputs:
        largest = [t.profiles[0][1][0] for t in signature.inputs if t.profiles]
        completed.max_batch_size = max(1, min(largest)) if largest else 1
    batching = completed.max_batch_size > 0
    for tensors_of, entries in ((signature.inputs, completed.input),
                                (signature.outputs, completed.output)):
        # As Triton's FixIO: a config that lists none of a kind gets the engine's; one that
        # lists some keeps its own list (check_config then refuses an engine tensor it left out).
        listed = bool(entries)
        by_name = {entry.name: entry for entry in entries}
        for tensor in tensors_of:
            entry = by_name.get(tensor.name)
            if entry is None and not listed:
                entry = entries.add(name=tensor.name)
            if entry is not None:
                fill_tensor_entry(entry, tensor.data_type, tensor.shape, batching)
    return completed


def check_config(config: ModelConfig, signature: trt_engine.Signature) -> None:
    """Raise ``InvalidArgument`` where ``config`` and the engine disagree."""
    model = config.name
    for kind, tensors, entries in (("input", signature.inputs, config.input),
                                   ("output", signature.outputs, config.output)):
        engine_tensors = {t.name: t for t in tensors}
        for tensor in tensors:
            if tensor.data_type == model_config_pb2.TYPE_INVALID:
                raise InvalidArgument(f"model '{model}': the engine's {kind} '{tensor.name}' "
                                      "has a data type inferd cannot serve")
        for entry in entries:
            found = engine_tensors.get(entry.name)
            if found is None:
                raise InvalidArgument(
                    f"model '{model}': unexpected {kind} '{entry.name}', the engine's {kind}s "
                    f"are: {', '.join(engine_tensors)}")
            if entry.data_type != found.data_type:
                raise InvalidArgument(
                    f"model '{model}': {kind} '{entry.name}' has data type "
                    f"{model_config_pb2.DataType.Name(entry.data_type)} but the engine's is "
                    f"{model_config_pb2.DataType.Name(found.data_type)}")
            check_shape(entry, found.shape, max_batch_size=config.max_batch_size,
                        where=f"model '{model}', {kind} '{entry.name}'", source="the engine")
        configured = {entry.name for entry in entries}
        for tensor in tensors:
            # Every engine tensor needs an address at execution: Triton refuses the load.
            if tensor.name not in configured:
                raise InvalidArgument(
                    f"expected configuration for {kind} '{tensor.name}' for {model}")


def instance_profiles(config: ModelConfig) -> list[int]:
    """The optimization profile of each instance, in instance-group order (0 unless the
    group's ``profile`` names one); raises for a group that is not on a GPU."""
    profiles: list[int] = []
    for group in config.instance_group:
        if group.kind not in (KIND.KIND_GPU, KIND.KIND_AUTO):
            raise Unavailable(
                f"model '{config.name}': instance group '{group.name}' is "
                f"{KIND.Kind.Name(group.kind)}, but TensorRT engines run on GPUs only")
        profile = int(group.profile[0]) if group.profile else 0
        profiles += [profile] * (max(1, group.count) * max(1, len(group.gpus)))
    return profiles or [0]


class TensorRTInstance(NamedTensorInstance):
    def __init__(self, context: Any, plan: EnginePlan) -> None:
        super().__init__(plan)
        self._context = context
        self._outputs = [(o.name, numpy_dtype(o.datatype)) for o in plan.outputs]

    def close(self) -> None:
        if self._context is not None:
            self._context.close()
            self._context = None

    def _bytes_input(self, tensor: Tensor) -> np.ndarray:
        raise InvalidArgument(f"TensorRT engines take no BYTES input ('{tensor.name}')")

    def _infer(self, inputs: dict[str, np.ndarray], output_plans: list[TensorPlan]
               ) -> list[np.ndarray]:
        wanted = {plan.name for plan in output_plans}
        arrays = self._context.run(inputs, self._outputs)
        return [array for (name, _), array in zip(self._outputs, arrays, strict=True)
                if name in wanted]

    def _run_failure(self, error: Exception) -> InferdError:
        if isinstance(error, InferdError):
            return error
        return Internal(f"TensorRT failed to run model '{self._plan.model}': "
                        f"{type(error).__name__}: {error}")


class TensorRTModel(Model):
    def __init__(self, config: ModelConfig, plan: EnginePlan, profiles: list[int],
                 new_context: Callable[[int], Any]) -> None:
        self.config = config
        self._plan = plan
        self._profiles = profiles
        self._new_context = new_context

    def create_instance(self, index: int) -> Instance:
        profile = self._profiles[index % len(self._profiles)]
        return TensorRTInstance(self._new_context(profile), self._plan)


class TensorRTBackend(Backend):
    name = BACKEND

    def __init__(self, import_runtime: Callable[[], tuple[Any, Any]] | None = None) -> None:
        # The one seam unit tests replace: the tensorrt module and the CUDA runtime.
        self._import_runtime = import_runtime or trt_engine.import_tensorrt

    def load_model(self, context: ModelContext) -> Model:
        profiles = instance_profiles(context.config)
        tensorrt, cuda = self._import_runtime()
        path = context.model_file(DEFAULT_FILENAME)
        if not path.is_file():
            raise InvalidArgument(f"model '{context.name}': model file {path} does not exist")
        engine = trt_engine.load_engine(tensorrt, path)
        signature = trt_engine.signature(tensorrt, engine)
        for profile in profiles:
            if profile >= signature.profile_count:
                raise InvalidArgument(
                    f"model '{context.name}': instance group profile {profile} does not exist;"
                    f" the engine has {signature.profile_count} optimization profile(s)")
        config = (complete_config(context.config, signature) if context.auto_complete
                  else context.config)
        if not config.name:
            config.name = context.name
        check_config(config, signature)
        plan = EnginePlan.from_config(config, context.name, context.version)
        return TensorRTModel(config, plan, profiles,
                             lambda profile: trt_engine.Context(engine, cuda, profile, device=0))
