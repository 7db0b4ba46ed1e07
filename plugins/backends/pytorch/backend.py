"""The PyTorch backend: loads TorchScript (``model.pt``) and ``torch.export`` (``model.pt2``)
models and places their instances on the CPU or a CUDA device.

Owns importing torch (lazily, so only its models suffer when it is missing), finding the
model file, the device of each instance (``KIND_GPU`` needs CUDA: without it the load fails,
never falls back to the CPU), the process's thread pools (``threads``), and checking and
completing the config against the program (``autocomplete``, ``naming``). Running requests
is ``instance``'s job. The executor imports this module only when a model needs it.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk import Backend, Instance, Model, ModelContext
from inferd.kernel.sdk.devices import local_device_id
from inferd.plugins.backends.pytorch.autocomplete import (
    complete_exported,
    copy_config,
    require_listed_tensors,
)
from inferd.plugins.backends.pytorch.instance import ExecutionPlan, PyTorchInstance
from inferd.plugins.backends.pytorch.naming import bind_script_inputs, bind_script_outputs
from inferd.plugins.backends.pytorch.programs import Program, load_program
from inferd.plugins.backends.pytorch.tensors import torch_dtype_name
from inferd.plugins.backends.pytorch.threads import PROCESS_THREADS
from inferd.protocols.errors import InvalidArgument, Unavailable

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger(__name__)

DEFAULT_FILENAME = "model.pt"
MISSING_TORCH = (
    "torch is not installed on this machine; install the pinned CPU wheel "
    "(pip install torch==2.13.0, or make setup WITH_TORCH=1) before inferd[torch]"
)

InstanceGroup = model_config_pb2.ModelInstanceGroup


def import_torch() -> ModuleType:
    try:
        return importlib.import_module("torch")
    except ImportError as error:
        raise Unavailable(f"{MISSING_TORCH} ({error})") from None


def instance_devices(torch: ModuleType, config: ModelConfig) -> list[Any]:
    """One device per instance, in instance-group order (``count`` per listed GPU).
    ``KIND_MODEL`` keeps the devices the file was saved with (``None``)."""
    devices: list[Any] = []
    for group in config.instance_group:
        count = max(group.count, 1)
        if group.kind == InstanceGroup.KIND_MODEL:
            devices.extend(None for _ in range(count))
            continue
        if group.kind != InstanceGroup.KIND_GPU:
            devices.extend(torch.device("cpu") for _ in range(count))
            continue
        if not torch.cuda.is_available():
            raise InvalidArgument(
                f"model '{config.name}': instance group '{group.name}' is KIND_GPU but torch "
                f"{torch.__version__} sees no CUDA GPU here (CUDA build: "
                f"{torch.version.cuda or 'none'}); the pytorch backend does not fall back to "
                f"the CPU, use KIND_CPU for that"
            )
        for gpu in list(group.gpus) or [0]:
            device = torch.device("cuda", local_device_id(gpu))
            devices.extend(device for _ in range(count))
    return devices or [torch.device("cpu")]


def _model_path(context: ModelContext) -> Path:
    path = context.model_file(DEFAULT_FILENAME)
    if not path.is_file():
        raise InvalidArgument(f"model '{context.name}': model file {path} does not exist")
    return path


def _check_datatypes(config: ModelConfig) -> None:
    for kind, declared in (("input", config.input), ("output", config.output)):
        for entry in declared:
            torch_dtype_name(entry.data_type, kind, entry.name, config.name)


def bind(
    config: ModelConfig, program: Program, path: Path, auto_complete: bool
) -> tuple[ModelConfig, dict[str, int], dict[str, int]]:
    """The config the instances run with, and where each configured tensor goes."""
    if program.exported:
        completed, inputs, outputs = complete_exported(
            config, program.inputs, program.outputs, auto_complete
        )
        _check_datatypes(completed)
        return completed, inputs, outputs
    completed = copy_config(config)
    require_listed_tensors(completed, program.arguments, path.name)
    _check_datatypes(completed)
    names = [entry.name for entry in completed.input]
    if program.dict_input:
        inputs = {name: index for index, name in enumerate(names)}
    else:
        input_binding = bind_script_inputs(completed.name, names, program.arguments)
        if input_binding.warning:
            log.warning("%s", input_binding.warning)
        inputs = input_binding.positions
    output_binding = bind_script_outputs(
        completed.name, [entry.name for entry in completed.output], program.output_count
    )
    if output_binding.warning:
        log.warning("%s", output_binding.warning)
    return completed, inputs, output_binding.positions


class PyTorchModel(Model):
    """One loaded version: the completed config and what each instance's program needs."""

    def __init__(
        self,
        torch: ModuleType,
        path: Path,
        config: ModelConfig,
        plan: ExecutionPlan,
        devices: list[Any],
        first: tuple[Any, Program],
    ) -> None:
        self.config = config
        self._torch = torch
        self._path = path
        self._plan = plan
        self._devices = devices
        # The program loaded to read the file's signature serves the first instance on its
        # device, so a large model is not loaded twice.
        self._spare: tuple[Any, Program] | None = first

    def create_instance(self, index: int) -> Instance:
        device = self._devices[index % len(self._devices)]
        if self._spare is not None and self._spare[0] == device:
            program = self._spare[1]
            self._spare = None
        else:
            program = load_program(self._torch, self._path, device, self.config.name)
        return PyTorchInstance(self._torch, program, _run_device(self._torch, device), self._plan)

    def unload(self) -> None:
        self._spare = None


def _run_device(torch: ModuleType, device: Any) -> Any:
    # KIND_MODEL instances take their inputs on the CPU; the model moves them itself.
    return torch.device("cpu") if device is None else device


class PyTorchBackend(Backend):
    name = "pytorch"

    def load_model(self, context: ModelContext) -> Model:
        torch = import_torch()
        path = _model_path(context)
        config = copy_config(context.config)
        if not config.name:
            config.name = context.name
        PROCESS_THREADS.apply(torch, config, context.options)
        devices = instance_devices(torch, config)
        program = load_program(torch, path, devices[0], config.name)
        config, inputs, outputs = bind(config, program, path, context.auto_complete)
        plan = ExecutionPlan.build(config, context.version, inputs, outputs, program)
        return PyTorchModel(torch, path, config, plan, devices, (devices[0], program))
