"""The ``s3`` control-state store plugin: the control-state record of ``--model-control-state``
on S3 (the kernel owns the format): ``s3://bucket/key``, or Triton's ``s3://host:port/bucket/key``
for a custom endpoint, changed by compare-and-swap with S3's conditional writes.

Owns the store (the URL is read as a remote repository's is, by
``inferd.plugins.storage.fsspec``; botocore, from the ``s3`` extra, is imported when a record is
on S3): a change reads the
record and its ETag, applies itself, and writes with ``IfMatch=<that ETag>`` (``IfNoneMatch='*'``
for the first record); a 412 (or 409) means another replica wrote in between, so it backs off
a little, reads again and applies itself again. File overrides go first, to
``<key>.files/<sha256>``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

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
from inferd.plugins.storage.fsspec import parse_url
from inferd.protocols.errors import InvalidArgument

CAS_ATTEMPTS = 64  # compare-and-swap retries of one change before it gives up


def s3_location(url: str) -> tuple[Any, str, str]:
    """(botocore S3 client, bucket, key) of ``s3://bucket/key`` in any of the forms a remote
    repository takes (``inferd.plugins.storage.fsspec``: Triton's custom endpoints, the same
    credentials, region and timeouts). botocore comes with the ``s3`` extra, imported here."""
    try:
        location = parse_url(url)
    except InvalidArgument as error:
        raise RecordError(str(error.message)) from None
    bucket, _, key = location.root.partition("/")
    if location.scheme != "s3" or not key:
        raise RecordError(f"{url}: an S3 record is s3://bucket/key or s3://host:port/bucket/key")
    try:
        import botocore.config
        import botocore.session
    except ImportError:
        raise RecordError(f"{url}: an s3:// record needs botocore (pip install 'inferd[s3]')"
                          ) from None
    options = location.options
    region = options.get("client_kwargs", {}).get("region_name", "us-east-1")
    client = botocore.session.get_session().create_client(
        "s3", region_name=region, endpoint_url=options.get("endpoint_url"),
        config=botocore.config.Config(**options["config_kwargs"]))
    return client, bucket, key


class S3Store:
    """A record in an S3 bucket, changed by compare-and-swap (conditional writes)."""

    def __init__(self, url: str) -> None:
        self.where = url
        self._client, self._bucket, self._key = s3_location(url)

    def _call(self, operation: str, **arguments: Any) -> Any:
        """``operation`` on the client; errors other than the ones callers handle become a
        ``RecordError`` naming the record."""
        import botocore.exceptions

        try:
            return getattr(self._client, operation)(Bucket=self._bucket, **arguments)
        except botocore.exceptions.ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "PreconditionFailed", "412",
                        "ConditionalRequestConflict"):
                raise
            raise RecordError(f"{self.where}: {operation}: {error}") from None
        except botocore.exceptions.BotoCoreError as error:
            raise RecordError(f"{self.where}: {error}") from None

    def token(self) -> str | None:
        import botocore.exceptions

        try:
            etag: str = self._call("head_object", Key=self._key)["ETag"]
        except botocore.exceptions.ClientError:
            return None  # 404: no record yet
        return etag

    def read(self) -> tuple[Record, str | None]:
        import botocore.exceptions

        try:
            reply = self._call("get_object", Key=self._key)
        except botocore.exceptions.ClientError:
            return Record(), None
        try:
            data = reply["Body"].read()
        except (OSError, botocore.exceptions.BotoCoreError) as error:
            raise RecordError(f"{self.where}: reading the record: {error}") from None
        return parse_record(data, self.where), reply["ETag"]

    def update(self, change: Callable[[Record], Mapping[str, Entry] | None],
               blobs: Mapping[str, bytes]) -> Record:
        import botocore.exceptions

        for sha, content in blobs.items():
            try:
                self._call("head_object", Key=self._blob_key(sha))
            except botocore.exceptions.ClientError:
                self._call("put_object", Key=self._blob_key(sha), Body=content)
        for attempt in range(CAS_ATTEMPTS):
            current, etag = self.read()
            models = change(current)
            if models is None:
                return current
            record = Record(current.generation + 1, dict(models))
            condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                self._call("put_object", Key=self._key, Body=dump_record(record),
                           ContentType="application/json", **condition)
            except botocore.exceptions.ClientError:
                # Another replica wrote first: back off a little, then re-read and re-apply.
                time.sleep(random.uniform(0.0, min(0.5, 0.01 * 2 ** min(attempt, 6))))
                continue
            return record
        raise RecordError(f"{self.where}: gave up after {CAS_ATTEMPTS} conflicting writes")

    def blob(self, sha: str) -> bytes:
        import botocore.exceptions

        try:
            data: bytes = self._call("get_object", Key=self._blob_key(sha))["Body"].read()
        except botocore.exceptions.ClientError:
            raise RecordError(f"{self.where}: the file override {sha} is missing") from None
        except (OSError, botocore.exceptions.BotoCoreError) as error:
            raise RecordError(f"{self.where}: reading the file override {sha}: {error}"
                              ) from None
        content: bytes = checked_override(self.where, sha, data)
        return content

    def _blob_key(self, sha: str) -> str:
        return f"{self._key}.files/{sha}"


def open_s3(where: str) -> ControlStateStore:
    return S3Store(where)


@hookimpl
def inferd_register_control_state_stores(registry: ControlStateStoreRegistry) -> None:
    registry.add(ControlStateStoreSpec("s3", "s3", "an s3:// URL", open_s3))
