"""A model's catalog metadata: the sidecar file ``catalog.toml`` in its folder, and filters on it.

Owns the file's format (the keys ``description``, ``task``, ``owner``, ``labels`` and
``links``, each with its type), reading it with errors that say ``file:line:col: problem``
where the file gives a position, its JSON form (what the repository index and the catalog
endpoint show), and what a catalog filter keeps (its query form is parsed in
``inferd.protocols.kserve_http.admin``).
Metadata lives beside the config rather than in its ``parameters`` so the config stays what
Triton reads, and so nested values (labels, links) keep their types. Pure apart from reading
the one file; it knows nothing of models' configs or states.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.protocols.errors import InvalidArgument

CATALOG_FILENAME = "catalog.toml"
MAX_CATALOG_BYTES = 64 * 1024  # metadata, not data: a bigger file is refused unread

_TEXT_KEYS = ("description", "task", "owner")
_TABLE_KEYS = ("labels", "links")
KNOWN_KEYS = (*_TEXT_KEYS, *_TABLE_KEYS)
_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
_TOML_POSITION = re.compile(r"^(.*?)\s*\(at line (\d+), column (\d+)\)$")


@dataclass(frozen=True, slots=True)
class ModelCatalog:
    """One model's metadata; labels and links keep the file's order."""

    description: str = ""
    task: str = ""
    owner: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    links: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The form the index and the catalog show: every key, empty ones included."""
        return {
            "description": self.description,
            "task": self.task,
            "owner": self.owner,
            "labels": dict(self.labels),
            "links": dict(self.links),
        }


def parse_catalog(text: str, filename: str) -> ModelCatalog:
    """Parse a ``catalog.toml``; ``InvalidArgument`` reads ``<filename>[:line:col]: problem``."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        problem = str(error)
        if match := _TOML_POSITION.match(problem):
            problem, line, column = match.groups()
            raise InvalidArgument(f"{filename}:{line}:{column}: {problem}") from None
        raise InvalidArgument(f"{filename}: {problem}") from None

    def fail(key: str, problem: str, table: str = "") -> InvalidArgument:
        line = _line_of(text, key, table)
        where = f"{filename}:{line}:1" if line else filename
        return InvalidArgument(f"{where}: {problem}")

    for key in document:
        if key not in KNOWN_KEYS:
            raise fail(key, f'unknown key "{key}" (known keys: {", ".join(KNOWN_KEYS)})')
    values: dict[str, str] = {}
    for key in _TEXT_KEYS:
        value = document.get(key, "")
        if not isinstance(value, str):
            raise fail(key, f'"{key}" must be a string, not {_toml_type(value)}')
        values[key] = value
    tables: dict[str, tuple[tuple[str, str], ...]] = {}
    for key in _TABLE_KEYS:
        table = document.get(key, {})
        if not isinstance(table, dict):
            raise fail(key, f'"{key}" must be a table of strings (key = "value"), '
                            f"not {_toml_type(table)}")
        pairs = []
        for name, value in table.items():
            if not isinstance(value, str):
                raise fail(name, f'{key}.{name} must be a string, not {_toml_type(value)}',
                           table=key)
            if key == "labels" and not _LABEL_KEY.match(name):
                raise fail(name, f'label key "{name}" must be 1-63 letters, digits or "._/-", '
                                 "starting with a letter or digit", table=key)
            pairs.append((name, value))
        tables[key] = tuple(pairs)
    return ModelCatalog(values["description"], values["task"], values["owner"],
                        tables["labels"], tables["links"])


def read_catalog(model_dir: Path, label: str) -> ModelCatalog | None:
    """The metadata in ``model_dir/catalog.toml``, or ``None`` when the model has none.
    ``label`` names the file in errors (``<model>/catalog.toml``)."""
    path = model_dir / CATALOG_FILENAME
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_CATALOG_BYTES:
            raise InvalidArgument(f"{label}: larger than {MAX_CATALOG_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{label}: the file is not UTF-8 text") from None
    except OSError as error:
        raise InvalidArgument(f"{label}: cannot be read ({error.strerror})") from None
    return parse_catalog(text, label)


@dataclass(frozen=True, slots=True)
class CatalogFilter:
    """Which models a catalog request keeps: every ``labels`` pair and ``task`` must match
    (an empty filter keeps every model)."""

    labels: tuple[tuple[str, str], ...] = ()
    task: str = ""

    def keeps(self, catalog: ModelCatalog | None) -> bool:
        if not self.labels and not self.task:
            return True
        if catalog is None:
            return False
        if self.task and catalog.task != self.task:
            return False
        own = dict(catalog.labels)
        return all(own.get(key) == value for key, value in self.labels)


def _line_of(text: str, key: str, table: str) -> int:
    """The 1-based line where ``key`` is set (inside ``[table]`` when given, or as a dotted
    ``table.key``), or 0: tomllib gives no positions for values that parsed."""
    current = ""
    assignment = re.compile(rf'^\s*(?:"{re.escape(key)}"|{re.escape(key)})\s*[.=]')
    dotted = re.compile(rf'^\s*{re.escape(table)}\s*\.\s*"?{re.escape(key)}"?\s*=') if table \
        else None
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"^\s*\[\s*([^\]]+?)\s*\]", line)
        if header:
            current = header.group(1)
            if not table and current.split(".")[0] == key:
                return number
            continue
        if current == table and assignment.match(line):
            return number
        if dotted is not None and not current and dotted.match(line):
            return number
    return 0


def _toml_type(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
             list: "an array", dict: "a table"}
    return next((name for kind, name in names.items() if isinstance(value, kind)),
                type(value).__name__)
