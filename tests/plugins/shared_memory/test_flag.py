"""The shared-memory plugin's flag: ``--allow-client-shm`` is the plugin's
(``inferd_add_options``), off unless given, as in tritonserver since 2.68 (server#8721), and
read from ``Settings.options`` when the provider opens."""

from __future__ import annotations

from pathlib import Path

from inferd.kernel.cli.serve import kernel_parser, serve_parser, settings_from
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.shared_memory import SharedMemorySetup
from inferd.plugins.shared_memory import open_shared_memory
from inferd.plugins.shared_memory.provider import ClientSharedMemory

PLUGINS = Plugins.load()


def allowed(tmp_path: Path, *flags: str) -> bool:
    args = serve_parser(PLUGINS).parse_args(["--model-repository", str(tmp_path), *flags])
    provider = open_shared_memory(SharedMemorySetup(settings_from(args, PLUGINS).options,
                                                    lambda serial, executors: None))
    assert isinstance(provider, ClientSharedMemory)
    return provider.allow_client_shm


def test_allow_client_shm_is_off_unless_given(tmp_path: Path) -> None:
    assert not allowed(tmp_path)
    assert allowed(tmp_path, "--allow-client-shm") and allowed(tmp_path, "--allow-client-shm=true")
    assert not allowed(tmp_path, "--allow-client-shm=false")


def test_the_flag_is_the_plugins_not_the_kernels() -> None:
    assert "--allow-client-shm" not in kernel_parser().format_help()
    assert "--allow-client-shm" in serve_parser(PLUGINS).format_help()
