"""Client shared memory, a built-in plugin (entry point ``shared_memory``): the KServe
extension's system (POSIX) and CUDA regions, which Triton's server (not its core) provides.

Declares ``--allow-client-shm`` (tritonserver's flag, off by default since 2.68: clients may
then register and unregister regions; status is always open) and registers the provider the
data plane asks (``inferd.kernel.sdk.shared_memory``): the region registries (``system``,
``cuda``) and the requests that name regions (``provider``). Disabled
(``INFERD_DISABLE_PLUGINS=shared_memory``), the server has no such flag, lists neither
extension, answers the endpoints with Triton's words for client shared memory that is off
and refuses a request naming a region.
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import add_boolean, hookimpl
from inferd.kernel.sdk.shared_memory import (
    SharedMemory,
    SharedMemoryProviders,
    SharedMemorySetup,
    SharedMemorySpec,
)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("client shared memory")
    add_boolean(group, "--allow-client-shm", False,
                "let clients register and unregister system and CUDA shared-memory regions "
                "for their inputs and outputs (tritonserver's flag and default since 2.68)")


def open_shared_memory(setup: SharedMemorySetup) -> SharedMemory:
    """The server's regions, none registered yet (nothing is mapped, no CUDA touched)."""
    from inferd.plugins.shared_memory.provider import opener
    from inferd.plugins.shared_memory.system import SharedMemoryRegistry

    allowed = bool(setup.options.get("allow_client_shm"))
    return opener(SharedMemoryRegistry(), allow_client_shm=allowed)(setup.on_closed)


@hookimpl
def inferd_register_shared_memory(registry: SharedMemoryProviders) -> None:
    registry.add(SharedMemorySpec("shared_memory", open_shared_memory))
