"""The ``redis`` response cache's client: entries in a Redis server, shared by every server
using it (``inferd.plugins.caches.redis`` registers it and reads its settings).

Built on ``redis.asyncio`` in the main event loop, with a bounded pool of ``pool_size``
connections (a request waits at most ``wait_timeout`` for one), ``connect_timeout`` and
``socket_timeout`` on every connection and no retries, so a Redis that stops answering costs
a request at most those bounds, then the scope serves it as a miss. ``connect`` pings the
server first, as Triton's redis cache does: a Redis that does not answer at start-up fails
the start ("Failed to initialize RedisCache: ..."). Entries are plain string values (``SET``
with ``NX``: the first answer stored stays), without expiry, as Triton's are; keys carry
the kernel's cache-key format prefix. The Redis server is the user's: nothing here
flushes or configures it.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from inferd.kernel.sdk import CacheCounters, CacheUnavailable, Sample
from inferd.plugins.caches.redis import RedisSettings

PING_MESSAGE = "inferd response cache client connected"


def _seconds(milliseconds: int) -> float | None:
    return milliseconds / 1000 if milliseconds else None  # 0: no limit, as in Triton


class RedisCache:
    """A ``ResponseCache`` in a Redis server."""

    name = "redis"

    def __init__(self, settings: RedisSettings, client: Any) -> None:
        self.settings = settings
        self.counters = CacheCounters()
        self._client = client

    @classmethod
    async def connect(cls, settings: RedisSettings) -> RedisCache:
        """A cache over a Redis that answered a ping; ``CacheUnavailable`` otherwise."""
        options: dict[str, Any] = {
            "host": settings.host, "port": settings.port, "db": settings.db,
            "username": settings.user or None, "password": settings.password or None,
            "socket_connect_timeout": _seconds(settings.connect_timeout),
            "socket_timeout": _seconds(settings.socket_timeout),
            "retry": Retry(NoBackoff(), 0),
        }
        if settings.tls_enabled:
            options.update(connection_class=redis.SSLConnection,
                           ssl_certfile=settings.cert or None, ssl_keyfile=settings.key or None,
                           ssl_ca_certs=settings.cacert or None,
                           ssl_ca_path=settings.cacert_dir or None)
        pool = redis.BlockingConnectionPool(max_connections=settings.pool_size,
                                            timeout=_seconds(settings.wait_timeout), **options)
        client = redis.Redis(connection_pool=pool)
        try:
            answer = await client.ping()
        except (RedisError, OSError) as error:
            await client.aclose()
            await pool.aclose()
            raise CacheUnavailable(f"Failed to initialize RedisCache: cannot reach Redis at "
                                   f"{settings.described()}: {error}") from None
        if answer is not True:
            await client.aclose()
            await pool.aclose()
            raise CacheUnavailable(f"Failed to initialize RedisCache: Redis at "
                                   f"{settings.described()} answered a ping with {answer!r}")
        return cls(settings, client)

    def describe(self) -> str:
        return f"redis at {self.settings.described()}"

    async def lookup(self, key: str) -> bytes | None:
        try:
            value = await self._client.get(key)
        except (RedisError, OSError) as error:
            raise CacheUnavailable(f"Failed to retrieve key: {key}. {error}") from None
        return None if value is None else bytes(value)

    async def insert(self, key: str, entry: bytes) -> bool:
        try:
            return bool(await self._client.set(key, entry, nx=True))
        except (RedisError, OSError) as error:
            raise CacheUnavailable(f"Failed to insert key: {key}. {error}") from None

    def metrics(self) -> list[Sample]:
        samples: list[Sample] = self.counters.samples()
        return samples

    async def close(self) -> None:
        await self._client.aclose()
        await self._client.connection_pool.aclose()
