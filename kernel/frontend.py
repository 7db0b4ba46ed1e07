"""The frontend contract and the registry frontend plugins fill.

A frontend adapts one protocol (KServe HTTP, KServe gRPC, native zmq, ...) to the
protocol-agnostic ``DataPlane``. It runs in the main process's event loop, binds its socket in
``serve`` and reports it with ``task_status.started()``, and stops taking new requests when
``stop_accepting`` is called, letting the ones in flight finish. Owns the contract and the
frontend registry (an ``inferd.kernel.runtime.registry.Registry``), no protocol itself.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.abc

from inferd.kernel.runtime.registry import Registry, load_entry

if TYPE_CHECKING:
    from inferd.kernel.dataplane.data_plane import DataPlane
    from inferd.kernel.settings import Settings


class Frontend(abc.ABC):
    name: str = ""

    def __init__(self, dataplane: DataPlane, settings: Settings) -> None:
        self.dataplane = dataplane
        self.settings = settings

    @abc.abstractmethod
    async def serve(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        """Bind, call ``task_status.started(address)`` once accepting, then serve until
        cancelled. A bind failure raises, which stops the server's start-up."""

    async def stop_accepting(self) -> None:
        """Refuse or stop reading new requests; requests already taken keep going."""


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """``entry`` is ``"package.module:FrontendClass"``, imported when the server starts.
    ``enabled_option`` names a boolean ``Settings.options`` key that can turn it off."""

    name: str
    entry: str
    enabled_option: str = ""

    def load_class(self) -> type[Frontend]:
        frontend_class: type[Frontend] = load_entry(self.entry, Frontend, "frontend")
        return frontend_class


class FrontendRegistry(Registry[FrontendSpec]):
    """Filled by ``inferd_register_frontends`` hooks: ``registry.add(FrontendSpec(...))``.
    The server starts frontends in registration order."""

    kind = "frontend"
