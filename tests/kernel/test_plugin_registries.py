"""The features that are plugins: each built-in is found through its entry point like a
third-party one, a lookup by name finds it, and an unknown name is an error listing the names
there are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inferd.kernel.actors.repository.remote_storage import is_remote_url, parse_url
from inferd.kernel.actors.scheduler.cache_config import parse_cache_config
from inferd.kernel.observability.trace_config import parse_trace_config
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.caches import CacheConfigError
from inferd.kernel.sdk.control_state import RecordError
from inferd.kernel.sdk.registry import Registry
from inferd.plugins.control_state.opening import open_store
from inferd.protocols.errors import InvalidArgument


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    return Plugins.load()


def test_every_built_in_feature_is_a_plugin(plugins: Plugins) -> None:
    assert {"local_cache", "redis_cache", "triton_trace", "opentelemetry_trace",
            "fsspec_storage", "control_state", "path_control_state", "s3_control_state",
            "client_commands", "checksum_agent", "on_demand"} <= set(plugins.loaded)
    assert plugins.caches().names() == ("local", "redis")
    assert plugins.trace_sinks().names() == ("opentelemetry", "triton")
    assert plugins.storages().schemes() == ("s3", "gs", "as", "az")
    assert sorted(spec.scheme for spec in plugins.control_state_stores()) == ["", "s3"]
    assert plugins.commands().names() == ("catalog", "infer", "label", "load", "models",
                                          "stats", "unload")
    assert plugins.agents().names() == ("checksum",)
    assert plugins.control_policies().names() == ("control_state", "on_demand")


def test_an_unknown_name_lists_the_names_there_are(plugins: Plugins) -> None:
    with pytest.raises(LookupError, match=r"unknown cache 'memcached' \(available: local, "
                                          r"redis\)"):
        plugins.caches().require("memcached")
    with pytest.raises(CacheConfigError, match="unknown cache 'disk' .inferd has the caches "
                                               "local, redis"):
        parse_cache_config(["disk,size=1"], plugins.caches())
    with pytest.raises(ValueError, match='invalid value for trace mode option: zipkin. '
                                         'Available options are "opentelemetry" and "triton"'):
        parse_trace_config(["mode=zipkin"], plugins.trace_sinks(), environ={})
    with pytest.raises(InvalidArgument, match=r"not a remote repository URL \(s3://, gs://, "
                                              r"as://, az://\)"):
        parse_url("hdfs://cluster/models", storages=plugins.storages())
    with pytest.raises(RecordError, match="takes a local path or an s3:// URL"):
        open_store("gs://bucket/state.json", plugins.control_state_stores())


def test_without_its_plugin_a_feature_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERD_DISABLE_PLUGINS", "redis_cache,fsspec_storage,s3_control_state")
    plugins = Plugins.load()
    assert plugins.caches().names() == ("local",)
    assert not is_remote_url("s3://bucket/models", plugins.storages())
    with pytest.raises(RecordError, match="takes a local path$"):
        open_store("s3://bucket/state.json", plugins.control_state_stores())


def test_an_empty_registry_says_so() -> None:
    class Things(Registry[object]):  # type: ignore[type-var]
        kind = "thing"

    with pytest.raises(LookupError, match=r"unknown thing 'x' \(no thing is installed\)"):
        Things().require("x")


def test_a_plugin_command_cannot_take_a_kernel_commands_name() -> None:
    from inferd.kernel.cli.app import mount
    from inferd.kernel.sdk.commands import CommandRegistry, CommandSpec

    commands = CommandRegistry()
    commands.add(CommandSpec("serve", "inferd.plugins.cli.commands:models"))
    with pytest.raises(ValueError, match="command 'serve' is the kernel's own"):
        mount(commands)


def test_a_trace_mode_whose_plugin_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferd.kernel.observability.tracing import tracer_for
    from inferd.kernel.sdk.frontends import StartupFailed
    from inferd.kernel.observability.tracing import NullSink
    from inferd.kernel.sdk.tracing import TraceConfig

    monkeypatch.setenv("INFERD_DISABLE_PLUGINS", "triton_trace")
    sinks = Plugins.load().trace_sinks()
    assert isinstance(tracer_for(TraceConfig(), sinks).sink, NullSink)  # tracing off: no sink
    with pytest.raises(StartupFailed, match=r"mode=triton: unknown trace mode 'triton' "
                                            r"\(available: opentelemetry\)"):
        tracer_for(TraceConfig(level=("TIMESTAMPS",), file="/tmp/trace.json"), sinks)


def test_serve_refuses_a_url_no_storage_plugin_reads(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferd.kernel.cli.main", "serve", "--model-repository",
         "hdfs://cluster/models"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "hdfs://cluster/models: not a remote repository URL (s3://, gs://, as://, az://)" \
        in done.stderr


def test_a_plugin_that_implements_no_hook_is_a_warning_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Most often the wrong module was imported (a folder named like the package): the
    plugin would otherwise register nothing, silently."""
    (tmp_path / "hookless_plugin.py").write_text('"""Implements nothing."""\n')
    info = tmp_path / "hookless_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hookless-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[inferd]\nhookless = hookless_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level("WARNING", logger="inferd.kernel.runtime.plugin_manager"):
        plugins = Plugins.load()
    assert "hookless" in plugins.loaded
    (warning,) = [r.getMessage() for r in caplog.records if "implements no" in r.getMessage()]
    assert warning.startswith("plugin hookless (hookless_plugin, from ")
    assert str(tmp_path / "hookless_plugin.py") in warning
