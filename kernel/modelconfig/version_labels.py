"""A model's version labels (an inferd extension): the file ``version_labels.toml`` beside its
``config.pbtxt``, and the rules any change to them must keep.

A label names one version (``stable = 3``); a request that names no version goes to ``stable``
(else, as in Triton, to the highest version ready) and ``canary_percent`` of them go to
``canary``. Other labels only keep their version loaded. The file::

    canary_percent = 10

    [labels]
    stable = 3
    canary = 4

Owns the format, reading it with errors that say ``<model>/version_labels.toml:line:col:
problem`` (what ``inferd check`` points at), and ``VersionLabels``, the value the repository
resolves, control keeps and the labels API changes. Pure apart from reading the one file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inferd.protocols.errors import InvalidArgument

LABELS_FILENAME = "version_labels.toml"
MAX_LABELS_BYTES = 16 * 1024
STABLE, CANARY = "stable", "canary"
MAX_LABELS = 16
_LABEL_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_TOML_POSITION = re.compile(r"^(.*?)\s*\(at line (\d+), column (\d+)\)$")
_KNOWN_KEYS = ("canary_percent", "labels")


@dataclass(frozen=True, slots=True)
class VersionLabels:
    """Labels (name -> version, in name order) and the canary's share of the requests that
    name no version, in percent."""

    labels: dict[str, int] = field(default_factory=dict)
    canary_percent: float = 0.0

    def targets(self) -> tuple[int, ...]:
        """The versions some label keeps loaded, ascending."""
        return tuple(sorted(set(self.labels.values())))

    def to_json(self) -> dict[str, object]:
        return {"labels": dict(sorted(self.labels.items())),
                "canary_percent": self.canary_percent}


def label_problem(name: object, version: object) -> str:
    """Why ``name = version`` cannot be a label ("" when it can)."""
    if not isinstance(name, str) or not _LABEL_NAME.match(name):
        return (f"label name {name!r} must be 1-32 lowercase letters, digits, '_' or '-', "
                "starting with a letter")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return f"label '{name}' must name a version number (an integer >= 1), not {version!r}"
    return ""


def percent_problem(percent: object) -> str:
    """Why ``percent`` cannot be ``canary_percent`` ("" when it can)."""
    if isinstance(percent, bool) or not isinstance(percent, (int, float)) \
            or not 0 <= percent <= 100:
        return f"'canary_percent' must be a number from 0 to 100, not {percent!r}"
    return ""


def check_labels(labels: VersionLabels, model: str, available: tuple[int, ...] | list[int]
                 ) -> None:
    """Refuse labels a model with version folders ``available`` cannot have."""
    if len(labels.labels) > MAX_LABELS:
        raise InvalidArgument(f"model '{model}' may have at most {MAX_LABELS} version labels")
    for name, version in sorted(labels.labels.items()):
        if version not in available:
            raise InvalidArgument(f"label '{name}' of model '{model}' names version "
                                  f"{version}, which has no version folder")


def parse_labels(text: str, filename: str, available: Sequence[int] | None = None
                 ) -> VersionLabels:
    """Parse a ``version_labels.toml`` (whose labels must name one of the version folders
    ``available``, when given); ``InvalidArgument`` reads ``<filename>[:line:col]: problem``."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        problem = str(error)
        if match := _TOML_POSITION.match(problem):
            problem, line, column = match.groups()
            raise InvalidArgument(f"{filename}:{line}:{column}: {problem}") from None
        raise InvalidArgument(f"{filename}: {problem}") from None

    def fail(key: str, problem: str) -> InvalidArgument:
        line = _line_of(text, key)
        return InvalidArgument(f"{filename}:{line}:1: {problem}" if line
                               else f"{filename}: {problem}")

    for key in document:
        if key not in _KNOWN_KEYS:
            raise fail(key, f'unknown key "{key}" (known keys: {", ".join(_KNOWN_KEYS)})')
    percent = document.get("canary_percent", 0)
    if problem := percent_problem(percent):
        raise fail("canary_percent", problem)
    table = document.get("labels", {})
    if not isinstance(table, dict):
        raise fail("labels", '"labels" must be a table of versions (stable = 3)')
    for name, version in table.items():
        if problem := label_problem(name, version):
            raise fail(name, problem)
        if available is not None and version not in available:
            there = ", ".join(str(n) for n in available) or "none"
            raise fail(name, f"label '{name}' names version {version}, which has no version "
                             f"folder (version folders: {there})")
    if len(table) > MAX_LABELS:
        raise fail("labels", f"at most {MAX_LABELS} labels")
    return VersionLabels(dict(sorted(table.items())), float(percent))


def read_labels_file(model_dir: Path, label: str, available: Sequence[int] | None = None
                     ) -> VersionLabels | None:
    """The labels in ``model_dir/version_labels.toml``, or ``None`` when there is no such
    file. ``label`` names the file in errors (``<model>/version_labels.toml``)."""
    path = model_dir / LABELS_FILENAME
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_LABELS_BYTES:
            raise InvalidArgument(f"{label}: larger than {MAX_LABELS_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{label}: the file is not UTF-8 text") from None
    except OSError as error:
        raise InvalidArgument(f"{label}: cannot be read ({error.strerror})") from None
    return parse_labels(text, label, available)


def _line_of(text: str, key: str) -> int:
    """The first line that sets or opens ``key`` (tomllib gives no positions for values that
    parsed), or 0."""
    pattern = re.compile(rf'^\s*(?:\[\s*)?"?{re.escape(key)}"?\s*[=\].]')
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return 0


def selected_versions(model: str, by_policy: Sequence[int], available: Sequence[int],
                      wanted: Sequence[int], exact: bool) -> list[int]:
    """The versions a load brings up: the policy's and ``wanted`` (the labels' targets), or
    with ``exact`` only ``wanted`` (a load of single versions). A wanted version without a
    folder is refused, naming the ones there are."""
    missing = sorted(set(wanted) - set(available))
    if missing:
        there = ", ".join(str(n) for n in available) or "none"
        raise InvalidArgument(
            f"model '{model}' has no version folder for version "
            f"{', '.join(str(n) for n in missing)} (version folders: {there})")
    chosen = set(wanted) if exact else set(by_policy) | set(wanted)
    return sorted(chosen)
