"""What an object store's listing says about a model's files, in inferd's terms.

Owns ``RemoteFile`` (an object's path inside its model folder, size, ETag and LastModified,
read from any fsspec implementation's listing entry) and the rules on object keys: which are
hidden (as the local fingerprints: editor swap files, bytecode caches), which version folder
a key is in, and which keys are refused because they would lead outside the model's cache
folder. Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_MAX_VERSION = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One object of a model: its path inside the model folder, size, ETag, LastModified."""

    path: str
    size: int
    etag: str
    mtime: float

    def line(self) -> str:
        """What a fingerprint hashes of it: the content's identity, not when it was put."""
        return f"{self.path}\0{self.size}\0{self.etag or self.mtime}\n"

    def record(self) -> dict[str, Any]:
        return {"size": self.size, "etag": self.etag, "mtime": self.mtime}

    def same_as(self, recorded: dict[str, Any] | None) -> bool:
        if not recorded or recorded.get("size") != self.size:
            return False
        if self.etag and recorded.get("etag"):
            return bool(recorded["etag"] == self.etag)
        return bool(recorded.get("mtime") == self.mtime)

    @property
    def version(self) -> int | None:
        """The version folder the file is in, or None for the model's other files."""
        top = self.path.split("/", 1)[0]
        if "/" in self.path and is_version(top):
            return int(top)
        return None




def is_version(name: str) -> bool:
    return (name.isascii() and name.isdigit() and (name == "0" or name[0] != "0")
            and int(name) <= _MAX_VERSION)


def hidden(relative: str) -> bool:
    # As the local fingerprints: hidden entries and bytecode caches are not the model.
    return any(part.startswith(".") or part == "__pycache__" for part in relative.split("/"))


def key_problem(relative: str) -> str:
    if relative.startswith("/") or "\\" in relative or "\0" in relative:
        return "an absolute path, a '\\' or a NUL in an object key"
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return "'.', '..' or an empty part in an object key"
    return ""


def parents(key: str) -> list[str]:
    parts = key.split("/")[:-1]
    return ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]


def _etag(info: dict[str, Any]) -> str:
    return str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or "").strip('"')


def _mtime(info: dict[str, Any]) -> float:
    value = info.get("LastModified") or info.get("last_modified") or info.get("updated") \
        or info.get("mtime")
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    return 0.0


def remote_file(relative: str, info: dict[str, Any]) -> RemoteFile:
    return RemoteFile(relative, int(info.get("size") or info.get("Size") or 0), _etag(info),
                      _mtime(info))


def digest(lines: Sequence[str]) -> str:
    """A fingerprint of ``lines`` (``RemoteFile.line``), whatever their order."""
    hashed = hashlib.sha256()
    for line in sorted(lines):
        hashed.update(line.encode("utf-8", "surrogateescape"))
    return hashed.hexdigest()


def size_text(count: int) -> str:
    unit, scale = next(((u, s) for u, s in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
                        if count >= s), ("bytes", 1))
    return f"{count / scale:.1f} {unit}" if scale > 1 else f"{count} bytes"
