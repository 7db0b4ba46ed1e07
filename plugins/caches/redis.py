"""The ``redis`` response cache plugin: its ``--cache-config`` settings (those of Triton's
redis cache) and its registration; the client itself is ``inferd.plugins.caches.redis_client``,
imported (with the ``redis`` package) only when the server opens the cache.

``host`` and ``port`` are required; ``user`` and ``password`` default to Triton's
``TRITONCACHE_REDIS_USERNAME`` / ``TRITONCACHE_REDIS_PASSWORD``. Pure: settings in, a
``RedisSettings`` or ``CacheConfigError`` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferd.kernel.sdk import (
    CacheConfigError,
    CacheRegistry,
    CacheSpec,
    CacheUnavailable,
    ResponseCache,
    boolean,
    hookimpl,
    port_number,
    text,
    whole_number,
)

NAME = "redis"
# Triton's redis cache reads its credentials from these when the flags do not give them.
USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"

# setting -> its reader. Durations are milliseconds, 0 meaning no limit (Triton's).
SETTINGS = {
    "host": text, "port": port_number, "user": text, "password": text, "db": whole_number(0),
    "connect_timeout": whole_number(0), "socket_timeout": whole_number(0),
    "pool_size": whole_number(1), "wait_timeout": whole_number(0), "tls_enabled": boolean,
    "cert": text, "key": text, "cacert": text, "cacert_dir": text,
}


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Where the redis cache connects and how long it waits (milliseconds; 0: no limit).
    Triton's defaults wait forever for a connection and an answer; inferd bounds both so
    a Redis that stops answering costs a request at most the timeout, then a miss."""

    host: str
    port: int
    user: str = ""
    password: str = ""
    db: int = 0
    connect_timeout: int = 1000
    socket_timeout: int = 1000
    pool_size: int = 8
    wait_timeout: int = 1000
    tls_enabled: bool = False
    cert: str = ""
    key: str = ""
    cacert: str = ""
    cacert_dir: str = ""

    def described(self) -> str:
        """The settings for a log line, the password left out."""
        tls = ", TLS" if self.tls_enabled else ""
        return f"{self.host}:{self.port} db {self.db}{tls}"


def configure(values: Mapping[str, Any], environ: Mapping[str, str]) -> RedisSettings:
    if "host" not in values or "port" not in values:
        raise CacheConfigError(
            "Failed to initialize RedisCache, didn't specify address. Must at a minimum "
            "specify 'host' and 'port' in the configuration - e.g. inferd serve "
            "--cache-config redis,host=redis --cache-config redis,port=6379")
    credentials = {"user": environ.get(USERNAME_ENV, ""),
                   "password": environ.get(PASSWORD_ENV, "")}
    return RedisSettings(**{**{k: v for k, v in credentials.items() if v}, **values})


async def open_redis(settings: RedisSettings) -> ResponseCache:
    try:
        from inferd.plugins.caches.redis_client import RedisCache  # imports redis
    except ImportError as error:
        raise CacheUnavailable(f"Failed to initialize RedisCache: the redis cache needs the "
                               f"'redis' package (pip install 'inferd[redis]'): {error}"
                               ) from None
    cache: ResponseCache = await RedisCache.connect(settings)
    return cache


@hookimpl
def inferd_register_caches(registry: CacheRegistry) -> None:
    registry.add(CacheSpec(NAME, SETTINGS, configure, open_redis))
