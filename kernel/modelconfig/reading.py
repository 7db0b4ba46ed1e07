"""Pure functions on Triton's ``ModelConfig`` protobuf: parse, normalize, print.

Owns reading a config from protobuf text (``config.pbtxt``) or JSON (a load override) with
errors that say ``file:line:col: problem``, filling in Triton's defaults (name, backend and
platform, default model file, version policy, instance groups, batching defaults), and
printing the normalized config as Triton's ``GET v2/models/{m}/config`` JSON. The validation
rules live in ``inferd.kernel.modelconfig.validation`` (an ensemble's graph in
``ensemble_graph``) and are re-exported here. Nothing here touches the file system: whether a
model file exists is asked through a callable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.modelconfig.ensemble_graph import check_ensemble_graph, validate_ensemble
from inferd.kernel.modelconfig.validation import ENSEMBLE_PLATFORM, PLATFORM_BACKENDS, validate
from inferd.kernel.sdk.backends import BackendRegistry
from inferd.kernel.sdk.config_text import config_to_json as config_to_json
from inferd.kernel.sdk.config_text import parse_config_text as parse_config_text
from inferd.protocols.errors import InvalidArgument

__all__ = [
    "ENSEMBLE_PLATFORM",
    "MODEL_FILES",
    "PLATFORM_BACKENDS",
    "ModelConfig",
    "backend_can_auto_complete",
    "check_ensemble_graph",
    "config_to_json",
    "config_to_json_text",
    "model_file_candidates",
    "normalize",
    "parse_config_json",
    "parse_config_text",
    "validate",
    "validate_ensemble",
]

InstanceGroup = model_config_pb2.ModelInstanceGroup

MODEL_FILES: tuple[tuple[str, str], ...] = (
    ("model.savedmodel", "tensorflow"),
    ("model.graphdef", "tensorflow"),
    ("model.plan", "tensorrt"),
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.pt2", "pytorch"),
    ("model.py", "python"),
)
"""(default model file, backend) in the order Triton looks for them in a version folder."""

# A backend's platform; the first listed where a backend has several (TensorFlow's formats,
# told apart by their model file: FILE_PLATFORMS).
BACKEND_PLATFORMS = {backend: platform for platform, backend in reversed(PLATFORM_BACKENDS.items())}
FILE_PLATFORMS = {
    "model.savedmodel": "tensorflow_savedmodel",
    "model.graphdef": "tensorflow_graphdef",
}
PLATFORM_FILES = {platform: filename for filename, platform in FILE_PLATFORMS.items()}
TORCH_EXPORT_FILENAME = "model.pt2"
SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000



def parse_config_json(text: str) -> ModelConfig:
    """Parse a ModelConfig given as JSON (camelCase or snake_case field names)."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InvalidArgument(f"config override is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise InvalidArgument("config override must be a JSON object (a ModelConfig)")
    config = ModelConfig()
    try:
        json_format.ParseDict(document, config)
    except (json_format.ParseError, RecursionError) as error:
        problem = str(error).split("\n", 1)[0].rstrip(".")
        raise InvalidArgument(f"config override is not a valid model config: {problem}") from None
    return config


def model_file_candidates(backends: BackendRegistry) -> list[tuple[str, str]]:
    """(file name, backend) pairs in lookup order: the built-in files first (a registered
    backend claiming one of them wins over the built-in name), then other registered
    backends' default files."""
    candidates = []
    for filename, builtin_backend in MODEL_FILES:
        spec = backends.for_filename(filename)
        candidates.append((filename, spec.name if spec is not None else builtin_backend))
    known = {filename for filename, _ in candidates}
    for spec in sorted(backends, key=lambda spec: spec.name):
        if spec.default_filename and spec.default_filename not in known:
            candidates.append((spec.default_filename, spec.name))
            known.add(spec.default_filename)
    return candidates


def normalize(
    config: ModelConfig,
    *,
    folder_name: str,
    backends: BackendRegistry,
    default_filename_present: Callable[[str], bool] | None = None,
    gpu_ids: Sequence[int] = (),
    backend_uses_gpu: Callable[[str], bool] | None = None,
) -> ModelConfig:
    """Return a copy of ``config`` with Triton's defaults filled in.

    ``default_filename_present(name)`` says whether a version folder holds a file or folder
    of that name; it is used to infer the backend when the config names none. ``gpu_ids``
    are the GPUs of this machine (a ``KIND_GPU`` group naming none gets them all);
    ``KIND_AUTO`` groups become ``KIND_GPU`` when there are any and ``backend_uses_gpu``
    (every backend unless given) says the model's backend can run on one, else ``KIND_CPU``.
    """
    normalized = ModelConfig()
    normalized.CopyFrom(config)
    if not normalized.name:
        normalized.name = folder_name
    present = default_filename_present or (lambda filename: False)
    if normalized.platform != ENSEMBLE_PLATFORM:
        _fill_backend(normalized, backends, present)
        on_gpu = backend_uses_gpu is None or backend_uses_gpu(normalized.backend)
        _fill_instance_groups(normalized, gpu_ids, auto_on_gpu=on_gpu)
        _fill_pinned_memory(normalized)
    if normalized.version_policy.WhichOneof("policy_choice") is None:
        normalized.version_policy.latest.num_versions = 1
    _fill_batching_defaults(normalized)
    return normalized


def backend_can_auto_complete(config: ModelConfig, backends: BackendRegistry) -> bool:
    """Whether the config's backend fills in missing inputs/outputs from the model file, as
    its ``BackendSpec`` says (``auto_completes``); a backend not registered does not."""
    spec = backends.get(config.backend) if config.backend else None
    return spec is not None and spec.completes(config.platform, config.default_model_filename)


def config_to_json_text(config: ModelConfig) -> str:
    return json.dumps(config_to_json(config), separators=(",", ":"))


def _fill_backend(
    config: ModelConfig, backends: BackendRegistry, present: Callable[[str], bool]
) -> None:
    candidates = model_file_candidates(backends)
    if not config.backend:
        if config.platform:
            spec = backends.for_platform(config.platform)
            config.backend = PLATFORM_BACKENDS.get(config.platform) or (
                spec.name if spec is not None else ""
            )
        elif config.default_model_filename:
            config.backend = dict(candidates).get(config.default_model_filename, "")
        else:
            found = next(((f, b) for f, b in candidates if present(f)), None)
            if found is not None:
                config.default_model_filename, config.backend = found
    if not config.backend:
        return
    if not config.default_model_filename:
        own_files = [filename for filename, backend in candidates if backend == config.backend]
        if config.platform in PLATFORM_FILES:
            own_files = [PLATFORM_FILES[config.platform]]
        chosen = next((f for f in own_files if present(f)), own_files[0] if own_files else "")
        config.default_model_filename = chosen
    torch_export = config.default_model_filename == TORCH_EXPORT_FILENAME
    if not config.platform and config.backend in BACKEND_PLATFORMS and not torch_export:
        config.platform = FILE_PLATFORMS.get(config.default_model_filename,
                                             BACKEND_PLATFORMS[config.backend])


def _fill_instance_groups(
    config: ModelConfig, gpu_ids: Sequence[int], *, auto_on_gpu: bool
) -> None:
    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == InstanceGroup.KIND_AUTO:
            on_gpu = (auto_on_gpu and bool(gpu_ids)
                      and all(gpu in gpu_ids for gpu in group.gpus))
            group.kind = InstanceGroup.KIND_GPU if on_gpu else InstanceGroup.KIND_CPU
        # A negative count is left for validation to report.
        if group.count == 0:
            group.count = 1
        if group.kind == InstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(gpu_ids)


def _fill_pinned_memory(config: ModelConfig) -> None:
    # Triton enables both by default and prints them; they change nothing on CPU.
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True


def _fill_batching_defaults(config: ModelConfig) -> None:
    # An empty preferred list means "send when full", which a preferred size of
    # max_batch_size says explicitly, as Triton prints it.
    if (
        config.HasField("dynamic_batching")
        and not config.dynamic_batching.preferred_batch_size
        and config.max_batch_size > 0
    ):
        config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if (
            sequence.HasField("oldest")
            and not sequence.oldest.preferred_batch_size
            and config.max_batch_size > 0
        ):
            sequence.oldest.preferred_batch_size.append(config.max_batch_size)
