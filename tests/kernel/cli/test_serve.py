"""``inferd serve``'s parser and ``Settings``: the kernel's flags are typed fields, each
frontend's port and address (and every other plugin flag) land in ``Settings.options``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from inferd.kernel.cli.serve import kernel_parser, serve_parser, settings_from
from inferd.kernel.observability.trace_config import TraceConfig
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.settings import Settings

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
