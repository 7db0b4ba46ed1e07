"""``inferd serve``'s parser and ``Settings``: the kernel's flags are typed fields, each
frontend's port and address (and every other plugin flag) land in ``Settings.options``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from inferd.kernel.cli.serve import kernel_parser, serve_parser, settings_from
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.flags import ListenFlags
from inferd.kernel.sdk.tracing import TraceConfig
from inferd.kernel.settings import Settings

PLUGINS = Plugins.load()
FRONTEND_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "zmq": 8003}


def listening(settings: Settings) -> dict[str, tuple[str, int]]:
    """Where each frontend binds, read back as the frontend reads it."""
    return {name: ListenFlags(name, port).read(settings.options)
            for name, port in FRONTEND_PORTS.items()}


def test_frontends_declare_their_ports_and_addresses(tmp_path: Path) -> None:
    kernel = vars(kernel_parser().parse_args([]))
    assert not kernel.keys() & {f"{name}_{flag}" for name in FRONTEND_PORTS
                                for flag in ("port", "address")}
    parser = serve_parser(Plugins.load())
    args = parser.parse_args(["--model-repository", str(tmp_path)])
    assert listening(settings_from(args, PLUGINS)) == {
        name: ("0.0.0.0", port) for name, port in FRONTEND_PORTS.items()}
    args = parser.parse_args(
        ["--model-repository", str(tmp_path), "--grpc-port=9000", "--http-address", "::1"])
    assert listening(settings_from(args, PLUGINS))["grpc"] == ("0.0.0.0", 9000)
    assert listening(settings_from(args, PLUGINS))["http"] == ("::1", 8000)


def test_address_binds_every_frontend_unless_its_own_flag_says_otherwise(
    tmp_path: Path
) -> None:
    args = serve_parser(Plugins.load()).parse_args(
        ["--model-repository", str(tmp_path), "--address", "127.0.0.1",
         "--metrics-address", "0.0.0.0"])
    assert listening(settings_from(args, PLUGINS)) == {
        "http": ("127.0.0.1", 8000), "grpc": ("127.0.0.1", 8001),
        "metrics": ("0.0.0.0", 8002), "zmq": ("127.0.0.1", 8003)}


def test_help_shows_every_listening_default() -> None:
    text = " ".join(serve_parser(Plugins.load()).format_help().split())
    assert "--address ADDRESS the address every frontend binds" in text
    for name, port in FRONTEND_PORTS.items():
        assert f"the {name} frontend listens on (default {port})" in text
        assert f"--{name}-address ADDRESS the address the {name} frontend binds (default: " \
               "--address, itself 0.0.0.0 unless given)" in text


def test_no_kernel_flag_lands_in_the_plugin_options(tmp_path: Path) -> None:
    args = serve_parser(Plugins.load()).parse_args(["--model-repository", str(tmp_path)])
    options = settings_from(args, PLUGINS).options
    fields = {field.name for field in dataclasses.fields(Settings)}
    assert not options.keys() & fields
    assert not {"log_file", "rate_limit"} & options.keys()
    assert "allow_http" in options and "http_max_input_size" in options
    # the cache's and tracing's flags are their plugins' (response_cache, tracing)
    assert {"cache_config", "trace_config", "trace_file"} <= options.keys()


def test_trace_flags_are_a_typed_setting(tmp_path: Path) -> None:
    parser = serve_parser(Plugins.load())
    args = parser.parse_args(["--model-repository", str(tmp_path)])
    assert settings_from(args, PLUGINS).trace == TraceConfig()
    args = parser.parse_args(["--model-repository", str(tmp_path),
                              "--trace-config", "level=TIMESTAMPS",
                              "--trace-config", "triton,file=/t.json"])
    trace = settings_from(args, PLUGINS).trace
    assert (trace.level, trace.file) == (("TIMESTAMPS",), "/t.json")
