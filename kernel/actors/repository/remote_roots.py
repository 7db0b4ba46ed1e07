"""The remote roots of one model repository, side by side
(``inferd.kernel.actors.repository.folders`` owns the rules that mix them with local roots).

Owns asking every ``RepositoryMirror`` at once: the model names each lists, POLL's
fingerprints, which roots hold a model, and the fetch counters as metric samples. A root that
cannot be listed reports its last-listed models with the failure as their problem, never an
empty listing (``inferd.kernel.actors.repository.mirror``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from inferd.kernel.actors.repository.mirror import RepositoryMirror, default_cache_dir
from inferd.kernel.sdk.storage import READ_TIMEOUT_SECS, RemoteStorageError, StorageRegistry

Sample = tuple[str, dict[str, str], float]


class RemoteRoots:
    """The mirrors of ``urls`` (duplicates once), cached under ``cache_dir`` (the default
    when None), each request bounded by ``timeout`` seconds (``--repository-timeout-secs``),
    read through ``storages`` (the server's storage plugins)."""

    def __init__(self, urls: Sequence[str], storages: StorageRegistry,
                 cache_dir: str | Path | None = None,
                 timeout: float = READ_TIMEOUT_SECS) -> None:
        unique = dict.fromkeys(url.rstrip("/") for url in urls)
        cache = cache_dir or default_cache_dir()
        self.mirrors = tuple(RepositoryMirror(url, cache, storages=storages, timeout=timeout)
                             for url in unique)

    def names(self, max_age: float = 0.0) -> tuple[list[str], dict[str, str]]:
        """The names every root lists (a name once per root holding it), and the problems
        of the models of roots that cannot be listed now; ``RepositoryMirror.names``."""
        names: list[str] = []
        problems: dict[str, str] = {}
        for mirror in self.mirrors:
            listed, failures = mirror.names(max_age)
            names += listed
            problems.update(failures)
        return names, problems

    def fingerprints(self) -> tuple[dict[str, str], list[str], dict[str, str]]:
        """model -> fingerprint, the names (once per root holding them), and the problems,
        from one recursive listing of each root."""
        fingerprints: dict[str, str] = {}
        names: list[str] = []
        problems: dict[str, str] = {}
        for mirror in self.mirrors:
            found, failures = mirror.fingerprints()
            fingerprints.update(found)
            names += found
            problems.update(failures)
        return fingerprints, names, problems

    def has(self, name: str) -> bool:
        return any(mirror.has(name) for mirror in self.mirrors)

    def holders(self, name: str, *, fresh: bool, local: bool) -> list[RepositoryMirror]:
        """The roots holding ``name`` (``fresh``: listed again unless known). None holding
        it while one cannot be listed, and no local root (``local``) holding it, raises that
        root's failure: the model may well be there."""
        holders = [mirror for mirror in self.mirrors if mirror.has(name, fresh=fresh)]
        failure = next((mirror.failure for mirror in self.mirrors if mirror.failure), "")
        if not holders and failure and not local:
            raise RemoteStorageError(failure)
        return holders

    def samples(self) -> list[Sample]:
        """What each root's loads fetched, as metric samples."""
        samples: list[Sample] = []
        for mirror in self.mirrors:
            labels = {"repository": mirror.url}
            samples += [("inferd_repository_fetched_files_total", labels, mirror.fetched_files),
                        ("inferd_repository_fetched_bytes_total", labels, mirror.fetched_bytes)]
        return samples
