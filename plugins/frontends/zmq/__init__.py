"""Hook module of the native ZeroMQ frontend: registers it and imports nothing else.

The frontend class is named by import path so that loading this plugin costs no pyzmq
import; ``inferd.plugins.frontends.zmq.frontend`` holds the protocol itself.
"""

from __future__ import annotations

from inferd.kernel.frontend import FrontendRegistry, FrontendSpec
from inferd.kernel.hookspecs import hookimpl


@hookimpl
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    registry.add(
        FrontendSpec(name="zmq", entry="inferd.plugins.frontends.zmq.frontend:ZmqFrontend")
    )
