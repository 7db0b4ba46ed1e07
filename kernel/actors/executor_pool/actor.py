"""The executor pool actor: which executors exist, and which load lives on which executor.

It owns the set of executors (the one in the main process, ``executor/inline``; the CPU
pool's processes; one per GPU; one per isolated backend; one per model whose config asks for
a process of its own (``INFERD_EXECUTOR: "isolated"``, stopped when the model is unloaded))
and the placement of each load: the parts a version's instances split into
(``inferd.kernel.actors.executor_pool.placement``), the executor each part goes to, a load in all of
them at once (all or nothing) and its unload. The CPU instances of native backends
(``BackendSpec.runs_in_server``: onnxruntime, pytorch) run in the main process unless
``--cpu-executor process`` or the model's ``INFERD_EXECUTOR`` says otherwise, as Triton runs
its native backends: a batch then reaches its instance without crossing a process. The CPU
pool's processes start when a model first needs one (with ``--cpu-executor process``, at
start-up). Control loads and unloads through it; the scheduler sends batches straight to the
executor addresses it reports. Its processes, started, watched, restarted after a crash with
back-off and stopped, are ``inferd.kernel.actors.executor_pool.processes``'s, which it owns and
calls. It also owns the server's current log settings (Triton's logging extension): an update is
applied in the main process, then sent to every running executor process, and every process
started later starts with it. It never touches a model or a tensor itself.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.abc
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor import execution_env
from inferd.kernel.actors.executor.actor import ExecutorActor
from inferd.kernel.actors.executor_pool import placement, returned_memory
from inferd.kernel.actors.executor_pool.processes import ExecutorProcesses
from inferd.kernel.modelconfig.validation import EXECUTOR_PARAMETER, executor_choice
from inferd.kernel.observability.logs import as_reply, configure_logging, updated
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import (
    EXECUTORS,
    INLINE_EXECUTOR,
    cpu_executor,
    framework_executor,
    gpu_executor,
    isolated_executor,
)
from inferd.kernel.runtime.devices import pinned_environment
from inferd.kernel.runtime.process_link import ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.modelconfig import FORK_PARAMETER, forks_after_initialize
from inferd.kernel.sdk.backends import BackendRegistry, BackendSpec
from inferd.kernel.sdk.process_metrics import process_usage
from inferd.kernel.settings import Settings
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    ExecutorCrashed,
    InvalidArgument,
    Unavailable,
    Unsupported,
)
from inferd.protocols.logging_api import LOG_FILE_REFUSED
from inferd.protocols.messages import (
    Ack,
    Envelope,
    ExecutorHello,
    LoadVersion,
    LogSettingsReply,
    LogSettingsRequest,
    Metrics,
    MetricsRequest,
    Shutdown,
    UnloadVersion,
    VersionLoaded,
    VersionUnloaded,
)

log = logging.getLogger(__name__)

HELLO_TIMEOUT_SECS = 120.0


class ExecutorPoolActor(Actor):
    address = EXECUTORS

    def __init__(
        self,
        router: Router,
        settings: Settings,
        backends: BackendRegistry,
        hub_endpoint: str,
        link: ProcessLink | None,
    ) -> None:
        super().__init__(router)
        self._settings = settings
        self._backends = backends
        self._load_counts: dict[str, int] = {}
        self._loads: dict[int, list[str]] = {}  # load id -> the executors of its parts
        self._abandoned: set[int] = set()
        self._log_update = anyio.Lock()  # updates reach every process in the order they came
        self._options = {
            "intra_op_threads": settings.intra_op_threads,
            "link_shm_threshold": settings.executor_shm_threshold,
            "link_shm_capacity": settings.executor_shm_capacity,
            "backend_config": [list(setting) for setting in settings.backend_config],
        }
        self._processes = ExecutorProcesses(
            router, hub_endpoint, self._options, settings.logs, link,
            spawn=self.spawn, forget_loads=self._forget_loads,
        )
        self._cpu_processes = [cpu_executor(i) for i in range(max(1, settings.cpu_executors))]

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tasks:
            await tasks.start(super().run)
            inline = ExecutorActor(self.router, INLINE_EXECUTOR, self._backends, self._options)
            await tasks.start(inline.run)
            if not self._settings.executor_inline and self._settings.cpu_executor == "process":
                with anyio.fail_after(HELLO_TIMEOUT_SECS):
                    for name in self._cpu_processes:
                        await self._processes.ensure_started(name, {})
            task_status.started()

    async def on_shutdown(self, message: Shutdown, envelope: Envelope) -> Ack:
        """Stop every executor in order: it unloads its models, then exits."""
        await self._processes.stop_all()
        return Ack()

    async def on_stop(self) -> None:
        self._processes.kill_all()  # start-up failed or shutdown timed out

    async def on_executor_hello(self, hello: ExecutorHello, envelope: Envelope) -> None:
        self._processes.hello(hello)

    def _forget_loads(self, name: str) -> None:
        """The process ``name`` died: the parts of loads that lived there are gone with it."""
        for names in self._loads.values():
            while name in names:
                names.remove(name)
        self._load_counts[name] = 0

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        """Each running executor process's CPU seconds and resident memory, and each
        executor's restart count (inferd's ``inferd_executor_*`` metrics)."""
        samples: list[tuple[str, dict[str, str], float]] = []
        running = [(e.name, e.process.pid if e.process is not None
                    and e.process.returncode is None else 0, e.restarts)
                   for e in self._processes.by_name.values()]
        if self._settings.executor_inline or self._load_counts.get(INLINE_EXECUTOR):
            running.append((INLINE_EXECUTOR, os.getpid(), 0))  # the main process's figures
        for name, pid, restarts in sorted(running):
            labels = {"executor": name}
            usage = process_usage(pid) if pid else None
            if usage is not None:
                samples += [("inferd_executor_cpu_seconds_total", labels, usage[0]),
                            ("inferd_executor_resident_memory_bytes", labels, usage[1])]
            samples.append(("inferd_executor_restarts_total", labels, restarts))
        return Metrics(tuple(samples))

    # ------------------------------------------------------------------ log settings

    async def on_log_settings_request(
        self, request: LogSettingsRequest, envelope: Envelope
    ) -> LogSettingsReply:
        """Triton's logging extension: the settings after ``request.updates``, applied in
        every process, or an error and nothing changed."""
        if request.updates:
            async with self._log_update:
                await self._update_logs(request.updates)
        return as_reply(self._processes.logs)

    async def _update_logs(self, updates: dict[str, bool | int | str]) -> None:
        if "log_file" in updates and not self._settings.log_file_updates:
            raise Unsupported(LOG_FILE_REFUSED)
        new = updated(self._processes.logs, updates)
        if new == self._processes.logs:
            return
        try:
            configure_logging(new)  # checks the log file opens before anything changes
        except OSError as error:
            raise InvalidArgument(
                f"cannot write the log file '{new.file}': {error.strerror}") from None
        log.info("log settings are now %s", new)
        await self._processes.apply_logs(new)

    # ------------------------------------------------------------------ placement

    def _parts(self, load: LoadVersion, config: ModelConfig) -> list[placement.Part]:
        forks = forks_after_initialize(config)
        if self._settings.executor_inline:
            if forks:
                raise InvalidArgument(
                    f"model '{load.model}': parameter {FORK_PARAMETER} needs executor "
                    "processes; the server runs with --executor-inline")
            return [placement.whole(config)]
        spec = self._backends.get(load.backend)
        if forks:  # its instances fork from one process of its own
            return placement.split(config, isolated=True, per_instance=False)
        per_instance = spec is not None and spec.process_per_instance
        return placement.split(config, isolated=load.isolated, per_instance=per_instance)

    def _in_server(self, load: LoadVersion, config: ModelConfig) -> bool:
        """Whether the CPU instances of ``load`` run in the main process: always with
        ``--executor-inline``; else those of a native backend unless ``--cpu-executor
        process`` or the model's ``INFERD_EXECUTOR`` names a process."""
        if self._settings.executor_inline:
            return True
        spec = self._backends.get(load.backend)
        choice = executor_choice(config)
        if choice == "server" and not _native(spec):
            raise InvalidArgument(
                f"model '{load.model}': parameter {EXECUTOR_PARAMETER} \"server\" is for "
                f"native backends (onnxruntime, pytorch); backend '{load.backend}' runs in "
                "executor processes")
        if choice:
            return choice == "server"
        return _native(spec) and self._settings.cpu_executor == "server"

    def _executor_for(
        self, load: LoadVersion, part: placement.Part, in_server: bool
    ) -> tuple[str, dict[str, str]]:
        """The executor ``part`` goes to, and the environment that executor starts with."""
        if self._settings.executor_inline:
            return INLINE_EXECUTOR, {}
        environment = {} if part.gpu is None else pinned_environment(part.gpu)
        if part.own:
            return isolated_executor(load.model, part.suffix), environment
        spec = self._backends.get(load.backend)
        if spec is not None and spec.isolate:
            return framework_executor(spec.name, part.gpu), environment
        if part.gpu is not None:
            return gpu_executor(part.gpu), environment
        if in_server:
            return INLINE_EXECUTOR, {}
        return min(self._cpu_processes, key=lambda n: self._load_counts.get(n, 0)), {}

    async def on_load_version(self, load: LoadVersion, envelope: Envelope) -> VersionLoaded:
        """Load ``load`` in every executor its parts go to, at once; all or nothing."""
        if self._processes.stopping:
            raise Unavailable(SHUTTING_DOWN)
        config = ModelConfig()
        config.ParseFromString(load.config)
        parts = self._parts(load, config)
        in_server = self._in_server(load, config)
        python = await self._interpreter(load, config)
        outcomes: list[tuple[str, VersionLoaded] | BaseException] = [
            RuntimeError("not run")] * len(parts)

        async def load_part(index: int, part: placement.Part) -> None:
            try:
                outcomes[index] = await self._load_part(load, config, part, python, in_server)
            except Exception as error:  # noqa: BLE001 - collected, raised below
                outcomes[index] = error

        async with anyio.create_task_group() as tasks:
            for index, part in enumerate(parts):
                tasks.start_soon(load_part, index, part)
        loaded = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
        self._loads[load.load_id] = [name for name, _ in loaded]
        failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failures or load.load_id in self._abandoned:  # failed, or its asker gave up
            self._abandoned.discard(load.load_id)
            with anyio.CancelScope(shield=True):
                await self._unload(load.load_id)
            if failures:
                raise failures[0]
        return placement.merged(config, loaded)

    async def _interpreter(self, load: LoadVersion, config: ModelConfig) -> str:
        """The interpreter of the environment a python model asks for (``EXECUTION_ENV_PATH``,
        unpacked and checked in a thread), or "" for the server's own."""
        spec = self._backends.get(load.backend)
        wanted = execution_env.requested(config, Path(load.path))
        if wanted is None or spec is None or not spec.process_per_instance:
            return ""
        if self._settings.executor_inline:
            raise InvalidArgument(f"model '{load.model}': {execution_env.PARAMETER} needs "
                                  "executor processes; the server runs with --executor-inline")
        try:
            python = await anyio.to_thread.run_sync(execution_env.interpreter, wanted)
        except InvalidArgument as error:
            raise InvalidArgument(f"model '{load.model}': {error.message}") from None
        return str(python)

    async def _load_part(
        self, load: LoadVersion, config: ModelConfig, part: placement.Part, python: str,
        in_server: bool,
    ) -> tuple[str, VersionLoaded]:
        name, environment = self._executor_for(load, part, in_server)
        if python:  # processes of another interpreter are never shared with ours
            name += "@" + hashlib.sha256(python.encode()).hexdigest()[:8]
        if name != INLINE_EXECUTOR:
            await self._processes.ensure_started(name, environment, isolated=part.own,
                                                 python=python)
        self._load_counts[name] = self._load_counts.get(name, 0) + 1
        request = replace(load, config=part.config(config), instance_count=part.instance_count,
                          first_instance=part.first_instance)
        try:
            loaded = await self.router.ask(name, request)
        except BaseException:
            self._load_counts[name] -= 1
            executor = self._processes.by_name.get(name)
            if executor is not None and executor.isolated and not self._load_counts[name]:
                with anyio.CancelScope(shield=True):
                    await self._processes.retire(executor)
            raise
        assert isinstance(loaded, VersionLoaded)
        return name, loaded

    async def on_unload_version(self, unload: UnloadVersion, envelope: Envelope
                                ) -> VersionUnloaded:
        if unload.load_id not in self._loads:
            self._abandoned.add(unload.load_id)
            return VersionUnloaded()
        return await self._unload(unload.load_id)

    async def _unload(self, load_id: int) -> VersionUnloaded:
        """Unload ``load_id`` from every executor it went to; what each gave back, added."""
        parts: list[VersionUnloaded] = []

        async def unload_from(name: str) -> None:
            parts.append(await self._unload_from(name, load_id))

        async with anyio.create_task_group() as tasks:
            for name in self._loads.pop(load_id, ()):
                tasks.start_soon(unload_from, name)
        return returned_memory.total(parts)

    async def _unload_from(self, name: str, load_id: int) -> VersionUnloaded:
        self._load_counts[name] = max(0, self._load_counts.get(name, 1) - 1)
        try:
            reply = await self.router.ask(name, UnloadVersion(load_id))
        except ExecutorCrashed:
            reply = None  # the process took the instances with it
        unloaded = reply if isinstance(reply, VersionUnloaded) else VersionUnloaded()
        executor = self._processes.by_name.get(name)
        if (executor is not None and executor.isolated and not self._load_counts[name]
                and not self._processes.stopping):
            process = executor.process
            held = returned_memory.held_by(process.pid if process is not None else None)
            await self._processes.retire(executor)
            exited = process is None or process.returncode is not None
            unloaded = returned_memory.ended(unloaded, name, held, exited)
        return unloaded


def _native(spec: BackendSpec | None) -> bool:
    return spec is not None and spec.runs_in_server
