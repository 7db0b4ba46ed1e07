"""The testing backend plugin's hook module: registers ``TestingBackend`` as ``inferd_testing``.

It has no platform a real config would name and no default model file, so a model uses it
only by saying ``backend: "inferd_testing"``. Like every hook module it imports no framework.
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

TESTING_BACKEND = BackendSpec(
    name="inferd_testing",
    entry="inferd.plugins.backends.testing.backends:TestingBackend",
    platforms=("inferd_testing",),
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(TESTING_BACKEND)
