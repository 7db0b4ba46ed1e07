"""The contract of repository storage plugins: the object stores repository roots name.

A storage plugin (``inferd_register_repository_storage``) reads the
``--model-repository=<scheme>://...`` roots of its URL schemes (the built-in
``inferd.plugins.storage.fsspec`` reads ``s3://``, ``gs://``, ``as://`` and ``az://``).

``RemoteLocation`` is where a root lives, ``RemoteStorageError`` a root that cannot be read
now (one sentence for clients), ``StorageSpec`` what a plugin registers: how to parse a URL,
check its client library, open an fsspec-compatible filesystem (``ls``, ``find``,
``get_file``) and describe a failed call. The lookups by scheme the repository makes are the
kernel's (``inferd.kernel.actors.repository.remote_storage``). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inferd.kernel.sdk.registry import Registry
from inferd.protocols.errors import InvalidArgument

__all__ = ["READ_TIMEOUT_SECS", "RemoteLocation", "RemoteStorageError", "StorageRegistry",
           "StorageSpec"]

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
