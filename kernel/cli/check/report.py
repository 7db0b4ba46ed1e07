"""What ``inferd check`` reports: its types, their JSON, and where in a file a problem is.

Owns ``CheckReport`` (the repository's own errors and one ``ModelReport`` per model folder),
``Finding`` (one problem, placed at a file, line and column where it has a place), the
completion states a model's report gives, the JSON document (``JSON_FORMAT_VERSION``), and
``located_finding``: how a message from the server's own code (``<model>/config.pbtxt:3:5:
...``, or one that quotes a config field) becomes a ``Finding`` in the repository's files. It
checks nothing and prints nothing (``inferd.kernel.cli.check.walk`` fills a report,
``inferd.kernel.cli.check.command`` prints it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from inferd.kernel.actors.repository.catalog import ModelCatalog
from inferd.kernel.modelconfig.reading import ModelConfig

JSON_FORMAT_VERSION = 1

# Completion states a report gives each model.
COMPLETED = "completed from the model file"
CHECKED = "checked against the model file"  # the backend's completion added nothing
NOT_NEEDED = "not needed"
DISABLED = "disabled"
NEEDS_SERVER = "needs the server"

_LOCATED = re.compile(r"^(?P<file>[^\s:][^:]*\.(?:pbtxt|toml)):(?P<line>\d+):(?P<column>\d+): "
                      r"(?P<problem>.*)$", re.DOTALL)
_FILED = re.compile(r"^(?P<file>[^\s:][^:]*\.(?:pbtxt|toml)): (?P<problem>.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem; ``file`` (a path as given under the repository root), ``line`` and
    ``column`` (1-based) where it has a place, 0 where not."""

    message: str
    file: str = ""
    line: int = 0
    column: int = 0

    def located(self) -> str:
        """``file:line:col: message`` (or less where the place is less precise)."""
        if not self.file:
            return self.message
        if self.line:
            return f"{self.file}:{self.line}:{self.column or 1}: {self.message}"
        return f"{self.file}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "file": self.file or None,
                "line": self.line or None, "column": self.column or None}


@dataclass(slots=True)
class ModelReport:
    """What the checker found for one model folder."""

    name: str
    path: str
    backend: str = ""
    platform: str = ""
    versions_on_disk: tuple[int, ...] = ()
    versions: tuple[int, ...] = ()  # those the version policy loads
    completion: str = NOT_NEEDED
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: ModelConfig | None = None  # the config the server would serve, when known
    catalog: ModelCatalog | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self, *, with_config: bool = False) -> dict[str, Any]:
        document: dict[str, Any] = {
            "name": self.name,
            "path": self.path,
            "state": "ok" if self.ok else "error",
            "backend": self.backend,
            "platform": self.platform,
            "versions_on_disk": list(self.versions_on_disk),
            "versions": list(self.versions),
            "auto_complete": self.completion,
            "errors": [finding.to_json() for finding in self.errors],
            "warnings": [finding.to_json() for finding in self.warnings],
            "notes": list(self.notes),
            "catalog": self.catalog.to_json() if self.catalog is not None else None,
        }
        if with_config:
            document["config"] = config_text(self.config) if self.config is not None else None
        return document


@dataclass(slots=True)
class CheckReport:
    repositories: tuple[str, ...]
    models: list[ModelReport] = field(default_factory=list)
    errors: list[Finding] = field(default_factory=list)  # the repository's own

    @property
    def ok(self) -> bool:
        return not self.errors and all(model.ok for model in self.models)

    def to_json(self, *, with_config: bool = False) -> dict[str, Any]:
        return {
            "format_version": JSON_FORMAT_VERSION,
            "ok": self.ok,
            "repositories": list(self.repositories),
            "error_count": len(self.errors) + sum(len(m.errors) for m in self.models),
            "warning_count": sum(len(m.warnings) for m in self.models),
            "errors": [finding.to_json() for finding in self.errors],
            "models": [model.to_json(with_config=with_config) for model in self.models],
        }


def config_text(config: ModelConfig) -> str:
    """A config in protobuf text format, as a ``config.pbtxt`` would hold it."""
    return str(text_format.MessageToString(config))


def located_finding(message: str, name: str, folder: Path, default_file: Path) -> Finding:
    """A message from the server's code as a ``Finding``: its ``<model>/<file>`` label (and
    line:col) become the file's path in the repository."""
    for pattern in (_LOCATED, _FILED):
        match = pattern.match(message)
        if match is not None:
            label = match.group("file")
            relative = label.split("/", 1)[1] if label.startswith(f"{name}/") else label
            line = int(match.group("line")) if "line" in match.groupdict() else 0
            column = int(match.group("column")) if "column" in match.groupdict() else 0
            return Finding(match.group("problem"), str(folder / relative), line, column)
    if not default_file.is_file():
        return Finding(message)
    line, column = _field_line(default_file, message)
    return Finding(message, str(default_file), line, column)


def _field_line(config_file: Path, message: str) -> tuple[int, int]:
    """Where a validation message's field is set: the first config field it quotes
    (``'max_batch_size'``) that exactly one line of the file starts with; (0, 0) when none
    does, rather than a guess."""
    try:
        lines = config_file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0, 0
    for field_name in re.findall(r"'([a-z][a-z0-9_]*)'", message):
        if field_name not in _config_field_names():
            continue
        starts = re.compile(rf"^(\s*){field_name}\s*[:{{\[]")
        found = [(number, match.end(1) + 1) for number, text in enumerate(lines, start=1)
                 if (match := starts.match(text))]
        if len(found) == 1:
            return found[0]
    return 0, 0


def _config_field_names() -> frozenset[str]:
    """Every field name of ``ModelConfig`` and the messages inside it."""
    global _FIELD_NAMES
    if _FIELD_NAMES is None:
        names: set[str] = set()
        pending, seen = [ModelConfig.DESCRIPTOR], set()
        while pending:
            descriptor = pending.pop()
            if descriptor.full_name in seen:
                continue
            seen.add(descriptor.full_name)
            for field_descriptor in descriptor.fields:
                names.add(field_descriptor.name)
                if field_descriptor.message_type is not None:
                    pending.append(field_descriptor.message_type)
        _FIELD_NAMES = frozenset(names)
    return _FIELD_NAMES


_FIELD_NAMES: frozenset[str] | None = None
