"""The supervisor: builds the server's actors, starts them in order, and shuts them down.

Start-up order: process link, repository, scheduler, executor pool (waits for every executor
to say hello), control, then control's start-up loads; if a start-up model failed and
``--exit-on-error`` holds, the server stops with every failure named; otherwise the frontends
start and the server serves. On SIGTERM or SIGINT: frontends stop accepting, in-flight
requests finish within ``--exit-timeout-secs``, models are unloaded, executors stop, and the
process exits 0. This module owns ordering only; each actor owns its own work.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
from collections.abc import Callable

import anyio
import anyio.to_thread
import zmq

from inferd.kernel.actors.control.actor import ControlActor
from inferd.kernel.actors.control.policies import open_policies, unserved_models
from inferd.kernel.actors.executor_pool.actor import ExecutorPoolActor
from inferd.kernel.actors.repository.actor import RepositoryActor
from inferd.kernel.actors.scheduler.actor import SchedulerActor
from inferd.kernel.actors.scheduler.response_cache import open_cache
from inferd.kernel.dataplane.data_plane import DataPlane
from inferd.kernel.observability.tracing import tracer_for
from inferd.kernel.runtime import link_memory
from inferd.kernel.runtime.addresses import CONTROL, EXECUTORS, SCHEDULER
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.runtime.process_link import LinkMemory, ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.kernel.runtime.run_folder import (
    HUB_SOCKET,
    OVERRIDES,
    create_run_folder,
    hold_temporary_files,
)
from inferd.kernel.sdk.caches import CacheUnavailable, ResponseCache
from inferd.kernel.sdk.frontends import Frontend, StartupFailed
from inferd.kernel.sdk.metrics_config import metrics_config_from_options
from inferd.kernel.sdk.shared_memory import OnClosed, SharedMemory, SharedMemorySetup
from inferd.kernel.sdk.table import format_table
from inferd.kernel.settings import Settings
from inferd.protocols import build
from inferd.protocols.messages import (
    Drain,
    Index,
    IndexRequest,
    LoadStartupModels,
    Shutdown,
    StartupReport,
)

log = logging.getLogger("inferd")

# The KServe/Triton protocol extensions inferd implements, as server metadata lists them (and
# the shared-memory plugin's, where it is installed).
EXTENSIONS = (
    "binary_tensor_data",
    "classification",
    "sequence",
    "parameters",
    "schedule_policy",
    "statistics",
    "model_configuration",
    "model_repository",
    "model_repository(unload_dependents)",
    "logging",
    "trace",
)
UNLOAD_TIMEOUT_SECS = 30.0


async def serve(settings: Settings, plugins: Plugins) -> None:
    """Run the server until SIGTERM/SIGINT. Raise ``StartupFailed`` if it cannot start."""
    # A build that failed or was killed serves slower than the one installed: say it loudly.
    if build.fell_back():
        log.warning("request path: %s", build.describe())
    else:
        log.info("request path: %s", build.describe())
    # First: a sink that cannot be made starts nothing.
    tracer = tracer_for(settings.trace, plugins.trace_sinks())
    try:
        metrics = metrics_config_from_options(settings.options)
    except ValueError as error:
        raise StartupFailed(str(error)) from None
    backends = plugins.backends()
    router = Router("main")
    try:  # a flag a policy refuses, or a record it cannot read, starts nothing
        policies = await anyio.to_thread.run_sync(open_policies, settings, plugins, router)
    except ValueError as error:
        raise StartupFailed(str(error)) from None
    cache = await _open_cache(settings, plugins)  # first: a Redis not answering leaves nothing
    context = zmq.Context()
    run_folder = create_run_folder()
    hold_temporary_files(run_folder)  # before any framework is imported, or executor started
    hub = f"ipc://{run_folder / HUB_SOCKET}"
    removed = link_memory.remove_stale()
    if removed:
        log.info("removed %d shared memory segment(s) left by servers that died", len(removed))
    memory = LinkMemory(
        os.getpid(),
        threshold=settings.executor_shm_threshold,
        capacity=settings.executor_shm_capacity,
    )
    link = None if settings.executor_inline else ProcessLink.hub(router, context, hub, memory)
    repository = RepositoryActor(
        router, settings.model_repositories, backends,
        auto_complete=not settings.disable_auto_complete_config,
        config_name=settings.model_config_name,
        cache_dir=settings.repository_cache_dir,
        remote_timeout=settings.repository_timeout_secs,
        agents=plugins.agents(),
        storages=plugins.storages(),
    )
    scheduler = SchedulerActor(router, cache, metrics)
    pool = ExecutorPoolActor(router, settings, backends, hub, link)
    control = ControlActor(router, settings, run_folder / OVERRIDES, policies)
    dataplane = DataPlane(router, EXTENSIONS, _shared_memory(settings, plugins), tracer=tracer,
                          on_demand=unserved_models(policies))
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tasks:
                if link is not None:
                    tasks.start_soon(link.run)
                for actor in (repository, scheduler, pool, control):
                    await tasks.start(actor.run)
                await _check_remote_roots(repository, settings)
                report = await router.ask(CONTROL, LoadStartupModels())
                assert isinstance(report, StartupReport)
                await _log_models(router)
                if report.failures and settings.exit_on_error:
                    raise StartupFailed(_failure_text(report.failures))
                frontends = await _start_frontends(tasks, plugins, dataplane, settings)
                log.info("inferd is serving (%s)", ", ".join(f.name for f in frontends))
                async for received in signals:
                    log.info("%s received: shutting down", signal.Signals(received).name)
                    break
                await _shut_down(router, frontends, settings)
                tasks.cancel_scope.cancel()
    finally:
        if cache is not None:
            with anyio.CancelScope(shield=True):
                await cache.close()
        tracer.close()
        if dataplane.shared_memory is not None:
            dataplane.shared_memory.close()  # unmaps system regions, closes CUDA IPC handles
        if link is not None:
            link.close()
        context.term()
        shutil.rmtree(run_folder, ignore_errors=True)
        link_memory.remove_server_segments(os.getpid())  # also what a killed executor left


def _shared_memory(settings: Settings, plugins: Plugins
                   ) -> Callable[[OnClosed], SharedMemory] | None:
    """What opens the one provider of client shared memory a plugin registered (None: no
    plugin provides it); two are refused before anything starts."""
    specs = list(plugins.shared_memory_providers())
    if len(specs) > 1:
        raise StartupFailed("client shared memory is provided by more than one plugin: "
                            f"{', '.join(spec.name for spec in specs)}; disable all but one "
                            "(INFERD_DISABLE_PLUGINS)")
    if not specs:
        return None
    spec = specs[0]

    def open_it(on_closed: OnClosed) -> SharedMemory:
        return spec.open(SharedMemorySetup(settings.options, on_closed))

    return open_it


async def _check_remote_roots(repository: RepositoryActor, settings: Settings) -> None:
    """A remote root that cannot be listed fails the start as a failed model does, where the
    start-up loads need its listing (NONE, POLL, EXPLICIT with '*'); otherwise it is
    logged, and the loads that need it say why."""
    problems = await anyio.to_thread.run_sync(repository.check_remote_roots)
    lists = settings.model_control_mode != "explicit" or "*" in settings.load_models
    for problem in problems:
        if lists and settings.exit_on_error:
            raise StartupFailed(problem)
        log.error("%s", problem)


async def _open_cache(settings: Settings, plugins: Plugins) -> ResponseCache | None:
    """The server's response cache; one that cannot be opened fails the start (Triton's)."""
    try:
        cache = await open_cache(settings.cache, plugins.caches())
    except CacheUnavailable as error:
        raise StartupFailed(str(error)) from None
    if cache is not None:
        log.info("response cache: %s", cache.describe())
    return cache


async def _start_frontends(
    tasks: anyio.abc.TaskGroup, plugins: Plugins, dataplane: DataPlane, settings: Settings
) -> list[Frontend]:
    started = []
    for spec in plugins.frontends():
        if spec.enabled_option and not settings.options.get(spec.enabled_option, True):
            continue
        frontend = spec.load_class()(dataplane, settings)
        frontend.name = frontend.name or spec.name
        address = await tasks.start(frontend.serve)
        log.info("frontend %s listening on %s", spec.name, address)
        started.append(frontend)
    return started


async def _shut_down(router: Router, frontends: list[Frontend], settings: Settings) -> None:
    with anyio.CancelScope(shield=True):
        for frontend in frontends:
            await frontend.stop_accepting()
        await router.ask(SCHEDULER, Drain(settings.exit_timeout_secs))
        # Unloading waits only for batches already running; it gets its own bound.
        with anyio.move_on_after(UNLOAD_TIMEOUT_SECS):
            await router.ask(CONTROL, Shutdown())
        await router.ask(EXECUTORS, Shutdown())
    log.info("shutdown complete")


async def _log_models(router: Router) -> None:
    index = await router.ask(CONTROL, IndexRequest())
    assert isinstance(index, Index)
    if not index.entries:
        log.info("no models in the repository")
        return
    rows = [(e.name, e.version or "-", e.state or "(not loaded)", e.reason) for e in index.entries]
    log.info("models:\n%s", format_table(("MODEL", "VERSION", "STATE", "REASON"), rows))


def _failure_text(failures: dict[str, str]) -> str:
    lines = [f"  {name}: {reason}" for name, reason in sorted(failures.items())]
    count = len(failures)
    return f"{count} model{'s' if count > 1 else ''} failed to load:\n" + "\n".join(lines)
