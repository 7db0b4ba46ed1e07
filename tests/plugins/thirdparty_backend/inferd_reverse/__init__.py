"""A third-party inferd plugin: the ``reverse`` backend, whose models return each input
reversed along its last axis. Installed by the tests as its own distribution to prove that
a pip-installed package adds a backend through the ``inferd`` entry-point group."""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(BackendSpec(name="reverse", entry="inferd_reverse.backend:ReverseBackend"))
