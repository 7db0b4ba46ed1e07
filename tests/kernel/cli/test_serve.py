"""``inferd serve``'s parser and ``Settings``: the kernel's flags are typed fields, each
frontend's port and address (and every other plugin flag) land in ``Settings.options``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from inferd.kernel.cli.serve import kernel_parser, serve_parser, settings_from
from inferd.kernel.observability.trace_config import TraceConfig
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.settings import Settings
from inferd.kernel.supervisor import StartupFailed

FRONTEND_FLAGS = {"http_port": 8000, "http_address": "0.0.0.0", "grpc_port": 8001,
                  "grpc_address": "0.0.0.0", "metrics_port": 8002,
                  "metrics_address": "0.0.0.0", "zmq_port": 8003, "zmq_address": "0.0.0.0"}


def test_frontends_declare_their_ports_and_addresses(tmp_path: Path) -> None:
    kernel = vars(kernel_parser().parse_args([]))
    assert not kernel.keys() & FRONTEND_FLAGS.keys()
    args = serve_parser(Plugins.load()).parse_args(["--model-repository", str(tmp_path)])
    settings = settings_from(args)
    assert {name: settings.options[name] for name in FRONTEND_FLAGS} == FRONTEND_FLAGS
    args = serve_parser(Plugins.load()).parse_args(
        ["--model-repository", str(tmp_path), "--grpc-port=9000", "--http-address", "::1"])
    assert (settings_from(args).options["grpc_port"],
            settings_from(args).options["http_address"]) == (9000, "::1")


def test_no_kernel_flag_lands_in_the_plugin_options(tmp_path: Path) -> None:
    args = serve_parser(Plugins.load()).parse_args(["--model-repository", str(tmp_path)])
    options = settings_from(args).options
    fields = {field.name for field in dataclasses.fields(Settings)}
    assert not options.keys() & fields
    assert not {"trace_config", "trace_file", "log_file", "rate_limit"} & options.keys()
    assert "allow_http" in options and "http_max_input_size" in options


def test_trace_flags_are_a_typed_setting(tmp_path: Path) -> None:
    args = kernel_parser().parse_args(["--model-repository", str(tmp_path)])
    assert settings_from(args).trace == TraceConfig()
    args = kernel_parser().parse_args(["--model-repository", str(tmp_path),
                                       "--trace-config", "level=TIMESTAMPS",
                                       "--trace-config", "triton,file=/t.json"])
    trace = settings_from(args).trace
    assert (trace.level, trace.file) == (("TIMESTAMPS",), "/t.json")


def test_on_demand_and_budget_flags_are_typed_settings(tmp_path: Path) -> None:
    def settings(*flags: str) -> Settings:
        parser = serve_parser(Plugins.load())
        return settings_from(parser.parse_args(["--model-repository", str(tmp_path), *flags]))

    assert (Settings().model_load_on_demand, Settings().model_memory_budget) == (False, ())
    chosen = settings("--model-control-mode", "explicit", "--model-load-on-demand",
                      "--model-load-on-demand-timeout-secs", "5",
                      "--model-memory-budget", "cpu=1GiB,gpu0=2GiB")
    assert (chosen.model_load_on_demand, chosen.model_load_on_demand_timeout_secs,
            chosen.model_memory_budget) == (True, 5.0, (("cpu", 1024**3), ("gpu0", 2 * 1024**3)))
    for flags, problem in (
        (("--model-load-on-demand",), "requires setting '--model-control-mode=explicit' or"),
        (("--model-memory-budget", "cpu=1GiB"), "requires setting '--model-control-mode="),
        (("--model-control-mode", "poll", "--model-memory-budget", "cpu=lots"),
         "--model-memory-budget=cpu=lots: expected a size"),
    ):
        with pytest.raises(StartupFailed, match=re.escape(problem)):
            settings(*flags)


def test_allow_client_shm_is_off_unless_given(tmp_path: Path) -> None:
    def allowed(*flags: str) -> bool:
        args = kernel_parser().parse_args(["--model-repository", str(tmp_path), *flags])
        return settings_from(args).allow_client_shm

    # tritonserver's default since 2.68 (server#8721).
    assert (Settings().allow_client_shm, allowed()) == (False, False)
    assert allowed("--allow-client-shm") and allowed("--allow-client-shm=true")
    assert not allowed("--allow-client-shm=false")
