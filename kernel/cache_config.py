"""``--cache-config`` as tritonserver reads it, checked before the server starts.

Each flag is ``<cache>,<setting>=<value>`` (one setting per flag, repeatable), the cache
being ``local`` (``size=BYTES``) or ``redis`` (``host`` and ``port`` required, plus the
settings of Triton's redis cache). Triton's deprecated ``--response-cache-byte-size N`` is
``local,size=N``. Unlike Triton, which passes unknown settings to the cache library and
ignores what it does not read, an unknown cache, an unknown setting or a bad value is a
start-up error naming the flag. Pure: strings in, a ``CacheConfig`` or ``CacheConfigError``
out; ``inferd.kernel.response_cache`` opens the cache it describes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from inferd.kernel.options import boolean_word, split_setting

LOCAL = "local"
REDIS = "redis"
# Triton's redis cache reads its credentials from these when the flags do not give them.
USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"
FORMAT = "'<cache name>,<setting>=<value>'"


class CacheConfigError(ValueError):
    """A ``--cache-config`` the server cannot start with; the message says why."""


def _whole(smallest: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or int(text) < smallest:
            raise ValueError(f"expected a whole number of at least {smallest}")
        return int(text)

    return parse


def _port(text: str) -> int:
    value = _whole(1)(text)
    if value > 65535:
        raise ValueError("expected a port from 1 to 65535")
    return value


def _boolean(text: str) -> bool:
    value: bool | None = boolean_word(text)
    if value is None:
        raise ValueError("expected true or false")
    return value


def _text(text: str) -> str:
    return text


# setting -> its reader, per cache. Durations are milliseconds, 0 meaning no limit (Triton's).
_SETTINGS: dict[str, dict[str, Callable[[str], object]]] = {
    LOCAL: {"size": _whole(1)},
    REDIS: {
        "host": _text, "port": _port, "user": _text, "password": _text, "db": _whole(0),
        "connect_timeout": _whole(0), "socket_timeout": _whole(0), "pool_size": _whole(1),
        "wait_timeout": _whole(0), "tls_enabled": _boolean, "cert": _text, "key": _text,
        "cacert": _text, "cacert_dir": _text,
    },
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


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The one response cache of the server: ``local`` with ``size`` bytes, or ``redis``."""

    name: str
    size: int = 0
    redis: RedisSettings | None = None


def parse_cache_config(flags: Sequence[str], byte_size: int | None = None,
                       environ: Mapping[str, str] | None = None) -> CacheConfig | None:
    """The cache ``--cache-config`` flags (and ``--response-cache-byte-size``) configure, or
    None for none."""
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
        readers = _SETTINGS.get(name)
        if readers is None:
            raise CacheConfigError(f"--cache-config={flag}: unknown cache '{name}' (inferd has "
                                   f"the caches {', '.join(sorted(_SETTINGS))})")
        reader = readers.get(setting)
        if reader is None:
            raise CacheConfigError(f"--cache-config={flag}: the {name} cache has no setting "
                                   f"'{setting}' (its settings: {', '.join(readers)})")
        try:
            settings.setdefault(name, {})[setting] = reader(value)
        except ValueError as error:
            raise CacheConfigError(f"--cache-config={flag}: {error}, got '{value}'") from None
    if len(settings) > 1:
        raise CacheConfigError("found multiple cache configurations, but only a single cache is "
                               f"currently supported (got {', '.join(sorted(settings))})")
    ((name, values),) = settings.items()
    if name == LOCAL:
        if "size" not in values:
            raise CacheConfigError("Failed to initialize LocalCache: config didn't contain a "
                                   "valid 'size' field (--cache-config=local,size=BYTES)")
        return CacheConfig(LOCAL, size=int(str(values["size"])))
    return CacheConfig(REDIS, redis=_redis(values, os.environ if environ is None else environ))


def _redis(values: dict[str, object], environ: Mapping[str, str]) -> RedisSettings:
    if "host" not in values or "port" not in values:
        raise CacheConfigError(
            "Failed to initialize RedisCache, didn't specify address. Must at a minimum "
            "specify 'host' and 'port' in the configuration - e.g. inferd serve "
            "--cache-config redis,host=redis --cache-config redis,port=6379")
    credentials = {"user": environ.get(USERNAME_ENV, ""),
                   "password": environ.get(PASSWORD_ENV, "")}
    return RedisSettings(**{**{k: v for k, v in credentials.items() if v}, **values})  # type: ignore[arg-type]


def _split(flag: str) -> tuple[str, str, str]:
    """``<cache>,<setting>=<value>`` in its three parts, refused as tritonserver refuses."""
    name, setting, value = split_setting(flag)
    if not name:
        raise CacheConfigError(f"No cache specified. --cache-config option format is {FORMAT}. "
                               f"Got {flag}")
    if value is None or not setting or not value:
        raise CacheConfigError(f"--cache-config option format is {FORMAT}. Got {flag}")
    return name.strip(), setting.strip(), value
