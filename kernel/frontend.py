"""The frontend contract and the registry frontend plugins fill.

A frontend adapts one protocol (KServe HTTP, KServe gRPC, native zmq, ...) to the
protocol-agnostic ``DataPlane``. It runs in the main process's event loop, binds its socket in
``serve`` and reports it with ``task_status.started()``, and stops taking new requests when
``stop_accepting`` is called, letting the ones in flight finish. Owns no protocol itself.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.abc

if TYPE_CHECKING:
    from inferd.kernel.dataplane import DataPlane
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
        module_name, _, class_name = self.entry.partition(":")
        frontend_class = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(frontend_class, type) and issubclass(frontend_class, Frontend)):
            raise TypeError(f"frontend entry {self.entry!r} is not a Frontend subclass")
        return frontend_class


class FrontendRegistry:
    """Filled by ``inferd_register_frontends`` hooks: ``registry.add(FrontendSpec(...))``."""

    def __init__(self) -> None:
        self._specs: dict[str, FrontendSpec] = {}

    def add(self, spec: FrontendSpec) -> None:
        if spec.name in self._specs and self._specs[spec.name] != spec:
            raise ValueError(f"frontend {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._specs.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)
