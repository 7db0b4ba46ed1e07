"""The typed facade over pluggy: the only module that touches the PluginManager.

Plugins come from the ``inferd`` entry-point group (built-ins included). Two environment
variables filter them by entry-point name: ``INFERD_PLUGINS`` (comma-separated allow-list;
unset means all) and ``INFERD_DISABLE_PLUGINS`` (deny-list, applied after). ``check_pending``
runs at load so a misspelled hook fails loudly instead of silently never being called. Each
registry is filled once per ``Plugins``. ``installed()`` is this process's plugins, loaded on
first use: the entry points (``inferd serve``, ``inferd check``, the client commands) take it
and hand it, or the registry needed, to everything that looks a plugin up.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import logging
import os
from typing import Any

import pluggy

from inferd.kernel.sdk import hooks as hookspecs
from inferd.kernel.sdk.agents import AgentRegistry
from inferd.kernel.sdk.backends import BackendRegistry
from inferd.kernel.sdk.caches import CacheRegistry
from inferd.kernel.sdk.commands import CommandRegistry
from inferd.kernel.sdk.control import ControlPolicyRegistry
from inferd.kernel.sdk.control_state import ControlStateStoreRegistry
from inferd.kernel.sdk.frontends import FrontendRegistry
from inferd.kernel.sdk.registry import Registry
from inferd.kernel.sdk.shared_memory import SharedMemoryProviders
from inferd.kernel.sdk.storage import StorageRegistry
from inferd.kernel.sdk.tracing import TraceSinkRegistry

log = logging.getLogger(__name__)

ALLOW_ENV = "INFERD_PLUGINS"
DENY_ENV = "INFERD_DISABLE_PLUGINS"


def _names_from_env(variable: str) -> set[str] | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def _warn_hookless(entry_point: importlib.metadata.EntryPoint, plugin: object) -> None:
    """A plugin that implements no hook is almost always the wrong module: most often a
    folder of the same name on ``sys.path`` (a project folder in the working directory)
    imported as an empty namespace package instead of the installed package."""
    where = getattr(plugin, "__file__", None)
    if where is None:
        paths = list(getattr(plugin, "__path__", []))
        where = f"a namespace package at {paths}: a folder named like the package shadows it"
    log.warning("plugin %s (%s, from %s) implements no %s hook; it does nothing",
                entry_point.name, entry_point.value, where, hookspecs.PROJECT)


class Plugins:
    """The loaded plugins, and typed calls of their hooks."""

    def __init__(self, manager: pluggy.PluginManager, loaded: list[str]) -> None:
        self._manager = manager
        self.loaded = loaded
        self._registries: dict[str, Registry[Any]] = {}

    @classmethod
    def load(cls) -> Plugins:
        manager = pluggy.PluginManager(hookspecs.PROJECT)
        manager.add_hookspecs(hookspecs)
        allow, deny = _names_from_env(ALLOW_ENV), _names_from_env(DENY_ENV) or set()
        loaded = []
        entry_points = importlib.metadata.entry_points(group=hookspecs.PROJECT)
        for entry_point in sorted(entry_points, key=lambda ep: ep.name):
            if (allow is not None and entry_point.name not in allow) or entry_point.name in deny:
                log.debug("plugin %s skipped by %s/%s", entry_point.name, ALLOW_ENV, DENY_ENV)
                continue
            if manager.get_plugin(entry_point.name) is not None:
                continue
            plugin = entry_point.load()
            manager.register(plugin, name=entry_point.name)
            if not manager.get_hookcallers(plugin):
                _warn_hookless(entry_point, plugin)
            loaded.append(entry_point.name)
        manager.check_pending()
        return cls(manager, loaded)

    def _filled(self, hook: str, registry: Registry[Any]) -> Any:
        """``registry`` filled by every implementation of ``hook``, once per instance."""
        if hook not in self._registries:
            getattr(self._manager.hook, hook)(registry=registry)
            self._registries[hook] = registry
        return self._registries[hook]

    def backends(self) -> BackendRegistry:
        registry: BackendRegistry = self._filled("inferd_register_backends", BackendRegistry())
        return registry

    def frontends(self) -> FrontendRegistry:
        registry: FrontendRegistry = self._filled("inferd_register_frontends",
                                                  FrontendRegistry())
        return registry

    def caches(self) -> CacheRegistry:
        registry: CacheRegistry = self._filled("inferd_register_caches", CacheRegistry())
        return registry

    def trace_sinks(self) -> TraceSinkRegistry:
        registry: TraceSinkRegistry = self._filled("inferd_register_trace_sinks",
                                                   TraceSinkRegistry())
        return registry

    def storages(self) -> StorageRegistry:
        registry: StorageRegistry = self._filled("inferd_register_repository_storage",
                                                 StorageRegistry())
        return registry

    def control_state_stores(self) -> ControlStateStoreRegistry:
        registry: ControlStateStoreRegistry = self._filled(
            "inferd_register_control_state_stores", ControlStateStoreRegistry())
        return registry

    def commands(self) -> CommandRegistry:
        registry: CommandRegistry = self._filled("inferd_register_commands", CommandRegistry())
        return registry

    def agents(self) -> AgentRegistry:
        registry: AgentRegistry = self._filled("inferd_register_repository_agents",
                                               AgentRegistry())
        return registry

    def control_policies(self) -> ControlPolicyRegistry:
        registry: ControlPolicyRegistry = self._filled("inferd_register_control_policies",
                                                       ControlPolicyRegistry())
        return registry

    def shared_memory_providers(self) -> SharedMemoryProviders:
        registry: SharedMemoryProviders = self._filled("inferd_register_shared_memory",
                                                       SharedMemoryProviders())
        return registry

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        self._manager.hook.inferd_add_options(parser=parser)


@functools.cache
def installed() -> Plugins:
    """This process's plugins, loaded once (``inferd serve`` loads its own and uses these)."""
    return Plugins.load()
