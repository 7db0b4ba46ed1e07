"""The on-demand plugin's flags: declared by the plugin (``inferd_add_options``), not the
kernel, read from ``Settings.options`` into its settings, and refused at start-up with
tritonserver's words for a flag that needs another mode."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferd.kernel.cli.serve import kernel_parser, serve_parser, settings_from
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.control import PolicySetup
from inferd.plugins.on_demand.policy import OnDemandSettings, open_policy
from inferd.plugins.on_demand.policy import settings_from as on_demand_settings
from inferd.protocols.messages import Message

FLAGS = ("--model-load-on-demand", "--model-load-on-demand-timeout-secs",
         "--model-memory-budget")


async def never(message: Message, timeout: float) -> Message:
    raise AssertionError("no message is sent while the flags are read")


def setup(tmp_path: Path, *flags: str) -> PolicySetup:
    plugins = Plugins.load()
    parser = serve_parser(plugins)
    settings = settings_from(parser.parse_args(["--model-repository", str(tmp_path), *flags]),
                             plugins)
    return PolicySetup(settings.options, settings.model_control_mode, never)


def test_the_flags_are_the_plugins_not_the_kernels() -> None:
    kernel = kernel_parser().format_help()
    served = serve_parser(Plugins.load()).format_help()
    assert [flag for flag in FLAGS if flag in kernel] == []
    assert [flag for flag in FLAGS if flag not in served] == []


def test_the_flags_are_read_into_the_plugins_settings(tmp_path: Path) -> None:
    chosen = on_demand_settings(setup(
        tmp_path, "--model-control-mode", "explicit", "--model-load-on-demand",
        "--model-load-on-demand-timeout-secs", "5", "--model-memory-budget",
        "cpu=1GiB,gpu0=2GiB"))
    assert chosen == OnDemandSettings(True, 5.0, (("cpu", 1024**3), ("gpu0", 2 * 1024**3)))


def test_without_its_flags_the_policy_is_off(tmp_path: Path) -> None:
    assert open_policy(setup(tmp_path, "--model-control-mode", "explicit")) is None


@pytest.mark.parametrize(("flags", "problem"), [
    (("--model-load-on-demand",), "requires setting '--model-control-mode=explicit' or"),
    (("--model-memory-budget", "cpu=1GiB"), "requires setting '--model-control-mode="),
    (("--model-control-mode", "poll", "--model-memory-budget", "cpu=lots"),
     "--model-memory-budget=cpu=lots: expected a size"),
])
def test_a_flag_the_plugin_refuses_says_why(tmp_path: Path, flags: tuple[str, ...],
                                            problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        open_policy(setup(tmp_path, *flags))
