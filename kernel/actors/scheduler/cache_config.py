"""``--cache-config`` as tritonserver reads it, checked before the server starts, and the
registry of the caches it can name.

Each flag is ``<cache>,<setting>=<value>`` (one setting per flag, repeatable), the cache being
one a plugin registered (``inferd_register_caches``: the built-in ``local`` and ``redis``, or
a pip-installed one) with the settings it reads. Triton's deprecated
``--response-cache-byte-size N`` is ``local,size=N``. Unlike Triton, which passes unknown
settings to the cache library and ignores what it does not read, an unknown cache, an
unknown setting or a bad value is a start-up error naming the flag. Pure: strings in, a
``CacheConfig`` or ``CacheConfigError`` out;
``inferd.kernel.actors.scheduler.response_cache.open_cache`` opens the cache it describes.
The contract of a cache plugin (``ResponseCache``, the ``CacheSpec`` it registers, the value
readers) is the SDK's, ``inferd.kernel.sdk.caches``; ``inferd.kernel.actors.scheduler.
response_cache`` uses a cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.kernel.sdk.caches import CacheConfigError, CacheRegistry
from inferd.kernel.sdk.flags import split_setting

LOCAL = "local"  # what the deprecated --response-cache-byte-size configures
FORMAT = "'<cache name>,<setting>=<value>'"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The one response cache of the server: its name, and the settings its plugin's
    ``configure`` made of the flags."""

    name: str
    settings: Any = None


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
