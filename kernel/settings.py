"""Server settings: one frozen value built from the command line and read everywhere.

Its fields are the kernel's own flags, typed, named after tritonserver's (SPEC 6.1). The
flags a plugin declares (``inferd_add_options``: a frontend's port, address and limits, for
instance) are not fields: they land in ``options`` by their ``dest``, and the plugin reads
them there. Two fields are read from plugins' flags because the kernel runs what they
configure: ``cache`` (the ``response_cache`` plugin's) and ``trace`` (the ``tracing``
plugin's). Owns no parsing beyond value types; ``inferd.kernel.cli.serve`` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.kernel.actors.scheduler.cache_config import CacheConfig
from inferd.kernel.observability.logs import LogSettings
from inferd.kernel.sdk.tracing import TraceConfig

CPU_EXECUTOR_CHOICES = ("server", "process")
"""``--cpu-executor``: where the CPU instances of native backends run."""


@dataclass(frozen=True, slots=True)
class Settings:
    model_repositories: tuple[str, ...] = ("model_repository",)
    # --repository-cache-dir: where remote roots' models are fetched ("" for the default,
    # inferd.kernel.actors.repository.mirror.default_cache_dir).
    repository_cache_dir: str = ""
    # --repository-timeout-secs: how long one request to a remote root may stay silent.
    repository_timeout_secs: float = 30.0
    model_control_mode: str = "none"  # none | poll | explicit
    load_models: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout_secs: float = 30.0
    model_load_timeout_secs: float = 600.0
    disable_auto_complete_config: bool = False
    cpu_executors: int = 1
    executor_inline: bool = False
    # Where the CPU instances of native backends run (BackendSpec.runs_in_server): "server",
    # in the main process as Triton runs its native backends, or "process", in the CPU
    # executor processes, so a framework's crash cannot take the server down.
    cpu_executor: str = "server"
    intra_op_threads: int = 1
    # Tensors from this many bytes up cross between the processes in shared memory (0: never),
    # at most ``executor_shm_capacity`` bytes of segments per process
    # (inferd.kernel.runtime.link_memory).
    executor_shm_threshold: int = 64 * 1024
    executor_shm_capacity: int = 256 * 1024 * 1024
    # The plugins' options (inferd_add_options) by dest, e.g. "http_port".
    options: dict[str, Any] = field(default_factory=dict)
    logs: LogSettings = field(default_factory=LogSettings)
    # --allow-log-file-updates: the logging extension may change the log file (Triton: never).
    log_file_updates: bool = False
    # --model-config-name: a model's configs/<name>.pbtxt is used when it has one.
    model_config_name: str = ""
    # --backend-config: (backend or "" for every backend, setting, value).
    backend_config: tuple[tuple[str, str, str], ...] = ()
    # The response cache the response_cache plugin's --cache-config gives, None for none (or
    # with that plugin disabled; inferd.kernel.actors.scheduler.cache_config).
    cache: CacheConfig | None = None
    # The tracing the server starts with, from the tracing plugin's --trace-config and
    # tritonserver's older --trace-file and kin (inferd.kernel.observability.trace_config;
    # none given, or that plugin disabled: no tracing).
    trace: TraceConfig = field(default_factory=TraceConfig)
