"""The ``fsspec`` repository storage plugin: remote model repositories on object storage.

Owns the URL forms ``--model-repository`` accepts for object storage (Triton's, plus
fsspec's ``az://``), turning one into an fsspec filesystem and the ``bucket/path`` under it:

- ``s3://bucket/path``; ``s3://host:port/bucket/path`` (a custom endpoint over HTTP) and
  ``s3://http://host:port/...`` / ``s3://https://host:port/...`` (Triton's forms). Credentials,
  region and profile come from botocore's own chain (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
  ``AWS_SHARED_CREDENTIALS_FILE``, ...); ``AWS_REGION`` or ``AWS_DEFAULT_REGION`` is the region.
- ``gs://bucket/path`` through gcsfs (``GOOGLE_APPLICATION_CREDENTIALS``, else Google's
  default chain, else anonymous, as Triton).
- ``as://account/container/path`` (Triton's Azure form; ``AZURE_STORAGE_ACCOUNT`` wins over the
  URL's account as in Triton, ``AZURE_STORAGE_KEY`` is the shared key) and fsspec's
  ``az://container/path`` (the account from ``AZURE_STORAGE_ACCOUNT``), through adlfs.

The fsspec implementations are optional extras imported only when a URL needs one; a
missing one is a clear error naming the extra. Also owns turning a storage failure into one
sentence that names the URL and the cause, never a secret. No I/O beyond building clients.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from typing import Any

from inferd.kernel.sdk import (
    READ_TIMEOUT_SECS,
    RemoteLocation,
    StorageRegistry,
    StorageSpec,
    hookimpl,
)
from inferd.protocols.errors import InvalidArgument

# scheme -> (fsspec module that implements it, inferd's extra that installs it)
_IMPLEMENTATIONS = {
    "s3": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "as": ("adlfs", "azure"),
    "az": ("adlfs", "azure"),
}
# Every remote call is bounded: a hung endpoint fails the call instead of stalling a load.
CONNECT_TIMEOUT_SECS = 5.0
ATTEMPTS = 2  # tries of one request (botocore's, and s3fs's own), each bounded as above
# Triton's regular expression for the custom-endpoint form (core's s3.h), the bucket and
# path left to the plain split so any S3 key reads the same either way.
_S3_ENDPOINT = re.compile(r"(http://|https://|)([0-9a-zA-Z\-.]+):([0-9]+)/(.*)")
_AZURE_HOST_SUFFIX = ".blob.core.windows.net"


def parse_url(url: str, env: Mapping[str, str] | None = None, *,
              timeout: float = READ_TIMEOUT_SECS) -> RemoteLocation:
    """The location ``url`` names, each request bounded by ``timeout`` seconds of silence
    (and connecting by at most ``CONNECT_TIMEOUT_SECS``); ``InvalidArgument`` for a
    malformed one."""
    env = os.environ if env is None else env
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in _IMPLEMENTATIONS:
        raise InvalidArgument(f"{url}: not a remote repository URL (s3://, gs://, as://, az://)")
    if scheme == "s3":
        return _s3(url, rest, env, timeout)
    if scheme == "gs":
        root = _bucket_path(url, rest, "bucket")
        options: dict[str, Any] = {"requests_timeout": timeout}
        if env.get("GOOGLE_APPLICATION_CREDENTIALS"):
            options["token"] = env["GOOGLE_APPLICATION_CREDENTIALS"]
        return RemoteLocation(url, scheme, root, options, _extra(scheme))
    if scheme == "as":
        account, _, path = rest.partition("/")
        if not account or not path.strip("/"):
            raise InvalidArgument(f"{url}: an Azure repository is as://account/container/path")
        account = env.get("AZURE_STORAGE_ACCOUNT") or account.removesuffix(_AZURE_HOST_SUFFIX)
        return RemoteLocation(url, scheme, _bucket_path(url, path, "container"),
                              _azure_options(account, env, timeout), _extra(scheme))
    root = _bucket_path(url, rest, "container")
    return RemoteLocation(url, scheme, root,
                          _azure_options(env.get("AZURE_STORAGE_ACCOUNT"), env, timeout),
                          _extra(scheme))


def _extra(scheme: str) -> str:
    return _IMPLEMENTATIONS[scheme][1]


def _s3(url: str, rest: str, env: Mapping[str, str], timeout: float) -> RemoteLocation:
    options: dict[str, Any] = {
        "config_kwargs": {
            "connect_timeout": min(CONNECT_TIMEOUT_SECS, timeout),
            "read_timeout": timeout,
            "retries": {"max_attempts": ATTEMPTS, "mode": "standard"},
        },
    }
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        options["client_kwargs"] = {"region_name": region}
    endpoint = _S3_ENDPOINT.fullmatch(rest)
    if endpoint is not None:
        protocol, host, port, rest = endpoint.groups()
        options["endpoint_url"] = f"{protocol or 'http://'}{host}:{port}"
    elif rest.startswith(("http://", "https://")):
        raise InvalidArgument(f"{url}: a custom S3 endpoint is s3://[http[s]://]host:port/bucket/path")
    return RemoteLocation(url, "s3", _bucket_path(url, rest, "bucket"), options, _extra("s3"))


def _azure_options(account: str | None, env: Mapping[str, str], timeout: float
                   ) -> dict[str, Any]:
    options: dict[str, Any] = {"connection_timeout": max(1, int(min(CONNECT_TIMEOUT_SECS,
                                                                    timeout))),
                               "read_timeout": max(1, int(timeout))}
    if account:
        options["account_name"] = account
    if env.get("AZURE_STORAGE_KEY"):
        options["account_key"] = env["AZURE_STORAGE_KEY"]
    return options


def _bucket_path(url: str, rest: str, what: str) -> str:
    parts = [part for part in rest.split("/") if part]
    if not parts:
        raise InvalidArgument(f"{url}: no {what} name in the URL")
    if any(part in (".", "..") or "\\" in part for part in parts):
        raise InvalidArgument(f"{url}: '.', '..' and '\\' are not allowed in the path")
    return "/".join(parts)


def open_filesystem(location: RemoteLocation) -> Any:
    """A fresh fsspec filesystem for ``location`` (no instance or listing cache: every poll
    must see the bucket as it is now); ``InvalidArgument`` naming the extra when the
    implementation is not installed."""
    module_name, extra = _IMPLEMENTATIONS[location.scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise InvalidArgument(
            f"{location.url}: {location.scheme}:// repositories need the {module_name} package: "
            f"pip install 'inferd[{extra}]'"
        ) from None
    classes = {"s3fs": "S3FileSystem", "gcsfs": "GCSFileSystem", "adlfs": "AzureBlobFileSystem"}
    filesystem = getattr(module, classes[module_name])
    instance = filesystem(skip_instance_cache=True, use_listings_cache=False,
                          **location.options)
    if location.scheme == "s3":
        instance.retries = ATTEMPTS  # s3fs retries a timed-out request 5 times by default
    return instance


def check(location: RemoteLocation) -> None:
    """``location``'s implementation importable (a start-up check: no request)."""
    module_name, extra = _IMPLEMENTATIONS[location.scheme]
    try:
        importlib.import_module(module_name)
    except ImportError:
        raise InvalidArgument(
            f"{location.url}: {location.scheme}:// repositories need the {module_name} "
            f"package: pip install 'inferd[{extra}]'"
        ) from None


def describe_error(url: str, error: BaseException) -> str:
    """One sentence for a failed call on the repository at ``url``: what went wrong, in
    words an operator acts on. The exception's own text is kept only where it names no
    secret (botocore's and the HTTP libraries' do not)."""
    if isinstance(error, InvalidArgument):
        return str(error.message)
    name = type(error).__name__
    # The request's query (which differs from call to call) is no part of the cause.
    text = re.sub(r"\?[^\s\"']*", "", str(error)).strip() or name
    lowered = f"{name} {text}".lower()
    if "nocredentials" in name.lower() or "unable to locate credentials" in lowered:
        cause = ("no credentials were found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                 "or AWS_PROFILE)")
    elif "partialcredentials" in name.lower():
        cause = f"the credentials are incomplete ({text})"
    elif any(word in lowered for word in ("invalidaccesskeyid", "signaturedoesnotmatch",
                                          "expiredtoken", "invalidtoken",
                                          "authenticationfailed")):
        cause = f"the credentials were refused ({text})"
    elif isinstance(error, PermissionError) or "accessdenied" in lowered \
            or "access denied" in lowered or "forbidden" in lowered:
        cause = f"access denied ({text})"
    elif "nosuchbucket" in lowered or "bucket does not exist" in lowered \
            or "containernotfound" in lowered:
        cause = "no such bucket"
    elif isinstance(error, FileNotFoundError):
        cause = "no such bucket or path"
    elif any(word in lowered for word in ("timeout", "timed out")):
        cause = f"the storage did not answer in time ({text})"
    elif any(word in lowered for word in ("connect", "connection", "unreachable",
                                          "name or service not known", "resolve")):
        cause = f"the storage cannot be reached ({text})"
    else:
        cause = f"{name}: {text}"
    return f"the model repository {url} cannot be read: {cause}"


def _parse(url: str, env: Mapping[str, str] | None, timeout: float) -> RemoteLocation:
    return parse_url(url, env, timeout=timeout)


@hookimpl
def inferd_register_repository_storage(registry: StorageRegistry) -> None:
    registry.add(StorageSpec("fsspec", tuple(_IMPLEMENTATIONS), _parse, check, open_filesystem,
                             describe_error))
