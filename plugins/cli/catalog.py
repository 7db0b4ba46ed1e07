"""How the ``inferd`` client commands show the model catalog: ``inferd catalog`` and
``inferd models --label/--task`` list models as one table, ``inferd models --describe M``
shows one model as a table of its fields and a table of its tensors.

Records are built from the catalog's JSON form (``GET v2/catalog``'s models, which every
``Connection`` returns), so the three protocols print alike. No I/O:
``inferd.plugins.cli.render`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inferd.plugins.cli.inputs import ArgumentProblem, split_assignment
from inferd.plugins.cli.render import Column

LIST_COLUMNS = (Column("name", "MODEL"), Column("kind", "PLATFORM"),
                Column("versions", "VERSIONS"), Column("state", "STATE"),
                Column("task", "TASK"), Column("labels", "LABELS"),
                Column("description", "DESCRIPTION"))
FIELD_COLUMNS = (Column("field", "FIELD"), Column("value", "VALUE"))
TENSOR_COLUMNS = (Column("direction", "TENSOR"), Column("name", "NAME"),
                  Column("datatype", "DATATYPE"), Column("shape", "SHAPE"))


def label_filters(arguments: Sequence[str]) -> list[tuple[str, str]]:
    """``--label KEY=VALUE`` arguments as (key, value) pairs."""
    return [split_assignment(text, "--label", "KEY=VALUE") for text in arguments]


def _pairs(table: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in table.items())


def list_record(model: Mapping[str, Any]) -> dict[str, Any]:
    metadata = model.get("metadata") or {}
    return {
        "name": model["name"],
        "kind": model.get("platform") or model.get("backend") or "",
        "versions": ",".join(model.get("versions", [])),
        "state": model.get("state", ""),
        "task": metadata.get("task", ""),
        "labels": _pairs(metadata.get("labels", {})),
        "description": model.get("error") or metadata.get("description", ""),
    }


def described(models: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    """The catalog entry of ``name``; ``ArgumentProblem`` when the repository has none."""
    for model in models:
        if model["name"] == name:
            return model
    raise ArgumentProblem(f"no model '{name}' in the server's repository")


def field_records(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    metadata = model.get("metadata") or {}
    fields = [
        ("model", model["name"]),
        ("platform", model.get("platform", "")),
        ("backend", model.get("backend", "")),
        ("versions on disk", ",".join(model.get("versions", []))),
        ("versions loaded by the policy", ",".join(model.get("loadable_versions", []))),
        ("state", model.get("state", "")),
        ("reason", model.get("reason", "")),
        ("error", model.get("error", "")),
        ("description", metadata.get("description", "")),
        ("task", metadata.get("task", "")),
        ("owner", metadata.get("owner", "")),
        ("labels", _pairs(metadata.get("labels", {}))),
        ("links", _pairs(metadata.get("links", {}))),
    ]
    return [{"field": field, "value": value} for field, value in fields]


def tensor_records(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"direction": direction, "name": tensor["name"], "datatype": tensor["datatype"],
         "shape": "[" + ", ".join(str(dim) for dim in tensor["shape"]) + "]"}
        for direction, key in (("input", "inputs"), ("output", "outputs"))
        for tensor in model.get(key, [])
    ]
