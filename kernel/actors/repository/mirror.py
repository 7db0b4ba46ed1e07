"""A remote model repository root mirrored, model by model, into a local cache folder.

Owns what inferd reads from object storage and when
(``inferd.kernel.actors.repository.remote_storage`` owns the URL and the client). Listing never
downloads: the model names come from one delimiter listing of the root, and POLL's fingerprints from
one recursive listing of it (each object's key, size and ETag), so a poll period costs LIST requests
only. A load fetches: the model's files outside its version folders (config, ``configs/``, labels,
``warmup/``, ...), then the files of the version folders its policy selects, into
``<cache>/<root>/models/<model>``, which the rest of the server reads as any local model folder. A
file whose ETag (or size and LastModified where there is no ETag) matches the last fetch is not
downloaded again; each download is written to a hidden temporary name, given the object's
LastModified as its mtime (so the version fingerprints of unchanged files stay the same across
fetches and restarts), and renamed into place, so a reader never sees half a file; files gone from
the bucket are removed. What was fetched is recorded in ``<cache>/<root>/records/``, so a
restarted server with the same cache folder downloads only what changed.

A listing that fails never reads as an empty bucket: the models last listed are reported
with the failure as their problem (POLL then leaves them as they are, the index says why).
Keys that would lead outside the model's cache folder are refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inferd.kernel.actors.repository.remote_objects import (
    RemoteFile,
    digest,
    hidden,
    is_version,
    key_problem,
    parents,
    remote_file,
    size_text,
)
from inferd.kernel.actors.repository.remote_storage import (
    describe_error,
    open_filesystem,
    parse_url,
)
from inferd.kernel.sdk.storage import READ_TIMEOUT_SECS, RemoteStorageError, StorageRegistry
from inferd.protocols.errors import InvalidArgument, NotFound
from inferd.protocols.names import model_name_problem, quoted

log = logging.getLogger(__name__)

def default_cache_dir() -> Path:
    """``--repository-cache-dir``'s default: ``$XDG_CACHE_HOME/inferd/repositories``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inferd" / "repositories"


class RepositoryMirror:
    """One remote root (``url``) and its cache under ``cache_root``. Thread-safe: the
    repository actor calls it from worker threads."""

    def __init__(self, url: str, cache_root: str | Path, filesystem: Any = None, *,
                 storages: StorageRegistry, timeout: float = READ_TIMEOUT_SECS) -> None:
        self.url = url
        self._storages = storages  # the server's storage plugins, one of which reads ``url``
        self.location = parse_url(url, timeout=timeout, storages=storages)
        self._fs = filesystem
        folder = Path(cache_root) / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
        self.models = folder / "models"
        self._records = folder / "records"
        self._lock = threading.Lock()
        self._model_locks: dict[str, threading.Lock] = {}
        self._known: tuple[str, ...] = ()
        self._failure = ""  # why the last listing failed; "" when it answered
        self._listed_at = -1e9  # time.monotonic() of the last listing that answered
        self.fetched_files = 0
        self.fetched_bytes = 0

    # ------------------------------------------------------------------ listing

    def names(self, max_age: float = 0.0) -> tuple[tuple[str, ...], dict[str, str]]:
        """The model folder names in the root, and (when the storage cannot be listed now)
        the models last listed, each with the failure as its problem. A listing younger
        than ``max_age`` seconds is used again (one index request reads it twice)."""
        if max_age and not self._failure and time.monotonic() - self._listed_at < max_age:
            return self._known, {}
        try:
            entries = self._call(self._filesystem().ls, self.location.root, detail=True,
                                 refresh=True, empty=[])
        except RemoteStorageError as error:
            return self._unreachable(error.message)
        names = sorted(
            name for entry in entries
            if entry.get("type") == "directory"
            and not model_name_problem(name := entry["name"].rstrip("/").rsplit("/", 1)[-1])
        )
        self._answered(tuple(names))
        return tuple(names), {}

    def check(self) -> str:
        """Why the root cannot be listed now, or ``""`` (a start-up check)."""
        self.names()
        return self._failure

    @property
    def failure(self) -> str:
        """Why the last listing failed, or ``""`` when it answered."""
        return self._failure

    def has(self, name: str, *, fresh: bool = False) -> bool:
        """Whether the root held ``name`` when last listed (listing it now when never listed,
        or when ``fresh`` and it was not there)."""
        if (fresh and name not in self._known) or (not self._known and not self._failure):
            self.names()
        return name in self._known

    def fingerprints(self) -> tuple[dict[str, str], dict[str, str]]:
        """model -> a hash of its objects (path, size, ETag or LastModified), from one
        recursive listing of the root; or, when that fails, no fingerprints and the models
        last listed with the failure as their problem."""
        try:
            objects = self._call(self._filesystem().find, self.location.root, detail=True,
                                 withdirs=False, empty={})
        except RemoteStorageError as error:
            return {}, self._unreachable(error.message)[1]
        by_model: dict[str, list[str]] = {}
        for path, info in sorted(objects.items()):
            relative = self._relative(path, self.location.root)
            name, _, inside = relative.partition("/")
            if model_name_problem(name) or not inside:
                continue
            lines = by_model.setdefault(name, [])
            if not hidden(inside):
                lines.append(remote_file(inside, info).line())
        self._answered(tuple(sorted(by_model)))
        return {name: digest(lines) for name, lines in by_model.items()}, {}

    def fingerprint(self, name: str) -> str:
        files = self._model_files(name)
        return str(digest([f.line() for f in files.values()]))

    # ------------------------------------------------------------------ fetching

    @contextlib.contextmanager
    def fetching(self, name: str, *, cached_ok: bool = False) -> Iterator[ModelFetch | CachedCopy]:
        """Fetch ``name``'s files outside its version folders into its cache folder, then
        (``ModelFetch.versions``) those of the versions chosen; one fetch of a model at a
        time. ``cached_ok``: when the storage cannot be read, the copy the last fetch left
        stands in (``CachedCopy``), if it holds the versions chosen."""
        with self._lock:
            lock = self._model_locks.setdefault(name, threading.Lock())
        with lock:
            try:
                files = self._model_files(name)
            except RemoteStorageError as error:
                if not cached_ok:
                    raise
                yield CachedCopy(self, name, error)
                return
            fetch = ModelFetch(self, name, files)
            with _cache_errors(name):
                fetch.prepare()
            yield fetch

    def _model_files(self, name: str) -> dict[str, RemoteFile]:
        prefix = f"{self.location.root}/{name}"
        try:
            objects = self._call(self._filesystem().find, prefix, detail=True, withdirs=False,
                                 empty={})
        except RemoteStorageError as error:
            self._unreachable(error.message)
            raise
        files: dict[str, RemoteFile] = {}
        relatives = {self._relative(path, prefix): info for path, info in objects.items()}
        folders = {part for key in relatives for part in parents(key)}
        for relative, info in relatives.items():
            if not relative or relative.endswith("/") and info.get("size", 0) == 0:
                continue  # the folder itself, or a folder marker object
            problem = key_problem(relative) or (
                "a file and a folder of the same name" if relative in folders else "")
            if problem:
                raise InvalidArgument(
                    f"model '{name}': the object {quoted(relative)} in {self.url} is refused: "
                    f"{problem}")
            if not hidden(relative):
                files[relative] = remote_file(relative, info)
        if not files:
            raise NotFound(f"model '{name}' is not in the model repository")
        return files

    def download(self, remote: RemoteFile, folder: Path) -> None:
        """One object into ``folder``, through a hidden temporary name and a rename."""
        target = folder / remote.path
        if not target.resolve().is_relative_to(folder.resolve()):
            raise InvalidArgument(f"the object {quoted(remote.path)} in {self.url} would be "
                                  "written outside the model's cache folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            shutil.rmtree(target)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.part")
        source = f"{self.location.root}/{folder.name}/{remote.path}"
        try:
            self._call(self._filesystem().get_file, source, str(temporary))
            size = temporary.stat().st_size
            if size != remote.size:
                raise RemoteStorageError(
                    f"the model repository {self.url} cannot be read: {remote.path} arrived "
                    f"with {size} of its {remote.size} bytes")
            os.utime(temporary, (remote.mtime, remote.mtime))
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
        with self._lock:
            self.fetched_files += 1
            self.fetched_bytes += remote.size

    def read_record(self, name: str) -> dict[str, dict[str, Any]]:
        try:
            record = json.loads(self._record_path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        files = record.get("files") if isinstance(record, dict) else None
        return files if isinstance(files, dict) else {}

    def write_record(self, name: str, files: dict[str, dict[str, Any]]) -> None:
        path = self._record_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.part")
        temporary.write_text(json.dumps({"url": self.url, "model": name, "files": files}),
                             encoding="utf-8")
        os.replace(temporary, path)

    def _record_path(self, name: str) -> Path:
        return self._records / f"{hashlib.sha256(name.encode('utf-8')).hexdigest()[:32]}.json"

    # ------------------------------------------------------------------ plumbing

    def _filesystem(self) -> Any:
        with self._lock:
            if self._fs is None:
                self._fs = open_filesystem(self.location, self._storages)
            return self._fs

    def _call(self, function: Any, *args: Any, empty: Any = None, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` with every storage failure as one sentence; a path
        that does not exist in a bucket that does is ``empty`` (a listing finds nothing)."""
        try:
            return function(*args, **kwargs)
        except InvalidArgument:
            raise
        except FileNotFoundError as error:
            text = str(error).lower()
            if empty is not None and "bucket" not in text and "container" not in text:
                return empty
            raise RemoteStorageError(describe_error(self.url, error, self._storages)) from None
        except Exception as error:  # botocore, aiohttp, the SDKs: all mean "cannot read now"
            raise RemoteStorageError(describe_error(self.url, error, self._storages)) from None

    def _relative(self, path: str, prefix: str) -> str:
        path = path.removeprefix(f"{self.location.scheme}://")
        return path[len(prefix) + 1:] if path.startswith(prefix + "/") else ""

    def _unreachable(self, why: str) -> tuple[tuple[str, ...], dict[str, str]]:
        with self._lock:
            first = self._failure != why
            self._failure = why
            known = self._known
        if first:
            log.error("%s; what is loaded keeps serving", why)
        return known, {name: why for name in known}

    def _answered(self, names: tuple[str, ...]) -> None:
        with self._lock:
            failed, self._failure = self._failure, ""
            self._known = names
            self._listed_at = time.monotonic()
        if failed:
            log.info("the model repository %s answers again", self.url)


_ANNOUNCED_BYTES = 64 * 2**20  # a fetch this large says so before it starts


class ModelFetch:
    """One load's fetch of a model (``RepositoryMirror.fetching``)."""

    def __init__(self, mirror: RepositoryMirror, name: str, files: dict[str, RemoteFile]) -> None:
        self.mirror = mirror
        self.name = name
        self.folder = mirror.models / name
        self._files = files
        self._record = mirror.read_record(name)
        self._fetched = 0
        self._bytes = 0
        self._wanted = 0
        self._started = time.monotonic()

    def prepare(self) -> None:
        """Remove what the bucket no longer has; fetch the model's non-version files; make
        every remote version folder exist (empty until chosen) so the policy sees them."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in [p for p in self._record if p not in self._files]:
            gone = self.folder / path
            if not key_problem(path) and (gone.is_file() or gone.is_symlink()):
                gone.unlink()  # (a record edited by hand never leads outside the folder)
            del self._record[path]
        remote_versions = {f.version for f in self._files.values()} - {None}
        for entry in self.folder.iterdir():
            if is_version(entry.name) and int(entry.name) not in remote_versions:
                shutil.rmtree(entry, ignore_errors=True)
        for version in remote_versions:
            (self.folder / str(version)).mkdir(exist_ok=True)
        self._fetch([f for f in self._files.values() if f.version is None])

    def versions(self, chosen: Sequence[int]) -> None:
        """Fetch the files of the ``chosen`` version folders, and say what was fetched."""
        wanted = set(chosen)
        with _cache_errors(self.name):
            self._fetch([f for f in self._files.values() if f.version in wanted])
        log.info("model '%s': fetched %d of %d files (%s) from %s in %.1f s", self.name,
                 self._fetched, self._wanted, size_text(self._bytes), self.mirror.url,
                 time.monotonic() - self._started)

    def _fetch(self, files: list[RemoteFile]) -> None:
        self._wanted += len(files)
        stale = [remote for remote in sorted(files, key=lambda f: f.path)
                 if not self._unchanged(remote)]
        if sum(remote.size for remote in stale) >= _ANNOUNCED_BYTES:  # progress, for long ones
            log.info("model '%s': fetching %d files (%s) from %s", self.name, len(stale),
                     size_text(sum(remote.size for remote in stale)), self.mirror.url)
        try:
            for remote in stale:
                self.mirror.download(remote, self.folder)
                self._record[remote.path] = remote.record()
                self._fetched += 1
                self._bytes += remote.size
        finally:  # what did arrive is not fetched again, even when the rest failed
            self.mirror.write_record(self.name, self._record)

    def _unchanged(self, remote: RemoteFile) -> bool:
        """The last fetch got this very object, and its file is still there."""
        local = self.folder / remote.path
        return bool(remote.same_as(self._record.get(remote.path)) and local.is_file()
                    and local.stat().st_size == remote.size)


class CachedCopy:
    """What the last fetch of a model left in its cache folder, standing in for a fetch while
    the storage cannot be read (a reload after an executor restart: what served keeps
    serving). Complete or refused: every file the record names must be there, with its size."""

    def __init__(self, mirror: RepositoryMirror, name: str, why: RemoteStorageError) -> None:
        self.mirror = mirror
        self.name = name
        self.folder = mirror.models / name
        self._record = mirror.read_record(name)
        self._why = why

    def versions(self, chosen: Sequence[int]) -> None:
        """Refuse (with why the storage could not be read) unless the copy is whole and holds
        the ``chosen`` versions."""
        held = {int(path.split("/", 1)[0]) for path in self._record
                if "/" in path and is_version(path.split("/", 1)[0])}
        whole = all((self.folder / path).is_file()
                    and (self.folder / path).stat().st_size == entry.get("size")
                    for path, entry in self._record.items() if not key_problem(path))
        if not (self._record and whole and set(chosen) <= held):
            raise self._why
        log.warning("model '%s': %s; loading the copy in the repository cache", self.name,
                    self._why.message)


@contextlib.contextmanager
def _cache_errors(name: str) -> Iterator[None]:
    """The local disk failing (full, read-only) is the cache's fault, not the storage's."""
    try:
        yield
    except OSError as error:
        raise InvalidArgument(f"model '{name}': the repository cache (--repository-cache-dir) "
                              f"cannot be written: {error.strerror or error}") from None
