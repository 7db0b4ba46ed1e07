"""Every hook an inferd plugin can implement: this module is the plugin author's manual.

A plugin is a module named by an entry point in the ``inferd`` group::

    [project.entry-points.inferd]
    mybackend = "mypackage.inferd_plugin"

whose functions are decorated with ``inferd.kernel.hookspecs.hookimpl``. Hooks are for
discovery and configuration at start-up only; nothing here runs per request. A hook module
must import no framework (onnxruntime, torch, ...): name classes by import path instead.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from inferd.kernel.backend import BackendRegistry
    from inferd.kernel.frontend import FrontendRegistry

PROJECT = "inferd"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def inferd_register_backends(registry: BackendRegistry) -> None:
    """Register backends with ``registry.add(BackendSpec(...))``.

    Called in the main process (to map configs to backends and default file names) and in
    every executor process (to find the class to import when a model needs it).
    """


@hookspec
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    """Register frontends with ``registry.add(FrontendSpec(...))``.

    Called once in the main process. Every registered frontend is started, in registration
    order, once the models of the start-up set have been handled.
    """


@hookspec
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    """Add the command-line options a plugin reads to ``inferd serve``: a frontend declares
    its port and address here (``inferd.kernel.options.ListenFlags``), and its limits.

    Parsed values reach the plugin through ``Settings.options`` keyed by the option's
    ``dest``; the kernel's own flags are ``Settings`` fields. Choose names that cannot clash
    with other plugins (prefix them with the plugin's name).
    """
