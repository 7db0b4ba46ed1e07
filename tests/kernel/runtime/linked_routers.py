"""Two routers joined by the real process link, for the unit tests of what crosses it (asks,
replies, ``Cancel``) without starting a process."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio
import zmq

from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.process_link import LinkMemory, ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols.messages import HealthRequest

ActorT = TypeVar("ActorT", bound=Actor)


@asynccontextmanager
async def linked_routers(
    folder: Path, actor: Callable[[Router, str], ActorT]
) -> AsyncIterator[tuple[Router, Router, ProcessLink, ActorT]]:
    """A hub router (``main``) and an uplink router (``peer/one``) joined by real ZeroMQ
    sockets (ipc, in ``folder``), as the main process and an executor are: ``actor(router,
    address)`` runs at the hub's ``hello-sink`` and at the uplink's own address. Yields the
    two routers, the hub's link and the uplink's actor, once the hub knows the peer."""
    context = zmq.Context()
    endpoint = f"ipc://{folder}/hub"
    hub, peer = Router("main"), Router("peer/one")
    hub_link = ProcessLink.hub(hub, context, endpoint)
    peer_link = ProcessLink.uplink(peer, context, endpoint, "peer/one", LinkMemory(os.getpid()))
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hub_link.run)
            tasks.start_soon(peer_link.run)
            await tasks.start(actor(hub, "hello-sink").run)
            peer_actor = actor(peer, "peer/one")
            await tasks.start(peer_actor.run)
            peer.tell("hello-sink", HealthRequest("live"))  # makes the peer known to the hub
            with anyio.fail_after(5):
                while "peer/one" not in hub_link.peers:
                    await anyio.sleep(0.01)
            yield hub, peer, hub_link, peer_actor
            tasks.cancel_scope.cancel()
    finally:
        hub_link.close()
        peer_link.close()
        context.term()
