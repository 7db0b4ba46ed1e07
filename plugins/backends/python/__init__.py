"""The python backend plugin's hook module: registers the backend that runs Triton python-backend
``model.py`` files.

It registers the backend by import path only and imports nothing heavy: the backend, and the
``triton_python_backend_utils`` module it gives user code, are imported inside the executor
when a python model is loaded.
"""

from __future__ import annotations

from inferd.kernel.sdk import BackendRegistry, BackendSpec, hookimpl

PYTHON_BACKEND = BackendSpec(
    name="python",
    entry="inferd.plugins.backends.python.backend:PythonBackend",
    default_filename="model.py",
    # As Triton's stubs: each instance in a process of its own, so instances of pure-Python
    # code run at once instead of taking turns on one interpreter lock.
    process_per_instance=True,
    completion="inferd.plugins.backends.python.offline:complete_offline",
    auto_completes=True,
    completion_runs_model_code=True,
)


@hookimpl
def inferd_register_backends(registry: BackendRegistry) -> None:
    registry.add(PYTHON_BACKEND)
