"""The entry point of an executor process: ``python -m inferd.kernel.actors.executor.main``.

It builds the process's router, connects the uplink to the main process's hub, runs one
``ExecutorActor`` and says hello to the executor pool. It exits when the pool tells it to
(``Shutdown``, after unloading its models) or when the main process disappears, so no executor
outlives its server. The pool starts it in a session of its own, so a Ctrl-C in a terminal (or
``timeout`` signalling a process group) reaches only the main process, which shuts down in
order. When the main process has died, it unlinks the server's shared memory segments on its
way out.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os

import anyio
import zmq

from inferd.kernel.actors.executor.actor import ExecutorActor
from inferd.kernel.observability.logs import LogSettings, configure_logging
from inferd.kernel.runtime import link_memory
from inferd.kernel.runtime.addresses import EXECUTORS
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.runtime.process_link import LinkMemory, ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols.messages import ExecutorHello

PARENT_CHECK_SECS = 1.0


async def _watch_parent(parent_pid: int, scope: anyio.CancelScope) -> None:
    while os.getppid() == parent_pid:
        await anyio.sleep(PARENT_CHECK_SECS)
    logging.getLogger(__name__).warning("main process is gone; executor exiting")
    scope.cancel()


async def serve(name: str, hub: str, options: dict[str, object], parent_pid: int) -> None:
    backends = Plugins.load().backends()
    context = zmq.Context()
    router = Router(name)
    threshold = options.get("link_shm_threshold", link_memory.DEFAULT_THRESHOLD)
    capacity = options.get("link_shm_capacity", link_memory.DEFAULT_CAPACITY)
    assert isinstance(threshold, int) and isinstance(capacity, int)  # the pool's JSON options
    memory = LinkMemory(parent_pid, threshold=threshold, capacity=capacity)
    link = ProcessLink.uplink(router, context, hub, name, memory)
    actor = ExecutorActor(router, name, backends, options)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(link.run)
            await tasks.start(actor.run)
            tasks.start_soon(_watch_parent, parent_pid, tasks.cancel_scope)
            router.tell(EXECUTORS, ExecutorHello(name, os.getpid(), backends.names()))
            await actor.stopped.wait()
            await anyio.sleep(0.05)  # let the Shutdown reply leave the socket
            tasks.cancel_scope.cancel()
    finally:
        link.close()
        context.term()
        if os.getppid() != parent_pid:  # the server died: nobody else will unlink its segments
            link_memory.remove_server_segments(parent_pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="inferd-executor")
    parser.add_argument("--name", required=True)
    parser.add_argument("--hub", required=True)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--parent-pid", type=int, default=os.getppid())
    LogSettings.add_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging(LogSettings.from_arguments(args), process=args.name)
    faulthandler.enable()  # a fatal signal's traceback names the model (instance_slot)
    anyio.run(
        serve, args.name, args.hub, json.loads(args.options), args.parent_pid,
        backend="asyncio", backend_options={"use_uvloop": False},
    )


if __name__ == "__main__":
    main()
