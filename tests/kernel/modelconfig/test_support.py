"""No ModelConfig field is silently ignored: every field of Triton's proto has a rule
(walked from the descriptor, so a field added to the proto later fails here until it gets
one), refused fields fail with the field's path, harmless ones warn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.modelconfig.support import (
    HARMLESS,
    HONOURED,
    REFUSED,
    RULES,
    check_supported,
    rule_for,
)
from inferd.protocols.errors import InvalidArgument


def field_paths(descriptor: Descriptor, prefix: str = "", seen: frozenset[str] = frozenset()
                ) -> Iterator[str]:
    """Every field path of ``descriptor``, nested messages included (each type once)."""
    for field in descriptor.fields:
        path = prefix + field.name
        yield path
        nested = field.message_type
        if nested is not None and not nested.GetOptions().map_entry and \
                nested.full_name not in seen:
            yield from field_paths(nested, path + ".", seen | {nested.full_name})


def test_every_field_of_the_proto_has_a_rule() -> None:
    # A message whose fields have rules of their own needs none itself; every other field
    # must have one (or lie under one).
    containers = {path for path in field_paths(ModelConfig.DESCRIPTOR) if path not in RULES
                  and any(key.startswith(path + ".") for key in RULES)}
    uncovered = [path for path in field_paths(ModelConfig.DESCRIPTOR)
                 if path not in containers and rule_for(path) is None]
    assert uncovered == [], f"ModelConfig fields without a rule in config_support: {uncovered}"


def test_every_rule_names_a_real_field() -> None:
    paths = set(field_paths(ModelConfig.DESCRIPTOR))
    assert sorted(set(RULES) - paths) == []
    kinds = {rule[0] for rule in RULES.values() if not callable(rule)}
    assert kinds <= {HONOURED, REFUSED, HARMLESS}


def config(text: str) -> ModelConfig:
    parsed = ModelConfig()
    text_format.Parse('name: "m"\n' + text, parsed)
    return parsed


@pytest.mark.parametrize(("text", "field"), [
    ("optimization { graph { level: 1 } }", "optimization.graph"),
    ('optimization { execution_accelerators { cpu_execution_accelerator [{ name: "openvino" }] '
     "} }", "optimization.execution_accelerators"),
    ('input [{ name: "x" data_type: TYPE_FP32 dims: [1] allow_ragged_batch: true }]',
     "input.allow_ragged_batch"),
    ("instance_group [{ count: 1 rate_limiter { priority: 2 } }]", "instance_group.rate_limiter"),
    ('runtime: "model.py"', "runtime"),
])
def test_a_field_inferd_does_not_implement_fails_the_load_naming_it(text: str, field: str) -> None:
    with pytest.raises(InvalidArgument, match=rf"^model 'm': {field} is not supported: "):
        check_supported(config(text))


def test_what_inferd_implements_passes_and_harmless_fields_warn() -> None:
    honoured = config(
        'max_batch_size: 8 input [{ name: "x" data_type: TYPE_FP32 format: FORMAT_NCHW '
        'dims: [3] optional: true }] output [{ name: "y" data_type: TYPE_FP32 dims: [3] }] '
        "dynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 100 "
        "default_queue_policy { timeout_action: REJECT max_queue_size: 9 } "
        "priority_levels: 2 preserve_ordering: true priority_queue_policy { key: 1 value { "
        "timeout_action: DELAY default_timeout_microseconds: 5 allow_timeout_override: true "
        "max_queue_size: 1 } } } "
        'instance_group [{ count: 2 kind: KIND_CPU }] parameters { key: "k" value { '
        'string_value: "v" } } optimization { input_pinned_memory { enable: true } } '
        "response_cache { enable: true }")
    assert check_supported(honoured) == []
    warned = check_supported(config('metric_tags { key: "team" value: "search" } '
                                    "optimization { priority: PRIORITY_MAX }"))
    assert sorted(warned) == [
        "model 'm': metric_tags is ignored: inferd's metrics carry no custom tags",
        "model 'm': optimization.priority is ignored: inferd does not prioritize models' "
        "executions"]


def test_the_docs_list_what_is_refused_and_warned_about_as_the_table_does() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "config.md").read_text(encoding="utf-8")
    section = page.split("\n## Config fields\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    refused = section.split("Refused today:", 1)[1].split("Warned about and ignored:", 1)[0]
    warned = section.split("Warned about and ignored:", 1)[1]

    def named(path: str, text: str) -> bool:
        return f"`{path}`" in text or f"`{path.rsplit('.', 1)[-1]}`" in text

    kinds = {path: rule[0] for path, rule in RULES.items()}
    for path, kind in kinds.items():
        if kind == REFUSED:
            assert named(path, refused), f"docs/config.md does not list {path} as refused"
        elif kind == HARMLESS:
            assert named(path, warned), f"docs/config.md does not list {path} as warned about"
        elif not any(other != HONOURED and o.rsplit(".", 1)[-1] == path.rsplit(".", 1)[-1]
                     for o, other in kinds.items()):
            assert not named(path, refused), (
                f"docs/config.md lists {path} as refused; it is honoured")
