"""The typed facade over pluggy: the only module that touches the PluginManager.

Plugins come from the ``inferd`` entry-point group (built-ins included). Two environment
variables filter them by entry-point name: ``INFERD_PLUGINS`` (comma-separated allow-list;
unset means all) and ``INFERD_DISABLE_PLUGINS`` (deny-list, applied after). ``check_pending``
runs at load so a misspelled hook fails loudly instead of silently never being called.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os

import pluggy

from inferd.kernel import hookspecs
from inferd.kernel.backend import BackendRegistry
from inferd.kernel.frontend import FrontendRegistry

log = logging.getLogger(__name__)

ALLOW_ENV = "INFERD_PLUGINS"
DENY_ENV = "INFERD_DISABLE_PLUGINS"


def _names_from_env(variable: str) -> set[str] | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


class Plugins:
    """The loaded plugins, and typed calls of their hooks."""

    def __init__(self, manager: pluggy.PluginManager, loaded: list[str]) -> None:
        self._manager = manager
        self.loaded = loaded

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
            manager.register(entry_point.load(), name=entry_point.name)
            loaded.append(entry_point.name)
        manager.check_pending()
        return cls(manager, loaded)

    def backends(self) -> BackendRegistry:
        registry = BackendRegistry()
        self._manager.hook.inferd_register_backends(registry=registry)
        return registry

    def frontends(self) -> FrontendRegistry:
        registry = FrontendRegistry()
        self._manager.hook.inferd_register_frontends(registry=registry)
        return registry

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        self._manager.hook.inferd_add_options(parser=parser)
