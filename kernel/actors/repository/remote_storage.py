"""Remote model repositories: which object store a ``--model-repository`` URL names, through
the storage plugins registered by URL scheme (``inferd_register_repository_storage``; the
built-in ``inferd.plugins.storage.fsspec`` reads ``s3://``, ``gs://``, ``as://`` and ``az://``).

The contract (``RemoteLocation``, ``RemoteStorageError``, the ``StorageSpec`` a plugin
registers) is the SDK's, ``inferd.kernel.sdk.storage``; this module owns the lookups the
repository makes by scheme: ``is_remote_url``, ``parse_url``, ``check_url``,
``open_filesystem`` (an fsspec-compatible filesystem: ``ls``, ``find``, ``get_file``) and
``describe_error``. A root whose scheme no plugin reads is a local folder's name to
``is_remote_url``; ``parse_url`` refuses it, listing the schemes there are. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferd.kernel.sdk.storage import (
    READ_TIMEOUT_SECS,
    RemoteLocation,
    StorageRegistry,
    StorageSpec,
)
from inferd.protocols.errors import InvalidArgument


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
