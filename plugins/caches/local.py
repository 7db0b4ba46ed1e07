"""The ``local`` response cache plugin: entries in this process's memory, bounded by bytes.

``--cache-config=local,size=BYTES`` (or the deprecated ``--response-cache-byte-size``).

``ByteBoundedLRU`` is the policy, pure and synchronous: an entry costs its key's and its
value's bytes; inserting evicts least recently used entries until the new one fits; an entry
larger than the whole cache is not inserted (Triton's local cache refuses it too); a lookup
makes an entry the most recently used; inserting a key already there keeps the first entry
(as Triton's, which answers ALREADY_EXISTS). ``LocalCache`` puts it behind the
``ResponseCache`` interface with Triton's local cache metrics (``nv_cache_*``). No I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferd.kernel.sdk import (
    CacheConfigError,
    CacheCounters,
    CacheRegistry,
    CacheSpec,
    ResponseCache,
    Sample,
    hookimpl,
    whole_number,
)

NAME = "local"


@dataclass(frozen=True, slots=True)
class LocalSettings:
    size: int  # bytes


def configure(values: Mapping[str, Any], environ: Mapping[str, str]) -> LocalSettings:
    if "size" not in values:
        raise CacheConfigError("Failed to initialize LocalCache: config didn't contain a "
                               "valid 'size' field (--cache-config=local,size=BYTES)")
    return LocalSettings(int(values["size"]))


async def open_local(settings: LocalSettings) -> ResponseCache:
    return LocalCache(settings.size)


@hookimpl
def inferd_register_caches(registry: CacheRegistry) -> None:
    registry.add(CacheSpec(NAME, {"size": whole_number(1)}, configure, open_local))


class ByteBoundedLRU:
    """A least-recently-used map of str to bytes holding at most ``capacity`` bytes."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("a cache holds at least one byte")
        self.capacity = capacity
        self.used = 0
        self.evictions = 0
        self._entries: OrderedDict[str, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @staticmethod
    def cost(key: str, value: bytes) -> int:
        return len(key.encode()) + len(value)

    def get(self, key: str) -> bytes | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: bytes) -> bool:
        """Insert ``value`` under ``key``, evicting what it needs; False when it is larger
        than the cache or the key is already there."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return False
        cost = self.cost(key, value)
        if cost > self.capacity:
            return False
        while self.used + cost > self.capacity:
            old_key, old_value = self._entries.popitem(last=False)
            self.used -= self.cost(old_key, old_value)
            self.evictions += 1
        self._entries[key] = value
        self.used += cost
        return True

    def keys(self) -> list[str]:
        """Least recently used first."""
        return list(self._entries)


class LocalCache:
    """A ``ResponseCache`` in this process."""

    name = NAME

    def __init__(self, capacity: int) -> None:
        self.entries = ByteBoundedLRU(capacity)
        self.counters = CacheCounters()

    def describe(self) -> str:
        return f"local, {self.entries.capacity} bytes"

    async def lookup(self, key: str) -> bytes | None:
        return self.entries.get(key)

    async def insert(self, key: str, entry: bytes) -> bool:
        return self.entries.put(key, entry)

    def metrics(self) -> list[Sample]:
        lru = self.entries
        return [
            ("nv_cache_num_entries", {}, len(lru)),
            ("nv_cache_util", {}, lru.used / lru.capacity),
            ("nv_cache_num_evictions", {}, lru.evictions),
            *self.counters.samples(),
        ]

    async def close(self) -> None:
        self.entries = ByteBoundedLRU(self.entries.capacity)
