"""A version's ``model.py`` as the python backend hands it to Triton's model code.

Owns what happens to the user's file before ``execute``: importing it as a fresh module per
instance (as Triton gives each instance its own process), with the version and model folders
on ``sys.path`` and ``import triton_python_backend_utils`` giving inferd's module; checking it
defines ``TritonPythonModel``; running its ``auto_complete_config`` on the config; and the
``args`` Triton's ``initialize`` receives for each instance. It creates no instance and runs
no request (``backend``'s); ``offline`` runs the same import and completion in a child process
for ``inferd check``.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk import ModelContext
from inferd.kernel.sdk.modelconfig import config_to_json
from inferd.plugins.backends.python import triton_python_backend_utils as pb_utils
from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

DEFAULT_FILENAME = "model.py"
UTILS_MODULE_NAME = "triton_python_backend_utils"
MODEL_CLASS_NAME = "TritonPythonModel"
InstanceGroup = model_config_pb2.ModelInstanceGroup
# TRITONSERVER_InstanceGroupKindString, which Triton passes as args["model_instance_kind"].
_KIND_NAMES = {
    InstanceGroup.KIND_AUTO: "AUTO",
    InstanceGroup.KIND_CPU: "CPU",
    InstanceGroup.KIND_GPU: "GPU",
    InstanceGroup.KIND_MODEL: "MODEL",
}

_module_numbers = itertools.count(1)
_sys_path_lock = threading.Lock()


def install_utils_module() -> None:
    """Make ``import triton_python_backend_utils`` give model code inferd's module."""
    sys.modules.setdefault(UTILS_MODULE_NAME, pb_utils)


def load_module(model: str, path: Path) -> ModuleType:
    """Import ``path`` as a new module. Like Triton, the version folder and the model folder
    are put on ``sys.path`` so ``model.py`` can import files next to it."""
    install_utils_module()
    with _sys_path_lock:
        for folder in (str(path.parent), str(path.parent.parent)):
            if folder not in sys.path:
                sys.path.append(folder)
    safe_name = re.sub(r"\W", "_", model)
    module_name = f"inferd_python_model_{next(_module_numbers)}_{safe_name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"model '{model}': {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickle look their module up there
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(module_name, None)
        raise InvalidArgument(
            f"model '{model}': importing {path} failed: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(getattr(module, MODEL_CLASS_NAME, None), type):
        sys.modules.pop(module_name, None)
        raise InvalidArgument(f"model '{model}': {path} defines no class {MODEL_CLASS_NAME}")
    return module


def forget_module(module: ModuleType) -> None:
    sys.modules.pop(module.__name__, None)


def auto_complete(model_class: type, config: ModelConfig, model: str) -> ModelConfig:
    """Run the class's ``auto_complete_config`` (when it has one) on the config."""
    complete = getattr(model_class, "auto_complete_config", None)
    if complete is None:
        return copy_config(config)
    given = pb_utils.ModelConfig(json.dumps(config_to_json(config)))
    try:
        returned = complete(given)
    except Exception as error:
        raise InvalidArgument(
            f"model '{model}': auto_complete_config failed: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(returned, pb_utils.ModelConfig):
        raise InvalidArgument(
            f"auto_complete_config function in model '{model}' must return a valid "
            "pb.ModelConfig object."
        )
    completed = model_config_pb2.ModelConfig()
    try:
        json_format.ParseDict(returned.as_dict(), completed)
    except (json_format.ParseError, TypeError, ValueError) as error:
        problem = str(error).split("\n", 1)[0]
        raise InvalidArgument(
            f"model '{model}': auto_complete_config produced an invalid config: {problem}"
        ) from None
    return completed


def copy_config(config: ModelConfig) -> ModelConfig:
    """A copy of ``config`` the model may change without touching control's."""
    copied = model_config_pb2.ModelConfig()
    copied.CopyFrom(config)
    return copied


def instance_args(config: ModelConfig, context: ModelContext, index: int) -> dict[str, str]:
    """Triton's ``initialize`` arguments for instance ``index`` (counted across the groups)."""
    kind, name, device = "CPU", f"{context.name}_0_{index}", 0
    position = index
    for group_number, group in enumerate(config.instance_group):
        count = max(group.count, 1)
        if position < count:
            kind = _KIND_NAMES.get(group.kind, "CPU")
            name = f"{group.name or f'{context.name}_{group_number}'}_{position}"
            if group.kind == InstanceGroup.KIND_GPU and group.gpus:
                device = group.gpus[position % len(group.gpus)]
            break
        position -= count
    return {
        "model_config": json.dumps(config_to_json(config)),
        "model_instance_kind": kind,
        "model_instance_name": name,
        "model_instance_device_id": str(device),
        "model_repository": str(context.model_dir),
        "model_version": str(context.version),
        "model_name": context.name,
    }
