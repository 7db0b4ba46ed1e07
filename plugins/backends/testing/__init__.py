"""The testing backend plugin's hook module: registers ``TestingBackend`` as ``inferd_testing``
and, declared native (``runs_in_server``), as ``inferd_testing_native``.

Neither has a platform a real config would name nor a default model file, so a model uses
one only by saying ``backend: "inferd_testing"`` (its CPU instances in executor processes, as
other non-native backends') or ``backend: "inferd_testing_native"`` (where onnxruntime's run:
the server's own process by default, the CPU executor processes under ``--cpu-executor
process``; so a test can crash the server's own process). Like every hook module it imports
no framework.
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

TESTING_BACKEND = BackendSpec(
    name="inferd_testing",
    entry="inferd.plugins.backends.testing.backends:TestingBackend",
    platforms=("inferd_testing",),
)
TESTING_NATIVE_BACKEND = BackendSpec(
    name="inferd_testing_native",
    entry="inferd.plugins.backends.testing.backends:TestingBackend",
    platforms=("inferd_testing_native",),
    runs_in_server=True,
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(TESTING_BACKEND)
    registry.add(TESTING_NATIVE_BACKEND)
