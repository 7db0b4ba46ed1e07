"""``inferd serve``: tritonserver's flags (SPEC 6.1) parsed by argparse, including Triton's
boolean style (``--exit-on-error=false``) and its start-up checks on ``--load-model``.

This module turns argv into ``Settings`` and exit codes (2 for an unknown or malformed flag,
argparse's own; 1 for a start-up failure); it owns no server behaviour. The ``inferd``
entry point (``inferd.kernel.cli.main``) hands ``serve`` here before any client module loads.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from inferd.kernel.actors.repository.remote_storage import check_url, is_remote_url
from inferd.kernel.actors.scheduler.cache_config import CacheConfig, parse_cache_config
from inferd.kernel.observability.logs import LogSettings, configure_logging
from inferd.kernel.observability.trace_config import parse_trace_config
from inferd.kernel.runtime.plugin_manager import Plugins, installed
from inferd.kernel.sdk.caches import CacheConfigError
from inferd.kernel.sdk.flags import (
    ALL_ADDRESSES_DEST,
    ANY_ADDRESS,
    add_boolean,
    backend_setting,
    byte_count,
)
from inferd.kernel.sdk.frontends import StartupFailed
from inferd.kernel.sdk.open_file_limit import raise_open_file_limit
from inferd.kernel.sdk.tracing import TraceConfig
from inferd.kernel.settings import CPU_EXECUTOR_CHOICES, Settings
from inferd.kernel.supervisor import serve
from inferd.protocols.errors import InvalidArgument


def serve_parser(plugins: Plugins) -> argparse.ArgumentParser:
    """The kernel's flags, then every plugin's (``inferd_add_options``: each frontend's port,
    address and limits among them)."""
    parser = kernel_parser()
    plugins.add_options(parser)
    return parser


def kernel_parser() -> argparse.ArgumentParser:
    """``inferd serve`` with the kernel's own flags only: those ``Settings`` has fields for,
    and tritonserver's that inferd accepts to refuse or report."""
    defaults = Settings()
    parser = argparse.ArgumentParser(prog="inferd serve", description="Run the server.")
    parser.add_argument("--address", dest=ALL_ADDRESSES_DEST, default=ANY_ADDRESS,
                        help="the address every frontend binds unless its own "
                             f"--<protocol>-address says otherwise (default {ANY_ADDRESS}; "
                             "127.0.0.1 serves this machine only)")
    models = parser.add_argument_group("models")
    models.add_argument("--model-repository", "--model-store", action="append",
                        dest="model_repositories", metavar="PATH",
                        help="a model repository root: a folder, or s3://[host:port/]bucket/path"
                             ", gs://bucket/path, as://account/container/path or "
                             "az://container/path (repeatable; default ./model_repository)")
    models.add_argument("--repository-cache-dir", default="", metavar="PATH",
                        help="where the models of remote repositories are fetched to, kept "
                             "across restarts (default $XDG_CACHE_HOME/inferd/repositories)")
    models.add_argument("--repository-timeout-secs", type=float,
                        default=defaults.repository_timeout_secs, metavar="SECONDS",
                        help="how long one request to a remote repository may go unanswered "
                             "before it fails (each is tried twice)")
    models.add_argument("--model-control-mode", choices=("none", "poll", "explicit"),
                        default=defaults.model_control_mode)
    models.add_argument("--load-model", action="append", dest="load_models", default=[],
                        metavar="NAME", help="with explicit mode: load at start-up ('*' = all)")
    models.add_argument("--repository-poll-secs", type=float, default=defaults.repository_poll_secs)
    models.add_argument("--model-load-timeout-secs", type=float,
                        default=defaults.model_load_timeout_secs)
    add_boolean(models, "--exit-on-error", defaults.exit_on_error,
              "exit if a start-up model fails to load")
    add_boolean(models, "--strict-readiness", defaults.strict_readiness,
              "ready only when every model meant to be served is READY")
    add_boolean(models, "--disable-auto-complete-config", False,
              "do not fill missing config fields from the model file")
    add_boolean(models, "--strict-model-config", False,
              "tritonserver's name for --disable-auto-complete-config")
    models.add_argument("--model-config-name", default="", metavar="NAME",
                        help="use a model's configs/NAME.pbtxt where it has one, else its "
                             "config.pbtxt")
    models.add_argument("--backend-config", action="append", default=[],
                        metavar="[BACKEND,]SETTING=VALUE",
                        help="a backend setting (default-max-batch-size is the one inferd's "
                             "backends read)")
    execution = parser.add_argument_group("execution")
    execution.add_argument("--cpu-executors", type=int, default=defaults.cpu_executors,
                           help="number of CPU executor processes")
    add_boolean(execution, "--executor-inline", False,
              "run every model inside the main process, python models included (no "
              "executor processes at all)")
    execution.add_argument(
        "--cpu-executor", choices=CPU_EXECUTOR_CHOICES, default=defaults.cpu_executor,
        help="where CPU instances of native backends (onnxruntime, pytorch) run: server, in "
             "the main process as Triton runs them (the default), or process, in the CPU "
             "executor processes, so a crash in a framework cannot take the server down")
    execution.add_argument("--intra-op-threads", type=int, default=defaults.intra_op_threads,
                           help="framework threads per model instance")
    execution.add_argument(
        "--executor-shm-threshold", type=byte_count(smallest=0), metavar="BYTES",
        default=defaults.executor_shm_threshold,
        help="tensors from this size up cross to and from executor processes in shared"
             " memory (0: never)")
    execution.add_argument(
        "--executor-shm-capacity", type=byte_count(), metavar="BYTES",
        default=defaults.executor_shm_capacity,
        help="shared memory each process of the server may hold for those tensors")
    execution.add_argument("--exit-timeout-secs", type=float, default=defaults.exit_timeout_secs)
    execution.add_argument("--rate-limit", choices=("off", "execution_count"), default="off",
                           help="tritonserver's rate limiter: inferd has none, only off applies")
    logs = parser.add_argument_group("logging")
    LogSettings.add_arguments(logs)
    add_boolean(logs, "--allow-log-file-updates", False,
                "let the logging extension (POST v2/logging, gRPC LogSettings) change the log "
                "file; tritonserver always refuses it")
    for endpoint in ("sagemaker", "vertex-ai"):
        add_boolean(parser, f"--allow-{endpoint}", False,
                    f"tritonserver's {endpoint} endpoint: inferd has none, true is refused")
    return parser


def settings_from(args: argparse.Namespace, plugins: Plugins) -> Settings:
    """The settings of a command line ``serve_parser(plugins)`` parsed; ``StartupFailed`` for
    a combination or a value tritonserver refuses at start-up."""
    load_models = tuple(args.load_models)
    if load_models and args.model_control_mode != "explicit":
        raise StartupFailed(
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
        )
    if "*" in load_models and len(load_models) > 1:
        raise StartupFailed(
            "Wildcard model name '*' must be the ONLY startup model if specified at all."
        )
    for endpoint in ("sagemaker", "vertex_ai"):
        if getattr(args, f"allow_{endpoint}"):
            raise StartupFailed(f"--allow-{endpoint.replace('_', '-')}=true: inferd has no "
                                f"{endpoint.replace('_', ' ')} endpoint; serve KServe v2 over "
                                "HTTP or gRPC instead")
    name = args.model_config_name
    if name and (not name.replace("-", "").replace("_", "").replace(".", "").isalnum()
                 or name.startswith(".")):
        raise StartupFailed(f"--model-config-name={name}: a name of letters, digits, '-', '_' "
                            "and '.' (it names configs/<name>.pbtxt in a model folder)")
    repositories = tuple(args.model_repositories or ("model_repository",))
    options = _plugin_options(args)
    if not args.repository_timeout_secs > 0:
        raise StartupFailed(f"--repository-timeout-secs={args.repository_timeout_secs:g}: a "
                            "number of seconds above 0")
    storages = plugins.storages()
    for root in repositories:
        # A URL of a scheme no storage plugin reads is refused naming those there are.
        if is_remote_url(root, storages) or ("://" in root and not os.path.exists(root)):
            try:
                check_url(root, storages)  # its form and its extra; the storage is asked later
            except InvalidArgument as error:
                raise StartupFailed(error.message) from None
            continue
        # As Triton: a root that is not there fails the start, it is not an empty repository.
        if not os.path.isdir(root):
            problem = "is not a directory" if os.path.exists(root) else "does not exist"
            raise StartupFailed(f"failed to stat file {root}: the model repository {problem}")
    return Settings(
        model_repositories=repositories,
        repository_cache_dir=args.repository_cache_dir,
        repository_timeout_secs=args.repository_timeout_secs,
        model_control_mode=args.model_control_mode,
        load_models=load_models,
        repository_poll_secs=args.repository_poll_secs,
        exit_on_error=args.exit_on_error,
        strict_readiness=args.strict_readiness,
        exit_timeout_secs=args.exit_timeout_secs,
        model_load_timeout_secs=args.model_load_timeout_secs,
        disable_auto_complete_config=(args.disable_auto_complete_config
                                      or args.strict_model_config),
        cpu_executors=args.cpu_executors,
        executor_inline=args.executor_inline,
        cpu_executor=args.cpu_executor,
        intra_op_threads=args.intra_op_threads,
        executor_shm_threshold=args.executor_shm_threshold,
        executor_shm_capacity=args.executor_shm_capacity,
        options=options,
        logs=LogSettings.from_arguments(args),
        log_file_updates=args.allow_log_file_updates,
        model_config_name=args.model_config_name,
        backend_config=tuple(_backend_setting(text) for text in args.backend_config),
        cache=_cache(options, plugins),
        trace=_trace(options, plugins),
    )


def _cache(options: dict[str, Any], plugins: Plugins) -> CacheConfig | None:
    """The response cache the flags of the ``response_cache`` plugin configure (none when it
    is disabled: the flags are not there)."""
    try:
        return parse_cache_config(options.get("cache_config", []), plugins.caches(),
                                  options.get("response_cache_byte_size"))
    except CacheConfigError as error:
        raise StartupFailed(str(error)) from None


def _plugin_options(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of the flags plugins added, by dest: all but the kernel's own."""
    kernel = vars(kernel_parser().parse_args([]))
    options = {name: value for name, value in vars(args).items() if name not in kernel}
    options[ALL_ADDRESSES_DEST] = getattr(args, ALL_ADDRESSES_DEST)  # read by every frontend
    return options


# tritonserver's deprecated trace flags (by dest) and the --trace-config setting each is.
_DEPRECATED_TRACE_FLAGS = (("trace_file", "triton,file"), ("trace_level", "level"),
                           ("trace_rate", "rate"), ("trace_count", "count"),
                           ("trace_log_frequency", "triton,log-frequency"))


def _trace(options: dict[str, Any], plugins: Plugins) -> TraceConfig:
    """``--trace-config`` (the ``tracing`` plugin's flags; off when it is disabled), after
    tritonserver's older ``--trace-file``, ``--trace-level``, ``--trace-rate``,
    ``--trace-count`` and ``--trace-log-frequency`` as the settings they stand for (so
    ``--trace-config``, coming later, overrides them, as in Triton), each of those with
    Triton's warning."""
    items: list[str] = []
    for option, setting in _DEPRECATED_TRACE_FLAGS:
        given = options.get(option)
        if given is None:
            continue
        logging.getLogger("inferd").warning(
            "'%s' has been deprecated and will be removed in a future release; use "
            "'--trace-config %s=<value>' instead", "--" + option.replace("_", "-"), setting)
        items.extend(f"{setting}={value}" for value in
                     (given if isinstance(given, list) else [given]))
    try:
        return parse_trace_config([*items, *options.get("trace_config", [])],
                                  plugins.trace_sinks())
    except ValueError as error:
        raise StartupFailed(str(error)) from None


def _backend_setting(text: str) -> tuple[str, str, str]:
    try:
        setting: tuple[str, str, str] = backend_setting(text)
        return setting
    except ValueError as error:
        raise StartupFailed(str(error)) from None


def _report_compatibility_flags(args: argparse.Namespace, settings: Settings) -> None:
    """Say what the tritonserver flags inferd accepts but cannot apply do (nothing)."""
    log = logging.getLogger("inferd")
    if args.rate_limit != "off":
        log.warning("--rate-limit=%s: inferd has no rate limiter; executions are not "
                    "limited", args.rate_limit)
    if (byte_size := settings.options.get("response_cache_byte_size")) is not None:
        log.warning("'--response-cache-byte-size' has been deprecated! It is "
                    "'--cache-config=local,size=%d'", byte_size)
    if cache_directory := settings.options.get("cache_directory"):
        log.info("--cache-directory=%s: inferd's response caches are plugins; the folder is "
                 "not read", cache_directory)
    for text, (backend, setting, _) in zip(args.backend_config, settings.backend_config,
                                           strict=True):
        if setting not in USED_BACKEND_SETTINGS:
            log.warning("--backend-config=%s: inferd's %s backend%s do not read '%s'", text,
                        backend or "", "" if backend else "s", setting)


# The --backend-config settings inferd's backends read (inferd.kernel.sdk.modelconfig).
USED_BACKEND_SETTINGS = ("default-max-batch-size",)


def serve_main(argv: Sequence[str]) -> int:
    """``inferd serve ARGV``: the exit code (argparse exits 2 itself on a bad flag)."""
    plugins = installed()  # this process's, handed to everything that looks a plugin up
    args = serve_parser(plugins).parse_args(argv)
    try:
        configure_logging(LogSettings.from_arguments(args))
    except OSError as error:
        sys.exit(f"inferd: --log-file {args.log_file}: {error.strerror}")
    # A fatal signal in a framework (a segfault in onnxruntime or torch, which run in this
    # process by default) ends the server before any log line: the traceback on stderr
    # names the model whose batch was running (instance_slot.named_call).
    faulthandler.enable()
    raise_open_file_limit()
    try:
        settings = settings_from(args, plugins)
        _report_compatibility_flags(args, settings)
        anyio.run(serve, settings, plugins, backend="asyncio",
                  backend_options={"use_uvloop": True})
    except (StartupFailed, OSError, BaseExceptionGroup) as error:
        cause = _startup_cause(error)
        if cause is None:
            raise
        logging.getLogger("inferd").error("cannot start: %s", cause)
        return 1
    return 0


def _startup_cause(error: BaseException) -> BaseException | None:
    """The start-up failure inside ``error``, unwrapping task-group exception groups."""
    if isinstance(error, (StartupFailed, OSError)):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            if (cause := _startup_cause(inner)) is not None:
                return cause
    return None
