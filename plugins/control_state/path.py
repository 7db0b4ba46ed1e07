"""The ``path`` control-state store plugin: ``--model-control-state`` on a local (or shared
POSIX) file system.

A record is changed read-modify-write under an exclusive ``flock`` of ``<record>.lock``; the
new record goes to a temporary file in the same folder, is fsynced and ``os.replace``d over the
old one (readers never take the lock: they see the old record or the new one, never half of
one). File overrides live beside it in ``<record>.files/<sha256>``, each written before the
record that names it; those no model names any more are removed under the lock.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from inferd.kernel.sdk import (
    ControlStateStore,
    ControlStateStoreRegistry,
    ControlStateStoreSpec,
    hookimpl,
)
from inferd.kernel.sdk.control_state import (
    Entry,
    Record,
    RecordError,
    checked_override,
    dump_record,
    parse_record,
)


class LocalStore:
    """A record on a local (or shared POSIX) file system."""

    def __init__(self, path: str) -> None:
        self.where = path
        self.path = Path(path).absolute()
        self._lock = self.path.with_name(self.path.name + ".lock")
        self._files = self.path.with_name(self.path.name + ".files")
        if not self.path.parent.is_dir():
            raise RecordError(f"{path}: its folder {self.path.parent} does not exist")

    def token(self) -> str | None:
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise RecordError(f"{self.where}: cannot read the record: {error.strerror}"
                              ) from None
        # A replace gives the record a new inode: a write is seen even within one mtime tick.
        return f"{status.st_ino}:{status.st_size}:{status.st_mtime_ns}"

    def read(self) -> tuple[Record, str | None]:
        try:
            with self.path.open("rb") as file:
                status = os.fstat(file.fileno())
                data = file.read()
        except FileNotFoundError:
            return Record(), None
        except OSError as error:
            raise RecordError(f"{self.where}: cannot read the record: {error.strerror}"
                              ) from None
        token = f"{status.st_ino}:{status.st_size}:{status.st_mtime_ns}"
        return parse_record(data, self.where), token

    def update(self, change: Callable[[Record], Mapping[str, Entry] | None],
               blobs: Mapping[str, bytes]) -> Record:
        try:
            descriptor = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise RecordError(f"{self._lock}: cannot open the lock file: {error.strerror}"
                              ) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # released when the descriptor closes
            current, _ = self.read()
            models = change(current)
            if models is None:
                return current
            record = Record(current.generation + 1, dict(models))
            try:
                for sha, content in blobs.items():
                    if not (self._files / sha).exists():
                        _write_atomically(self._files / sha, content)
                _write_atomically(self.path, dump_record(record))
            except OSError as error:
                raise RecordError(f"{self.where}: cannot write the record: {error.strerror}"
                                  ) from None
            self._collect(record)
            return record
        finally:
            os.close(descriptor)

    def blob(self, sha: str) -> bytes:
        try:
            return checked_override(self.where, sha, (self._files / sha).read_bytes())
        except OSError as error:
            raise RecordError(f"{self._files / sha}: cannot read a file override: "
                              f"{error.strerror}") from None

    def _collect(self, record: Record) -> None:
        """Remove the files no model of ``record`` names (under the lock: no writer is
        between storing a file and naming it)."""
        used = {sha for entry in record.models.values() for sha in entry.files.values()}
        try:
            stored = list(self._files.iterdir())
        except OSError:
            return
        for path in stored:
            if path.name not in used:
                path.unlink(missing_ok=True)


def _write_atomically(path: Path, content: bytes) -> None:
    """``content`` at ``path`` all at once: a temporary file in the same folder, fsynced,
    renamed over ``path``, and the folder fsynced (the rename survives a crash)."""
    path.parent.mkdir(exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def open_path(where: str) -> ControlStateStore:
    return LocalStore(where)


@hookimpl
def inferd_register_control_state_stores(registry: ControlStateStoreRegistry) -> None:
    registry.add(ControlStateStoreSpec("path", "", "a local path", open_path))
