"""The one registry type plugins fill, and how a spec's entry becomes code.

Every kind of plugin has a registry of this type (backends, frontends, caches, trace sinks,
storage, control-state stores, commands, repository agents, control policies).

A plugin registers a frozen spec naming its implementation by import path
(``"package.module:Name"``) so that registering imports nothing heavy; ``import_entry`` imports
it only when the kernel needs it. ``Registry`` keeps specs by name and refuses two different
specs under one name, and ``require`` says what is available when a name is unknown; each
feature's module subclasses it for its spec type. Owns no I/O beyond those lazy imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, ClassVar, Generic, Protocol, TypeVar

__all__ = ["Registry", "Spec", "available", "import_entry", "load_entry"]


class Spec(Protocol):
    """What the registry needs of a spec: its name (specs are frozen dataclasses)."""

    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Spec)


def import_entry(entry: str) -> Any:
    """The object ``entry`` (``"package.module:attribute"``) names, its module imported now."""
    module_name, _, attribute = entry.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def load_entry(entry: str, base: type[object], kind: str) -> type[Any]:
    """The class ``entry`` names, checked to be a subclass of ``base`` (``kind`` names what
    it is in the error: ``"backend"``, ``"frontend"``). ``base`` is typed ``type[object]``
    because it is abstract; the caller names the class it gets."""
    loaded = import_entry(entry)
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise TypeError(f"{kind} entry {entry!r} is not a {base.__name__} subclass")
    return loaded


def available(registry: Registry[Any]) -> str:
    """``"available: a, b"`` (or ``"none is installed"``) for an error message."""
    names = registry.names()
    return f"available: {', '.join(names)}" if names else f"no {registry.kind} is installed"


class Registry(Generic[S]):
    """Specs by name, in registration order. Registering the same spec twice is harmless (a
    plugin module reached twice); a different spec under a taken name is an error."""

    kind: ClassVar[str] = "plugin"

    def __init__(self) -> None:
        self._specs: dict[str, S] = {}

    def add(self, spec: S) -> None:
        if spec.name in self._specs and self._specs[spec.name] != spec:
            raise ValueError(f"{self.kind} {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def get(self, name: str) -> S | None:
        return self._specs.get(name)

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted (for messages that list them)."""
        return tuple(sorted(self._specs))

    def require(self, name: str, what: str = "") -> S:
        """The spec registered as ``name``; ``LookupError`` naming ``what`` (the kind by
        default) and every name there is otherwise."""
        spec = self._specs.get(name)
        if spec is None:
            raise LookupError(f"unknown {what or self.kind} '{name}' ({available(self)})")
        return spec

    def __iter__(self) -> Iterator[S]:
        return iter(self._specs.values())
