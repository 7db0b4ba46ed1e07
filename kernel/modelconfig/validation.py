"""The rules a normalized ``ModelConfig`` must satisfy before any backend sees it.

Owns Triton's validation rules (name, backend/platform, batch sizes, inputs and outputs,
instance groups, version policy, response cache), inferd's own parameters (``INFERD_EXECUTOR``,
``INFERD_FORK_AFTER_INITIALIZE``) and the GPUs a config names against those of the machine
(``check_gpus``); an ensemble's dataflow graph is checked by
``inferd.kernel.modelconfig.ensemble_graph``. Every failure is an ``InvalidArgument`` whose
message names the model and the offending field. It must not change the config, fill in
defaults (``inferd.kernel.modelconfig.reading.normalize`` does that first) or touch the file
system.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelQueuePolicy

from inferd.kernel.modelconfig.ensemble_graph import check_ensemble_graph
from inferd.kernel.sdk.modelconfig import FORK_PARAMETER
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.names import model_name_problem, quoted

ENSEMBLE_PLATFORM = "ensemble"
PLATFORM_BACKENDS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
}
"""Platforms Triton ties to exactly one backend; other backends take no platform."""

WILDCARD_DIM = -1
MAX_INSTANCES = 1024
"""The most instances one model version may have, over all its instance groups."""


def validate(config: ModelConfig, *, folder_name: str, complete: bool) -> None:
    """Raise ``InvalidArgument`` unless ``config`` (already normalized) is a valid config for
    the model in folder ``folder_name``. ``complete`` False means a backend will fill in the
    inputs and outputs later, so an empty list of either is accepted for now."""
    model = folder_name or config.name
    if config.name != folder_name:
        _fail(model, f"config name '{config.name}' must equal the model's folder name")
    _check_platform(config, model)
    if config.max_batch_size < 0:
        _fail(model, f"'max_batch_size' must be >= 0, got {config.max_batch_size}")
    _check_tensors(config, model, complete)
    _check_dynamic_batching(config, model)
    _check_sequence_batching(config, model)
    _check_instance_groups(config, model)
    _check_executor_parameter(config, model)
    _check_fork_parameter(config, model)
    _check_version_policy(config, model)
    _check_model_file_names(config, model)
    _check_response_cache(config, model)
    if config.platform == ENSEMBLE_PLATFORM:
        check_ensemble_graph(config)


def _check_platform(config: ModelConfig, model: str) -> None:
    platform, backend = config.platform, config.backend
    if platform == ENSEMBLE_PLATFORM:
        if backend:
            _fail(model, f"an ensemble (platform 'ensemble') must not set 'backend', got "
                  f"'{backend}'")
        if not config.HasField("ensemble_scheduling"):
            _fail(model, "platform 'ensemble' requires 'ensemble_scheduling'")
        if config.instance_group:
            _fail(model, "'instance_group' must not be set for an ensemble")
        return
    if config.HasField("ensemble_scheduling"):
        _fail(model, f"'ensemble_scheduling' requires platform 'ensemble', got platform "
              f"'{platform}'")
    if not platform and not backend:
        _fail(model, "must specify 'platform' or 'backend' (neither is set, and none could be "
              "inferred from the files in the version folders)")
    if not backend:
        _fail(model, f"no backend is known for 'platform' '{platform}'; set 'backend'")
    tied_backends = set(PLATFORM_BACKENDS.values())
    tied = platform in PLATFORM_BACKENDS or backend in tied_backends
    if platform and backend and tied and PLATFORM_BACKENDS.get(platform) != backend:
        _fail(model, f"'platform' '{platform}' and 'backend' '{backend}' do not go together")


def _check_tensors(config: ModelConfig, model: str, complete: bool) -> None:
    must_have_io = complete or config.platform == ENSEMBLE_PLATFORM
    for kind, tensors in (("input", config.input), ("output", config.output)):
        if must_have_io and not tensors:
            _fail(model, f"must specify at least one '{kind}'")
        seen: set[str] = set()
        for index, tensor in enumerate(tensors):
            if not tensor.name:
                _fail(model, f"{kind} {index} must specify 'name'")
            if tensor.name in seen:
                _fail(model, f"{kind} '{tensor.name}' is declared more than once")
            seen.add(tensor.name)
            _check_tensor(tensor, f"{kind} '{tensor.name}'", model, config.max_batch_size)


def _check_tensor(tensor: Any, label: str, model: str, max_batch_size: int) -> None:
    if tensor.data_type == model_config_pb2.TYPE_INVALID:
        _fail(model, f"{label} must specify 'data_type'")
    dims = list(tensor.dims)
    if not dims:
        _fail(model, f"{label} must specify 'dims'")
    if not _valid_dims(dims):
        _fail(model, f"{label} has 'dims' {dims}: each dimension must be >= 1, or -1 for a "
              "variable-size dimension")
    if not tensor.HasField("reshape"):
        return
    shape = list(tensor.reshape.shape)
    if not shape and max_batch_size == 0:
        _fail(model, f"{label} cannot have an empty 'reshape' when the model does not batch "
              "(max_batch_size 0): scalar tensors are not supported")
    if not _valid_dims(shape):
        _fail(model, f"{label} has 'reshape' {shape}: each dimension must be >= 1, or -1 for a "
              "variable-size dimension")
    if _element_counts(dims) != _element_counts(shape):
        _fail(model, f"{label} has 'reshape' {shape}, which does not hold the same elements as "
              f"its 'dims' {dims}")


def _valid_dims(dims: Iterable[int]) -> bool:
    return all(dim >= 1 or dim == WILDCARD_DIM for dim in dims)


def _element_counts(shape: list[int]) -> list[int]:
    # Element counts of the runs between variable-size dimensions: [2, 4, -1, 6] and
    # [8, -1, 1, 6] both give [8, 6], so reshaping one into the other is valid.
    counts, current = [], 1
    for dim in shape:
        if dim == WILDCARD_DIM:
            counts.append(current)
            current = 1
        else:
            current *= dim
    counts.append(current)
    return counts


def _check_dynamic_batching(config: ModelConfig, model: str) -> None:
    if not config.HasField("dynamic_batching"):
        return
    batching = config.dynamic_batching
    _check_preferred_sizes(
        batching.preferred_batch_size, "dynamic_batching", config.max_batch_size, model
    )
    # Triton's refusals of the queue policies, in its words (model_config_utils.cc).
    levels = batching.priority_levels
    name = config.name or model
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            raise InvalidArgument(
                f"default priority level must be in range [1, {levels}] for {name}")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                raise InvalidArgument("priority queue policy must have priority level in "
                                      f"range [1, {levels}] for {name}")
    policies = [("dynamic_batching.default_queue_policy", batching.default_queue_policy),
                *((f"dynamic_batching.priority_queue_policy[{level}]", policy)
                  for level, policy in sorted(batching.priority_queue_policy.items()))]
    known_actions = ModelQueuePolicy.TimeoutAction.values()
    for where, policy in policies:
        # proto3 lets any number through; Triton would take it as REJECT.
        if policy.timeout_action not in known_actions:
            raise InvalidArgument(f"model '{model}': unknown timeout_action "
                                  f"{policy.timeout_action} in {where} (REJECT or DELAY)")
    if batching.preserve_ordering:
        if levels > 1:
            raise InvalidArgument("Only one priority level is allowed when "
                                  f"'preserve_ordering' is true for {name}")
        if any(policy.default_timeout_microseconds != 0
               and policy.timeout_action == ModelQueuePolicy.DELAY for _, policy in policies):
            raise InvalidArgument("Queue policy can not have DELAY as timeout action when "
                                  f"'preserve_ordering' is true for {name}")


def _check_sequence_batching(config: ModelConfig, model: str) -> None:
    if config.HasField("sequence_batching") and config.sequence_batching.HasField("oldest"):
        _check_preferred_sizes(
            config.sequence_batching.oldest.preferred_batch_size,
            "sequence_batching.oldest",
            config.max_batch_size,
            model,
        )


def _check_response_cache(config: ModelConfig, model: str) -> None:
    """Triton's refusals, in its words: the response cache holds one answer per request, so
    neither a sequence model (its answers depend on state) nor a decoupled one can use it."""
    if not config.response_cache.enable:
        return
    if config.HasField("sequence_batching"):
        raise InvalidArgument(f"Response Cache does not currently support model {model} with "
                              "sequence batching scheduler. Please disable the response cache.")
    if config.model_transaction_policy.decoupled:
        raise InvalidArgument(f"Response Cache does not currently support model {model} with "
                              "'decoupled' transaction policy. Please disable the response "
                              "cache.")


def _check_preferred_sizes(sizes: Iterable[int], where: str, maximum: int, model: str) -> None:
    for size in sizes:
        if size <= 0:
            _fail(model, f"'{where}.preferred_batch_size' {size} must be > 0")
        if size > maximum:
            _fail(model, f"'{where}.preferred_batch_size' {size} must be <= max_batch_size "
                  f"({maximum})")


def _check_instance_groups(config: ModelConfig, model: str) -> None:
    kinds = model_config_pb2.ModelInstanceGroup.Kind.values()
    total = 0
    for index, group in enumerate(config.instance_group):
        label = f"instance_group '{group.name}'" if group.name else f"instance_group {index}"
        if group.count < 0:
            _fail(model, f"{label} has 'count' {group.count}; it must be >= 1 (0 means 1)")
        if group.kind not in kinds:
            _fail(model, f"{label} has an unknown 'kind' {group.kind}")
        total += max(1, group.count) * max(1, len(group.gpus))
        if total > MAX_INSTANCES:
            # Each instance is a session and a thread: a million of them is a denial of
            # service, not a configuration.
            _fail(model, f"{label} brings the model's instances to {total}; at most "
                  f"{MAX_INSTANCES} are allowed")
        if any(gpu < 0 for gpu in group.gpus):
            _fail(model, f"{label} has a negative GPU id in 'gpus' {list(group.gpus)}")
        if group.kind in (model_config_pb2.ModelInstanceGroup.KIND_CPU,
                          model_config_pb2.ModelInstanceGroup.KIND_MODEL) and group.gpus:
            kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
            _fail(model, f"{label} has kind {kind} but lists 'gpus' {list(group.gpus)}")


EXECUTOR_PARAMETER = "INFERD_EXECUTOR"
"""The config parameter that says where a model's instances run: ``isolated`` (in a process
no other model shares), ``shared`` (in the executor process of its device, or of its
backend when the backend asks for one) or ``server`` (its CPU instances in the server's own
process; native backends only). Without it, ``--cpu-executor`` decides for the CPU instances
of native backends, and every other model's are ``shared``."""
EXECUTOR_CHOICES = ("shared", "isolated", "server")


def executor_isolated(config: ModelConfig) -> bool:
    """Whether ``config`` (validated) asks for an executor process of its own."""
    return executor_choice(config) == "isolated"


def executor_choice(config: ModelConfig) -> str:
    """What ``config`` (validated) asks of ``INFERD_EXECUTOR``, or "" when it does not say."""
    parameter = config.parameters.get(EXECUTOR_PARAMETER)
    return "" if parameter is None else str(parameter.string_value)


def _check_executor_parameter(config: ModelConfig, model: str) -> None:
    parameter = config.parameters.get(EXECUTOR_PARAMETER)
    if parameter is not None and parameter.string_value not in EXECUTOR_CHOICES:
        _fail(model, f"parameter {EXECUTOR_PARAMETER} must be one of "
              f"{', '.join(EXECUTOR_CHOICES)}, got {parameter.string_value!r}")
    if parameter is not None and config.platform == ENSEMBLE_PLATFORM:
        _fail(model, f"parameter {EXECUTOR_PARAMETER} has no meaning for an ensemble, which"
              " runs in the server itself")


def _check_fork_parameter(config: ModelConfig, model: str) -> None:
    parameter = config.parameters.get(FORK_PARAMETER)
    if parameter is None:
        return
    if parameter.string_value.lower() not in ("true", "false"):
        _fail(model, f"parameter {FORK_PARAMETER} must be \"true\" or \"false\", got "
              f"{parameter.string_value!r}")
    if config.backend != "python":
        _fail(model, f"parameter {FORK_PARAMETER} is for python models; backend "
              f"'{config.backend or config.platform}' does not fork its instances")


def check_gpus(config: ModelConfig, gpu_ids: Sequence[int]) -> None:
    """Raise ``InvalidArgument``, with Triton's messages, unless every ``KIND_GPU`` group of
    ``config`` (normalized: ``KIND_AUTO`` resolved, missing ``gpus`` filled) names only GPUs
    in ``gpu_ids``, the GPUs of this machine."""
    for group in config.instance_group:
        if group.kind != model_config_pb2.ModelInstanceGroup.KIND_GPU:
            continue
        where = f"instance group {group.name} of model {config.name}"
        if not group.gpus:
            if not gpu_ids:
                raise InvalidArgument(f"{where} has kind KIND_GPU but no GPUs are available")
            raise InvalidArgument(f"{where} has kind KIND_GPU but specifies no GPUs")
        for gpu in group.gpus:
            if gpu not in gpu_ids:
                available = ", ".join(map(str, gpu_ids)) or "none"
                raise InvalidArgument(
                    f"{where} specifies invalid or unsupported gpu id {gpu}. GPUs this "
                    f"server can use are: {available}"
                )


def _check_version_policy(config: ModelConfig, model: str) -> None:
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "latest" and policy.latest.num_versions < 1:
        _fail(model, "'version_policy.latest.num_versions' must be >= 1, got "
              f"{policy.latest.num_versions}")
    if choice == "specific":
        negative = [version for version in policy.specific.versions if version < 0]
        if negative:
            _fail(model, f"'version_policy.specific.versions' must be >= 0, got {negative}")


def _check_model_file_names(config: ModelConfig, model: str) -> None:
    """The model file names a config sets name a file of the version folder, nothing else: a
    config (an override's above all) must not open another model's file or probe the server's
    disk."""
    named = [("default_model_filename", config.default_model_filename)] if (
        config.default_model_filename
    ) else []
    named += [(f"cc_model_filenames['{key}']", value)
              for key, value in sorted(config.cc_model_filenames.items())]
    for field_name, filename in named:
        problem = model_name_problem(filename)
        if problem:
            _fail(model, f"'{field_name}' must be a file name inside the version folder, "
                  f"got {quoted(filename)} ({problem})")


def _fail(model: str, detail: str) -> NoReturn:
    raise InvalidArgument(f"model '{model}': {detail}")


