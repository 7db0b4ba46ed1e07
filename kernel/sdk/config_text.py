"""A model config as text: ``config.pbtxt`` read, and the config printed as Triton's JSON.

``parse_config_text`` reads protobuf text format and says where it fails as
``<file>:<line>:<col>: <problem>``, protobuf's words shortened to what a reader needs;
``config_to_json`` prints what Triton's model-config endpoint prints (snake_case names, every
scalar, enum names, the 64-bit fields as numbers). The repository reads every config with
these and backends complete theirs with them (``inferd.kernel.sdk.modelconfig``). Pure
functions over protobuf.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.protocols.errors import InvalidArgument

__all__ = ["config_to_json", "parse_config_text"]

_INT64_JSON_PATHS = (
    "input[].dims",
    "input[].reshape.shape",
    "output[].dims",
    "output[].reshape.shape",
    "version_policy.specific.versions",
    "dynamic_batching.max_queue_delay_microseconds",
    "dynamic_batching.priority_levels",
    "dynamic_batching.default_priority_level",
    "dynamic_batching.default_queue_policy.default_timeout_microseconds",
    "dynamic_batching.priority_queue_policy{}.default_timeout_microseconds",
    "sequence_batching.max_sequence_idle_microseconds",
    "sequence_batching.oldest.max_queue_delay_microseconds",
    "sequence_batching.direct.max_queue_delay_microseconds",
    "sequence_batching.state[].dims",
    "sequence_batching.state[].initial_state[].dims",
    "ensemble_scheduling.step[].model_version",
    "model_warmup[].inputs{}.dims",
)
"""The 64-bit fields Triton prints as JSON numbers; protobuf's JSON prints them as strings.
``[]`` walks every list item, ``{}`` every map value. The rest (cuda graph dims, secondary
device ids) stay strings, as in Triton."""

_LOCATION = re.compile(r"^\d+(?::\d+)? : ")
_NO_FIELD = re.compile(r'^Message type "(?:[\w.]+\.)?(\w+)" has no field named "([^"]+)"\.?$')
_NO_ENUM_VALUE = re.compile(r'^Enum type "(?:[\w.]+\.)?(\w+)" has no value named (\S+?)\.?$')
_REPEATED_FIELD = re.compile(
    r'^Message type "(?:[\w.]+\.)?(\w+)" should not have multiple "([^"]+)" fields\.?$'
)


def parse_config_text(text: str, filename: str) -> ModelConfig:
    """Parse ``config.pbtxt`` text; errors read ``<filename>:<line>:<col>: <problem>``."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        line, column = error.GetLine(), error.GetColumn()
        problem = _short_problem(str(error), text, line)
        where = filename if line is None else f"{filename}:{line}:{column or 1}"
        raise InvalidArgument(f"{where}: {problem}") from None
    except RecursionError:
        raise InvalidArgument(f"{filename}: messages are nested too deeply") from None
    return config


def config_to_json(config: ModelConfig) -> dict[str, Any]:
    """The config as Triton prints it: snake_case names, every scalar, enum names, and the
    64-bit fields of ``_INT64_JSON_PATHS`` as numbers."""
    document: dict[str, Any]
    # protobuf < 5.26 names the option that prints defaults differently (and its stubs
    # know only their own name, so the option goes as a keyword mapping).
    defaults: dict[str, Any] = {"always_print_fields_with_no_presence": True}
    try:
        document = json_format.MessageToDict(
            config, preserving_proto_field_name=True, **defaults
        )
    except TypeError:
        defaults = {"including_default_value_fields": True}
        document = json_format.MessageToDict(
            config, preserving_proto_field_name=True, **defaults
        )
    for path in _INT64_JSON_PATHS:
        _numbers_at(document, path.split("."))
    return document


def _short_problem(message: str, text: str, line: int | None) -> str:
    problem = _LOCATION.sub("", message, count=1)
    problem = _strip_quoted_line(problem, text, line)
    if match := _NO_FIELD.match(problem):
        owner, field = match.groups()
        return f'no field named "{field}"' + ("" if owner == "ModelConfig" else f" in {owner}")
    if match := _NO_ENUM_VALUE.match(problem):
        enum, value = match.groups()
        return f'no value named "{value}" in enum {enum}'
    if match := _REPEATED_FIELD.match(problem):
        owner, field = match.groups()
        return f'field "{field}" is set more than once in {owner}'
    return problem.rstrip(".")


def _strip_quoted_line(problem: str, text: str, line: int | None) -> str:
    # protobuf prefixes some problems with the whole offending line in quotes; the
    # line:col we print already points at it.
    lines = text.splitlines()
    if line is not None and 1 <= line <= len(lines):
        for candidate in (lines[line - 1], lines[line - 1] + "\n"):
            prefix = f"'{candidate}': "
            if problem.startswith(prefix):
                return problem[len(prefix):]
    return problem


def _numbers_at(node: Any, steps: list[str]) -> None:
    step, rest = steps[0], steps[1:]
    if not isinstance(node, dict):
        return
    if step.endswith(("[]", "{}")):
        child = node.get(step[:-2])
        items = child if isinstance(child, list) else (
            list(child.values()) if isinstance(child, dict) else []
        )
        for item in items:
            _numbers_at(item, rest)
        return
    if step not in node:
        return
    if rest:
        _numbers_at(node[step], rest)
        return
    value = node[step]
    node[step] = [int(item) for item in value] if isinstance(value, list) else int(value)
