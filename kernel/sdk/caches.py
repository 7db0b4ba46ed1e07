"""The contract of a response cache plugin, and the readers of its settings.

A cache plugin (``inferd_register_caches``; the built-in ``local`` and ``redis``) gives the
``ResponseCache`` it opens, the ``CacheCounters`` of Triton's cache metrics,
``CacheUnavailable`` (a cache that failed or did not answer: the request is served uncached),
``CacheConfigError`` (a ``--cache-config`` the server cannot start with), the ``CacheSpec`` it
registers by the name ``--cache-config`` gives, and the readers it builds its settings with.
The flag's parsing is the kernel's (``inferd.kernel.actors.scheduler.cache_config``), and so is
the use of a cache (``inferd.kernel.actors.scheduler.response_cache``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.kernel.sdk.flags import boolean_word
from inferd.kernel.sdk.registry import Registry

__all__ = [
    "CacheConfigError", "CacheCounters", "CacheRegistry", "CacheSpec", "CacheUnavailable",
    "Reader", "ResponseCache", "Sample", "boolean", "port_number", "text", "whole_number",
]

Sample = tuple[str, dict[str, str], float]

Reader = Callable[[str], Any]
"""A setting's reader: its value from the flag's text, ``ValueError`` saying what it expects."""


class CacheConfigError(ValueError):
    """A ``--cache-config`` the server cannot start with; the message says why."""


class CacheUnavailable(Exception):
    """The cache could not be reached or did not answer in time."""


@dataclass(slots=True)
class CacheCounters:
    """The server-level counts of Triton's local cache metrics."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    lookup_ns: int = 0
    insertion_ns: int = 0

    def samples(self) -> list[Sample]:
        return [
            ("nv_cache_num_lookups", {}, self.lookups),
            ("nv_cache_num_hits", {}, self.hits),
            ("nv_cache_num_misses", {}, self.misses),
            ("nv_cache_lookup_duration", {}, self.lookup_ns // 1000),
            ("nv_cache_insertion_duration", {}, self.insertion_ns // 1000),
        ]


class ResponseCache(Protocol):
    """A cache of response entries by key. ``lookup`` and ``insert`` raise
    ``CacheUnavailable`` when the cache cannot answer."""

    name: str
    counters: CacheCounters  # counted by the scopes using it

    def describe(self) -> str:
        """What the cache is, for the start-up log."""
        ...

    async def lookup(self, key: str) -> bytes | None:
        """The entry under ``key``, or None."""
        ...

    async def insert(self, key: str, entry: bytes) -> bool:
        """Store ``entry`` under ``key``; False when the cache declined it."""
        ...

    def metrics(self) -> list[Sample]:
        """Server-level samples (no labels)."""
        ...

    async def close(self) -> None:
        """Release connections; the cache is not used afterwards."""
        ...


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """What a plugin tells the kernel about one response cache.

    ``name`` is what ``--cache-config`` names (Triton's cache name). ``settings`` reads each
    setting the cache takes (``whole_number``, ``port_number``, ``boolean``, ``text`` or the
    plugin's own). ``configure(values, environ)`` turns the flags' read values into the
    cache's settings object (raising ``CacheConfigError`` for a missing one); it must stay
    pure. ``open(settings)`` makes the cache, ready to use, or raises
    ``CacheUnavailable``; it may import heavy
    packages.
    """

    name: str
    settings: Mapping[str, Reader]
    configure: Callable[[Mapping[str, Any], Mapping[str, str]], Any]
    open: Callable[[Any], Awaitable[ResponseCache]]


class CacheRegistry(Registry[CacheSpec]):
    """Filled by ``inferd_register_caches`` hooks: ``registry.add(CacheSpec(...))``."""

    kind = "cache"


def whole_number(smallest: int) -> Reader:
    """A reader of a whole number of at least ``smallest``."""

    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or int(text) < smallest:
            raise ValueError(f"expected a whole number of at least {smallest}")
        return int(text)

    return parse


def port_number(text: str) -> int:
    value: int = whole_number(1)(text)
    if value > 65535:
        raise ValueError("expected a port from 1 to 65535")
    return value


def boolean(text: str) -> bool:
    value: bool | None = boolean_word(text)
    if value is None:
        raise ValueError("expected true or false")
    return value


def text(value: str) -> str:
    return value
