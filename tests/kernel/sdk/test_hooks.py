"""Every hook is documented, and the built-in plugins are found through the entry points."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import subprocess
import sys

import pluggy
import pytest

from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk import hooks as hookspecs

HOOKS = [
    value for name, value in vars(hookspecs).items()
    if name.startswith("inferd_") and callable(value)
]


def test_every_hook_has_a_docstring_and_typed_parameters() -> None:
    assert {hook.__name__ for hook in HOOKS} == {
        "inferd_register_backends", "inferd_register_frontends", "inferd_add_options",
        "inferd_register_caches", "inferd_register_trace_sinks",
        "inferd_register_repository_storage", "inferd_register_control_state_stores",
        "inferd_register_commands", "inferd_register_repository_agents",
        "inferd_register_control_policies", "inferd_register_shared_memory"}
    for hook in HOOKS:
        assert hook.__doc__ and len(hook.__doc__.strip()) > 40, hook.__name__
        parameters = inspect.signature(hook).parameters.values()
        assert all(p.annotation is not inspect.Parameter.empty for p in parameters), hook.__name__


def test_built_ins_are_plugins_like_any_other() -> None:
    plugins = Plugins.load()
    assert {"onnxruntime", "testing", "zmq", "kserve_http", "kserve_grpc"} <= set(plugins.loaded)
    assert {"onnxruntime", "inferd_testing"} <= set(plugins.backends().names())
    assert {"zmq", "kserve_http", "kserve_grpc"} <= set(plugins.frontends().names())


def test_a_misspelled_hook_fails_loudly(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class Misspelled:
        @hookspecs.hookimpl
        def inferd_register_backend(self, registry: object) -> None:  # no trailing "s"
            pass

    class FakeEntryPoint:
        name = "misspelled"

        def load(self) -> Misspelled:
            return Misspelled()

    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [FakeEntryPoint()] if group == "inferd" else [])
    with pytest.raises(pluggy.PluginValidationError, match="inferd_register_backend"):
        Plugins.load()


def test_the_allow_and_deny_lists_filter_by_entry_point_name(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INFERD_PLUGINS", "onnxruntime,zmq,testing")
    monkeypatch.setenv("INFERD_DISABLE_PLUGINS", "testing")
    assert sorted(Plugins.load().loaded) == ["onnxruntime", "zmq"]


def test_the_testing_backend_is_registered_only_where_the_tests_run() -> None:
    """Installed inferd lists no test backend; tests/conftest.py registers it for the tests."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run(
        [sys.executable, "-P", "-c", "from inferd.kernel.runtime.plugin_manager import Plugins;"
         " print(sorted(Plugins.load().backends().names()))"],
        env=environment, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "'onnxruntime'" in listed and "inferd_testing" not in listed
    assert "inferd_testing" in Plugins.load().backends().names()
