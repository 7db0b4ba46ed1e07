"""``--cache-config`` as tritonserver reads it, checked before the server starts, and the
registry of the caches it can name.

Each flag is ``<cache>,<setting>=<value>`` (one setting per flag, repeatable), the cache being
one a plugin registered (``inferd_register_caches``: the built-in ``local`` and ``redis``, or
a pip-installed one) with the settings it reads. Triton's deprecated
``--response-cache-byte-size N`` is ``local,size=N``. Unlike Triton, which passes unknown
settings to the cache library and ignores what it does not read, an unknown cache, an
unknown setting or a bad value is a start-up error naming the flag. Pure: strings in, a
``CacheConfig`` or ``CacheConfigError`` out;
``inferd.kernel.actors.scheduler.response_cache.open_cache`` opens the cache it describes. Also owns
the contract of a cache plugin (``ResponseCache``, its ``CacheCounters``, ``CacheUnavailable``, the
``CacheSpec`` it registers) and the value readers it builds its settings with;
``inferd.kernel.actors.scheduler.response_cache`` uses a cache.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.kernel.cli.flags import boolean_word, split_setting
from inferd.kernel.runtime.registry import Registry

Sample = tuple[str, dict[str, str], float]
LOCAL = "local"  # what the deprecated --response-cache-byte-size configures
FORMAT = "'<cache name>,<setting>=<value>'"

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
    ``inferd.kernel.actors.scheduler.response_cache.CacheUnavailable``; it may import heavy
    packages.
    """

    name: str
    settings: Mapping[str, Reader]
    configure: Callable[[Mapping[str, Any], Mapping[str, str]], Any]
    open: Callable[[Any], Awaitable[ResponseCache]]


class CacheRegistry(Registry[CacheSpec]):
    """Filled by ``inferd_register_caches`` hooks: ``registry.add(CacheSpec(...))``."""

    kind = "cache"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The one response cache of the server: its name, and the settings its plugin's
    ``configure`` made of the flags."""

    name: str
    settings: Any = None


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


def parse_cache_config(flags: Sequence[str], caches: CacheRegistry,
                       byte_size: int | None = None,
                       environ: Mapping[str, str] | None = None) -> CacheConfig | None:
    """The cache ``--cache-config`` flags (and ``--response-cache-byte-size``) configure, one
    of the server's ``caches``, or None for none."""
    if byte_size is not None and flags:
        raise CacheConfigError("Incompatible flags --response-cache-byte-size and --cache-config "
                               "both provided. Please provide one or the other.")
    if byte_size is not None:
        flags = [f"{LOCAL},size={byte_size}"]
    if not flags:
        return None
    settings: dict[str, dict[str, object]] = {}
    for flag in flags:
        name, setting, value = _split(flag)
        spec = caches.get(name)
        if spec is None:
            raise CacheConfigError(f"--cache-config={flag}: unknown cache '{name}' (inferd has "
                                   f"the caches {', '.join(caches.names()) or 'none'})")
        reader = spec.settings.get(setting)
        if reader is None:
            raise CacheConfigError(f"--cache-config={flag}: the {name} cache has no setting "
                                   f"'{setting}' (its settings: {', '.join(spec.settings)})")
        try:
            settings.setdefault(name, {})[setting] = reader(value)
        except ValueError as error:
            raise CacheConfigError(f"--cache-config={flag}: {error}, got '{value}'") from None
    if len(settings) > 1:
        raise CacheConfigError("found multiple cache configurations, but only a single cache is "
                               f"currently supported (got {', '.join(sorted(settings))})")
    ((name, values),) = settings.items()
    configured = caches.require(name).configure(values, os.environ if environ is None
                                                 else environ)
    return CacheConfig(name, configured)


def _split(flag: str) -> tuple[str, str, str]:
    """``<cache>,<setting>=<value>`` in its three parts, refused as tritonserver refuses."""
    name, setting, value = split_setting(flag)
    if not name:
        raise CacheConfigError(f"No cache specified. --cache-config option format is {FORMAT}. "
                               f"Got {flag}")
    if value is None or not setting or not value:
        raise CacheConfigError(f"--cache-config option format is {FORMAT}. Got {flag}")
    return name.strip(), setting.strip(), value
