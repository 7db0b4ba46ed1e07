"""The contract of control-state stores, and the format of the record they keep.

The control-state record of ``--model-control-state`` (an inferd extension) says which models
EXPLICIT-mode replicas agree to serve, with the overrides that reproduce each load.

The contract of its stores: the record's format, ``ControlStateStore`` and the registry of
stores, which plugins fill by URL scheme (``inferd_register_control_state_stores``: the
built-in ``inferd.plugins.control_state.path`` for a local path and
``inferd.plugins.control_state.s3`` for ``s3://``). The record itself (what it means to a
replica) is the ``control_state`` plugin's (``inferd.plugins.control_state``). The record
is one JSON document::

    {"format": "inferd-model-control-state", "version": 1, "generation": 7,
     "models": {"m": {"config": "<the load's config JSON, or empty>",
                      "files": {"1/model.onnx": "<sha256 of its content>"}}},
     "written_by": {"host": "...", "pid": 123, "at": "2026-12-01T18:00:00Z"}}

File overrides are content-addressed beside the record (``<record>.files/<sha256>``), each
written before the record that names it, so the record stays small whatever the models weigh.

Concurrent writers never corrupt it nor lose an update: every store makes ``update`` atomic
against every other writer (a local path under an exclusive ``flock``, replaced whole; an
``s3://`` record compare-and-swapped with conditional writes). Every write adds one to
``generation``. A store writes the record with ``dump_record``, reads it with
``parse_record`` and checks each file override it reads back with ``checked_override``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.kernel.sdk.registry import Registry
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.names import check_model_name

__all__ = [
    "ControlStateStore", "ControlStateStoreRegistry", "ControlStateStoreSpec",
    "Entry", "Record", "RecordError", "FORMAT", "VERSION",
    "checked_override", "digest", "dump_record", "parse_record",
]

FORMAT = "inferd-model-control-state"
VERSION = 1
_TOP_KEYS = {"format", "version", "generation", "models", "written_by"}
_ENTRY_KEYS = {"config", "files"}


class RecordError(Exception):
    """The record cannot be read, parsed or written; the message names it and says why."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One model as a load made it: its config override (JSON, or empty for the repository's)
    and its file overrides (``"<version>/<path>" -> sha256`` of the content)."""

    config: str = ""
    files: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_load(cls, config: str, files: Mapping[str, bytes]) -> tuple[Entry, dict[str, bytes]]:
        """The entry of a load, and its files keyed by their digests (to store beside it)."""
        blobs = {digest(content): content for content in files.values()}
        return cls(config, {path: digest(content) for path, content in files.items()}), blobs

    def as_json(self) -> dict[str, Any]:
        return {"config": self.config, "files": dict(sorted(self.files.items()))}


@dataclass(frozen=True, slots=True)
class Record:
    generation: int = 0
    models: Mapping[str, Entry] = field(default_factory=dict)

    def with_model(self, name: str, entry: Entry) -> dict[str, Entry] | None:
        """The models with ``name`` as ``entry``; None when that is already so (no write)."""
        if self.models.get(name) == entry:
            return None
        return {**self.models, name: entry}

    def without(self, *names: str) -> dict[str, Entry] | None:
        """The models without ``names``; None when none of them is there (no write)."""
        if not any(name in self.models for name in names):
            return None
        return {n: e for n, e in self.models.items() if n not in names}


def digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def checked_override(where: str, sha: str, content: bytes) -> bytes:
    """``content`` read back for the file override named ``sha`` (``where``: the record's
    URL), or ``RecordError`` when it is damaged: a store checks every override it reads, so a
    damaged one is never loaded."""
    if digest(content) != sha:
        raise RecordError(f"{where}: the file override {sha} is damaged (its content has "
                          f"another sha256)")
    return content


def dump_record(record: Record) -> bytes:
    """``record`` as a store writes it: the JSON document above, ``written_by`` this host and
    process now (``parse_record`` reads it back)."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "generation": record.generation,
        "models": {name: entry.as_json() for name, entry in sorted(record.models.items())},
        "written_by": {
            "host": socket.gethostname(), "pid": os.getpid(),
            "at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
    return (json.dumps(document, indent=1) + "\n").encode()


def parse_record(data: bytes, where: str) -> Record:
    """The record in ``data``, or ``RecordError`` naming ``where`` and the first problem."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordError(f"{where}: not a model control state record (not JSON: {error})"
                          ) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise RecordError(f"{where}: not a model control state record (no \"format\": "
                          f"\"{FORMAT}\")")
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError(f"{where}: \"version\" must be a positive integer")
    if version > VERSION:
        raise RecordError(f"{where}: written in format version {version} by a newer inferd; "
                          f"this inferd reads version {VERSION} only (upgrade it)")
    problem = _problem(document)
    if problem:
        raise RecordError(f"{where}: {problem}")
    models = {name: Entry(entry["config"], dict(entry["files"]))
              for name, entry in document["models"].items()}
    return Record(document["generation"], models)


def _problem(document: dict[str, Any]) -> str:
    unknown = sorted(set(document) - _TOP_KEYS)
    if unknown:
        return f"unknown field '{unknown[0]}'"
    generation = document.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        return "\"generation\" must be a non-negative integer"
    models = document.get("models")
    if not isinstance(models, dict):
        return "\"models\" must be an object"
    for name, entry in models.items():
        try:
            check_model_name(name)
        except InvalidArgument as error:
            return f"model {name!r}: {error.message}"
        if not isinstance(entry, dict) or set(entry) - _ENTRY_KEYS:
            return f"model '{name}': an object with \"config\" and \"files\" only"
        if not isinstance(entry.get("config"), str) or not isinstance(entry.get("files"), dict):
            return f"model '{name}': \"config\" must be a string and \"files\" an object"
        for path, sha in entry["files"].items():
            if not (isinstance(sha, str) and len(sha) == 64
                    and all(c in "0123456789abcdef" for c in sha)):
                return f"model '{name}': file '{path}' must name a sha256 (64 hex digits)"
    return ""


class ControlStateStore(Protocol):
    """Where the record lives. Blocking calls (the caller runs them in a thread)."""

    where: str

    def token(self) -> str | None:
        """Something that changes whenever the record does (cheap: a stat, a HEAD); None
        while there is no record."""

    def read(self) -> tuple[Record, str | None]:
        """The record (empty when there is none yet) and its token."""

    def update(self, change: Callable[[Record], Mapping[str, Entry] | None],
               blobs: Mapping[str, bytes]) -> Record:
        """Write ``change(record)`` as the next generation (``blobs`` stored first, by their
        digests), atomically against every other writer; return the record written, or the
        one read when ``change`` returns None (nothing to write)."""

    def blob(self, sha: str) -> bytes:
        """The content of a file override named by its digest."""


@dataclass(frozen=True, slots=True)
class ControlStateStoreSpec:
    """A kind of store: ``scheme`` is the URL scheme of the records it keeps (``"s3"`` for
    ``s3://...``; ``""`` for a plain path), ``described`` how ``--model-control-state``'s
    error names it (``"an s3:// URL"``), ``open(where)`` the store of one record (blocking,
    no write; ``RecordError`` when it cannot be)."""

    name: str
    scheme: str
    described: str
    open: Callable[[str], ControlStateStore]


class ControlStateStoreRegistry(Registry[ControlStateStoreSpec]):
    """Filled by ``inferd_register_control_state_stores`` hooks:
    ``registry.add(ControlStateStoreSpec(...))``."""

    kind = "control-state store"
