"""Which fields of Triton's ``ModelConfig`` inferd honours, in one table: nothing is silently
ignored.

Every field of the protobuf is covered by a rule on its path (``dynamic_batching.
priority_queue_policy``), the longest matching path deciding:

- ``HONOURED``: inferd implements it (a message rule covers the fields under it unless a
  longer rule says otherwise);
- ``REFUSED``: setting it fails the load, with a reason naming the field;
- ``HARMLESS``: inferd does not act on it and ignoring it cannot change a result, so it is
  accepted with a warning.

``tests/kernel/modelconfig/test_support.py`` walks the protobuf's descriptor, so a field added to
Triton's proto later fails the tests until it has a rule here. Pure: config in, refusal or
warnings out.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import Message
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.protocols.errors import InvalidArgument

HONOURED = "honoured"
REFUSED = "refused"
HARMLESS = "harmless"

# A rule: its kind, and for REFUSED or HARMLESS the reason.
Rule = tuple[str, str]

NOT_YET = "not implemented by inferd yet"


RULES: dict[str, Rule] = {
    "name": (HONOURED, ""),
    "platform": (HONOURED, ""),
    "backend": (HONOURED, ""),
    "runtime": (REFUSED, "a backend runtime other than the backend's own is not supported"),
    "version_policy": (HONOURED, ""),
    "max_batch_size": (HONOURED, ""),
    "input.name": (HONOURED, ""),
    "input.data_type": (HONOURED, ""),
    "input.format": (HONOURED, ""),  # informational in Triton too
    "input.dims": (HONOURED, ""),
    "input.reshape": (HONOURED, ""),
    "input.optional": (HONOURED, ""),
    "input.is_shape_tensor": (REFUSED, f"shape tensors are {NOT_YET}"),
    "input.allow_ragged_batch": (REFUSED, f"ragged batching is {NOT_YET}"),
    "input.is_non_linear_format_io": (REFUSED, f"non-linear formats are {NOT_YET}"),
    "output.name": (HONOURED, ""),
    "output.data_type": (HONOURED, ""),
    "output.dims": (HONOURED, ""),
    "output.reshape": (HONOURED, ""),
    "output.label_filename": (HONOURED, ""),  # inferd.kernel.actors.scheduler.classification
    "output.is_shape_tensor": (REFUSED, f"shape tensors are {NOT_YET}"),
    "output.is_non_linear_format_io": (REFUSED, f"non-linear formats are {NOT_YET}"),
    "batch_input": (REFUSED, f"ragged batching is {NOT_YET}"),
    "batch_output": (REFUSED, f"ragged batching is {NOT_YET}"),
    "optimization": (REFUSED, "framework-specific optimizations are not applied by inferd"),
    "optimization.input_pinned_memory": (HONOURED, ""),  # pinned buffers change no result
    "optimization.output_pinned_memory": (HONOURED, ""),
    "optimization.priority": (HARMLESS, "inferd does not prioritize models' executions"),
    "dynamic_batching": (HONOURED, ""),
    # inferd.kernel.actors.scheduler.queue_policy
    "dynamic_batching.default_queue_policy": (HONOURED, ""),
    "dynamic_batching.priority_queue_policy": (HONOURED, ""),
    # inferd.kernel.actors.scheduler.response_order
    "dynamic_batching.preserve_ordering": (HONOURED, ""),
    "sequence_batching": (HONOURED, ""),  # inferd.kernel.modelconfig.sequence_plan refuses its own
    "ensemble_scheduling": (HONOURED, ""),
    "ensemble_scheduling.step.model_namespace": (REFUSED, f"model namespaces are {NOT_YET}"),
    # inferd.kernel.actors.scheduler.ensembles.inflight
    "ensemble_scheduling.max_inflight_requests": (HONOURED, ""),
    "instance_group.name": (HONOURED, ""),
    "instance_group.kind": (HONOURED, ""),
    "instance_group.count": (HONOURED, ""),
    "instance_group.gpus": (HONOURED, ""),
    "instance_group.profile": (HONOURED, ""),
    "instance_group.rate_limiter": (REFUSED, f"the rate limiter is {NOT_YET}"),
    "instance_group.secondary_devices": (REFUSED, f"secondary devices are {NOT_YET}"),
    "instance_group.passive": (REFUSED, f"passive instances are {NOT_YET}"),
    "instance_group.host_policy": (REFUSED, f"host policies are {NOT_YET}"),
    "default_model_filename": (HONOURED, ""),
    "cc_model_filenames": (REFUSED, f"per-compute-capability model files are {NOT_YET}"),
    "metric_tags": (HARMLESS, "inferd's metrics carry no custom tags"),
    "parameters": (HONOURED, ""),
    "model_warmup": (HONOURED, ""),
    "model_operations": (REFUSED, "custom operation libraries are not loaded by inferd"),
    "model_transaction_policy": (HONOURED, ""),
    "model_repository_agents": (HONOURED, ""),  # inferd.kernel.actors.repository.agents
    "response_cache": (HONOURED, ""),  # inferd.kernel.actors.scheduler.response_cache
    "model_metrics": (REFUSED, f"per-model metric controls are {NOT_YET}"),
}


def rule_for(path: str) -> Rule | None:
    """The rule of the longest path in ``RULES`` that ``path`` is or lies under."""
    parts = path.split(".")
    for length in range(len(parts), 0, -1):
        rule = RULES.get(".".join(parts[:length]))
        if rule is not None:
            return rule
    return None


def check_supported(config: ModelConfig) -> list[str]:
    """Raise ``InvalidArgument`` naming the first field ``config`` sets that inferd refuses;
    return a warning for each harmless one it ignores."""
    warnings: list[str] = []
    model = config.name
    for path in _set_fields(config, ""):
        kind, reason = rule_for(path) or (REFUSED, "inferd does not know it")
        if kind == REFUSED:
            raise InvalidArgument(f"model '{model}': {path} is not supported: {reason}")
        if kind == HARMLESS:
            warnings.append(f"model '{model}': {path} is ignored: {reason}")
    return warnings


def _set_fields(message: Message, prefix: str) -> Iterator[str]:
    """The path of every field set in ``message`` that a rule decides: a message with
    rules for fields under it is looked into instead (its own rule, if any, then decides
    for those of its fields without one)."""
    for field, value in message.ListFields():
        path = prefix + field.name
        nested = (field.message_type is not None
                  and not field.message_type.GetOptions().map_entry
                  and any(key.startswith(path + ".") for key in RULES))
        if not nested:
            yield path
            continue
        items = value if field.is_repeated else [value]
        for item in items:
            yield from _set_fields(item, path + ".")
