"""Remote model repositories: which object store a ``--model-repository`` URL names, through
the storage plugins registered by URL scheme (``inferd_register_repository_storage``; the
built-in ``inferd.plugins.storage.fsspec`` reads ``s3://``, ``gs://``, ``as://`` and ``az://``).

Owns the contract: ``RemoteLocation`` (where a root lives), ``RemoteStorageError`` (a root that
cannot be read now, in one sentence for clients), the ``StorageSpec`` a plugin registers, and
the lookups the repository makes by scheme: ``is_remote_url``, ``parse_url``, ``check_url``,
``open_filesystem`` (an fsspec-compatible filesystem: ``ls``, ``find``, ``get_file``) and
``describe_error``. A root whose scheme no plugin reads is a local folder's name to
``is_remote_url``; ``parse_url`` refuses it, listing the schemes there are. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inferd.kernel.runtime.registry import Registry
from inferd.protocols.errors import InvalidArgument

READ_TIMEOUT_SECS = 30.0  # --repository-timeout-secs's default


class RemoteStorageError(InvalidArgument):
    """A remote repository cannot be read now; the message is one sentence for clients."""


@dataclass(frozen=True, slots=True)
class RemoteLocation:
    """Where a remote root lives: the URL as given (for messages: it holds no secret), its
    scheme, the ``bucket/path`` under it, the filesystem's options (which may hold a key:
    never logged), and the inferd extra that installs its client library."""

    url: str
    scheme: str
    root: str
    options: dict[str, Any] = field(default_factory=dict, repr=False)
    extra: str = ""


@dataclass(frozen=True, slots=True)
class StorageSpec:
    """Object storage for the URL ``schemes`` (lower case, without ``://``).

    ``parse(url, env, timeout)``: the location (``InvalidArgument`` for a malformed URL), no
    I/O. ``check(location)``: raise ``InvalidArgument`` saying what to install when the client
    library is missing. ``open(location)``: a fresh fsspec-compatible filesystem (no listing
    cache). ``describe_error(url, error)``: one sentence for a failed call, naming no secret.
    """

    name: str
    schemes: tuple[str, ...]
    parse: Callable[[str, Mapping[str, str] | None, float], RemoteLocation]
    check: Callable[[RemoteLocation], None]
    open: Callable[[RemoteLocation], Any]
    describe_error: Callable[[str, BaseException], str]


class StorageRegistry(Registry[StorageSpec]):
    """Filled by ``inferd_register_repository_storage`` hooks."""

    kind = "repository storage"

    def for_scheme(self, scheme: str) -> StorageSpec | None:
        return next((spec for spec in self if scheme.lower() in spec.schemes), None)

    def schemes(self) -> tuple[str, ...]:
        return tuple(scheme for spec in self for scheme in spec.schemes)


def _spec(url: str, storages: StorageRegistry) -> StorageSpec:
    spec = storages.for_scheme(url.partition("://")[0])
    if spec is None:
        listed = ", ".join(f"{scheme}://" for scheme in storages.schemes()) or "none installed"
        raise InvalidArgument(f"{url}: not a remote repository URL ({listed})")
    return spec


def is_remote_url(root: str, storages: StorageRegistry) -> bool:
    """Whether a ``--model-repository`` value names object storage, one of ``storages`` (the
    server's storage plugins), rather than a folder."""
    scheme, separator, _ = root.partition("://")
    return bool(separator) and storages.for_scheme(scheme) is not None


def parse_url(url: str, env: Mapping[str, str] | None = None, *,
              timeout: float = READ_TIMEOUT_SECS,
              storages: StorageRegistry) -> RemoteLocation:
    """The location ``url`` names, each request bounded by ``timeout`` seconds of silence;
    ``InvalidArgument`` for a malformed one."""
    return _spec(url, storages).parse(url, env, timeout)


def open_filesystem(location: RemoteLocation, storages: StorageRegistry) -> Any:
    """A fresh filesystem for ``location``; ``InvalidArgument`` naming the extra when its
    client library is not installed."""
    return _spec(location.url, storages).open(location)


def check_url(url: str, storages: StorageRegistry) -> RemoteLocation:
    """``url`` parsed and its client library importable (a start-up check: no request)."""
    spec = _spec(url, storages)
    location = spec.parse(url, None, READ_TIMEOUT_SECS)
    spec.check(location)
    return location


def describe_error(url: str, error: BaseException,
                   storages: StorageRegistry) -> str:
    """One sentence for a failed call on the repository at ``url``, in words an operator
    acts on (the storage plugin's)."""
    if isinstance(error, InvalidArgument):
        return str(error.message)
    return _spec(url, storages).describe_error(url, error)
