"""The response cache's flags, a built-in plugin (entry point ``response_cache``):
tritonserver's ``--cache-config`` (and its older ``--response-cache-byte-size``, and
``--cache-directory``, accepted and not read). The caches themselves, ``local`` (this
process's memory) and ``redis`` (a Redis server), are each a plugin module registered by its
own entry point; the kernel reads these flags' values by their ``dest`` from
``Settings.options`` and configures the cache they name (``inferd.kernel.cli.serve``).
Disabled, the server has none of these flags and no response cache.
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import hookimpl


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    cache = parser.add_argument_group("response cache")
    cache.add_argument("--cache-config", action="append", default=[],
                       metavar="CACHE,SETTING=VALUE",
                       help="the response cache, one setting per flag: local,size=BYTES, "
                            "or redis,host=H and redis,port=P (and redis,user=, password=, "
                            "db=, connect_timeout=, socket_timeout=, pool_size=, "
                            "wait_timeout=, tls_enabled=, cert=, key=, cacert=, cacert_dir=)")
    cache.add_argument("--response-cache-byte-size", type=int, default=None,
                       metavar="BYTES", help="deprecated: --cache-config=local,size=BYTES")
    cache.add_argument("--cache-directory", default="", metavar="PATH",
                       help="tritonserver's folder of cache libraries: inferd's caches are "
                            "plugins, so it is not read")
