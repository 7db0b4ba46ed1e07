"""The executor pool actor: starts, places work on, watches and restarts executor processes.

It owns which executors exist (CPU pool, one per GPU, one per isolated backend, one per model
whose config asks for a process of its own (``INFERD_EXECUTOR: "isolated"``, stopped when the
model is unloaded), or one inline in the main process) and which load lives on which
executor. Control loads and unloads through it; the scheduler sends batches straight to the
executor addresses it reports. When a process dies, every ask waiting on it fails with
``ExecutorCrashed``, control is told so it can mark and later reload the models that lived
there, and that process alone is started again with back-off. It also owns the server's
current log settings (Triton's logging extension): an update is applied in the main process,
then sent to every running executor process, and every process started later starts with it.
It never touches a model or a tensor itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import anyio.abc
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel import execution_env, placement
from inferd.kernel.actor import Actor
from inferd.kernel.actors.executor import ExecutorActor
from inferd.kernel.addresses import (
    CONTROL,
    CPU_EXECUTOR_PREFIX,
    EXECUTORS,
    INLINE_EXECUTOR,
    cpu_executor,
    framework_executor,
    gpu_executor,
    isolated_executor,
)
from inferd.kernel.backend import BackendRegistry
from inferd.kernel.devices import pinned_environment
from inferd.kernel.logs import LogSettings, as_reply, configure_logging, console_descriptor, updated
from inferd.kernel.process_metrics import process_usage
from inferd.kernel.process_link import ProcessLink
from inferd.kernel.router import Router
from inferd.kernel.settings import Settings
from inferd.protocols.errors import (
    SHUTTING_DOWN,
    ExecutorCrashed,
    InferdError,
    InvalidArgument,
    Unavailable,
    Unsupported,
)
from inferd.protocols.logging_api import LOG_FILE_REFUSED
from inferd.protocols.messages import (
    Ack,
    Envelope,
    ExecutorHello,
    ExecutorLost,
    LoadVersion,
    LogSettingsReply,
    LogSettingsRequest,
    Metrics,
    MetricsRequest,
    Shutdown,
    UnloadVersion,
    VersionLoaded,
)

log = logging.getLogger(__name__)

HELLO_TIMEOUT_SECS = 120.0
STOP_TIMEOUT_SECS = 10.0
LOG_SETTINGS_TIMEOUT_SECS = 10.0
RESTART_BACKOFF_SECS = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(slots=True)
class _Executor:
    name: str
    environment: dict[str, str]
    process: anyio.abc.Process | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    crashes: int = 0
    restarts: int = 0  # every death that was restarted (crashes resets; a metric never does)
    started_once: bool = False
    isolated: bool = False  # one model's own: stopped when that model's last load goes
    retired: bool = False  # stopped on purpose: not restarted until a load needs it again
    python: str = ""  # another environment's interpreter (EXECUTION_ENV_PATH); "" is ours
    logs: LogSettings | None = None  # the log settings it was started with or last sent


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
        self._hub = hub_endpoint
        self._link = link
        self._executors: dict[str, _Executor] = {}
        self._load_counts: dict[str, int] = {}
        self._loads: dict[int, list[str]] = {}  # load id -> the executors of its parts
        self._abandoned: set[int] = set()
        self._stopping = False
        self._logs = settings.logs
        self._log_update = anyio.Lock()  # updates reach every process in the order they came
        self._options = {
            "intra_op_threads": settings.intra_op_threads,
            "link_shm_threshold": settings.executor_shm_threshold,
            "link_shm_capacity": settings.executor_shm_capacity,
            "backend_config": [list(setting) for setting in settings.backend_config],
        }

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tasks:
            await tasks.start(super().run)
            if self._settings.executor_inline:
                inline = ExecutorActor(self.router, INLINE_EXECUTOR, self._backends, self._options)
                await tasks.start(inline.run)
            else:
                names = [cpu_executor(i) for i in range(max(1, self._settings.cpu_executors))]
                with anyio.fail_after(HELLO_TIMEOUT_SECS):
                    for name in names:
                        await self._ensure_started(name, {})
            task_status.started()

    async def on_shutdown(self, message: Shutdown, envelope: Envelope) -> Ack:
        """Stop every executor in order: it unloads its models, then exits."""
        self._stopping = True
        async with anyio.create_task_group() as tasks:
            for executor in self._executors.values():
                tasks.start_soon(self._stop_process, executor)
        return Ack()

    async def on_stop(self) -> None:
        self._stopping = True
        for executor in self._executors.values():
            if executor.process is not None and executor.process.returncode is None:
                executor.process.kill()  # start-up failed or shutdown timed out

    async def _stop_process(self, executor: _Executor) -> None:
        process = executor.process
        if process is None or process.returncode is not None:
            return
        with anyio.move_on_after(STOP_TIMEOUT_SECS):
            try:
                await self.router.ask(executor.name, Shutdown())
            except InferdError as error:
                log.warning("%s did not stop cleanly: %s", executor.name, error.message)
            await process.wait()
            return
        log.warning("%s did not stop in %.0f s; killing it", executor.name, STOP_TIMEOUT_SECS)
        process.kill()
        await process.wait()

    # ------------------------------------------------------------------ processes

    async def _ensure_started(
        self, name: str, environment: dict[str, str], *, isolated: bool = False,
        python: str = "",
    ) -> None:
        executor = self._executors.get(name)
        if executor is None:
            executor = self._executors[name] = _Executor(
                name, environment, isolated=isolated, python=python)
            self._load_counts.setdefault(name, 0)
            await self._spawn(executor)
        elif executor.retired:
            if executor.process is not None:
                await executor.process.wait()  # still stopping
            executor.retired = False
            executor.crashes = 0
            executor.started_once = False  # a fresh process: nothing of it to reload
            await self._spawn(executor)
        await executor.ready.wait()

    async def _retire(self, executor: _Executor) -> None:
        """Stop an isolated executor whose model has no load left in it."""
        executor.retired = True
        log.info("stopping %s: its model is unloaded", executor.name)
        await self._stop_process(executor)

    async def _spawn(self, executor: _Executor) -> None:
        start = (execution_env.command(Path(executor.python)) if executor.python
                 else [sys.executable, "-m", "inferd.kernel.executor_process"])
        command = [
            *start,
            "--name", executor.name, "--hub", self._hub,
            "--options", json.dumps(self._options),
            "--parent-pid", str(os.getpid()),
            *self._logs.as_arguments(),
        ]
        if executor.ready.is_set():
            # A fresh event only once the last one fired: a load waiting on an unset one (its
            # executor crashed, or is restarting) must wake at this process's hello, not hang
            # on an event no process will ever set.
            executor.ready = anyio.Event()
        executor.logs = self._logs
        # The console, not a log file: the process opens --log-file itself, so it can follow
        # a change of file later.
        executor.process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=None, stderr=console_descriptor(),
            env={**os.environ, **executor.environment}, start_new_session=True,
        )
        log.info("started %s (pid %d)", executor.name, executor.process.pid)
        self.spawn(self._watch, executor, executor.process)

    async def _watch(self, executor: _Executor, process: anyio.abc.Process) -> None:
        code = await process.wait()
        if self._stopping or executor.retired:
            return
        reason = f"executor process {executor.name} (pid {process.pid}) exited with code {code}"
        log.error("%s; restarting it", reason)
        if self._link is not None:
            self._link.forget(executor.name, reason)
        self.router.fail_pending_to(executor.name, ExecutorCrashed(reason))
        for names in self._loads.values():  # what lived there is gone with it
            while executor.name in names:
                names.remove(executor.name)
        self._load_counts[executor.name] = 0
        self.router.tell(CONTROL, ExecutorLost(executor.name, reason))
        executor.crashes += 1
        executor.restarts += 1
        backoff = RESTART_BACKOFF_SECS[min(executor.crashes, len(RESTART_BACKOFF_SECS)) - 1]
        await anyio.sleep(backoff)
        # Its model was unloaded meanwhile, or unloaded and loaded again, which started a
        # process already: a second one under the same name would take its messages.
        if executor.retired or self._stopping or executor.process is not process:
            return
        await self._spawn(executor)

    async def on_metrics_request(self, message: MetricsRequest, envelope: Envelope) -> Metrics:
        """Each running executor process's CPU seconds and resident memory, and each
        executor's restart count (inferd's ``inferd_executor_*`` metrics)."""
        samples: list[tuple[str, dict[str, str], float]] = []
        if self._settings.executor_inline:
            running = [(INLINE_EXECUTOR, os.getpid(), 0)]
        else:
            running = [(e.name, e.process.pid if e.process is not None
                        and e.process.returncode is None else 0, e.restarts)
                       for e in self._executors.values()]
        for name, pid, restarts in sorted(running):
            labels = {"executor": name}
            usage = process_usage(pid) if pid else None
            if usage is not None:
                samples += [("inferd_executor_cpu_seconds_total", labels, usage[0]),
                            ("inferd_executor_resident_memory_bytes", labels, usage[1])]
            samples.append(("inferd_executor_restarts_total", labels, restarts))
        return Metrics(tuple(samples))

    async def on_executor_hello(self, hello: ExecutorHello, envelope: Envelope) -> None:
        executor = self._executors.get(hello.name)
        if executor is None:
            log.warning("hello from unknown executor %s ignored", hello.name)
            return
        log.info("%s ready (pid %d, backends: %s)", hello.name, hello.pid,
                 ", ".join(hello.backends) or "none")
        executor.ready.set()
        if executor.logs != self._logs:  # settings changed while it was starting
            self.spawn(self._send_log_settings, executor)
        if executor.started_once:
            self.router.tell(CONTROL, hello)  # a restart: control reloads its models
        executor.started_once = True

    # ------------------------------------------------------------------ log settings

    async def on_log_settings_request(
        self, request: LogSettingsRequest, envelope: Envelope
    ) -> LogSettingsReply:
        """Triton's logging extension: the settings after ``request.updates``, applied in
        every process, or an error and nothing changed."""
        if request.updates:
            async with self._log_update:
                await self._update_logs(request.updates)
        return as_reply(self._logs)

    async def _update_logs(self, updates: dict[str, bool | int | str]) -> None:
        if "log_file" in updates and not self._settings.log_file_updates:
            raise Unsupported(LOG_FILE_REFUSED)
        new = updated(self._logs, updates)
        if new == self._logs:
            return
        try:
            configure_logging(new)  # checks the log file opens before anything changes
        except OSError as error:
            raise InvalidArgument(
                f"cannot write the log file '{new.file}': {error.strerror}") from None
        self._logs = new
        log.info("log settings are now %s", new)
        async with anyio.create_task_group() as tasks:
            for executor in self._executors.values():
                running = executor.process is not None and executor.process.returncode is None
                if running and executor.ready.is_set() and not executor.retired:
                    tasks.start_soon(self._send_log_settings, executor)

    async def _send_log_settings(self, executor: _Executor) -> None:
        settings = self._logs
        try:
            with anyio.fail_after(LOG_SETTINGS_TIMEOUT_SECS):
                await self.router.ask(executor.name, settings.as_message())
            executor.logs = settings
        except (InferdError, TimeoutError) as error:
            log.warning("%s did not take the new log settings: %s", executor.name, error)

    # ------------------------------------------------------------------ placement

    def _parts(self, load: LoadVersion, config: ModelConfig) -> list[placement.Part]:
        if self._settings.executor_inline:
            return [placement.whole(config)]
        spec = self._backends.get(load.backend)
        per_instance = spec is not None and spec.process_per_instance
        return placement.split(config, isolated=load.isolated, per_instance=per_instance)

    def _executor_for(self, load: LoadVersion, part: placement.Part) -> tuple[str, dict[str, str]]:
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
        cpu = [n for n in self._executors if n.startswith(CPU_EXECUTOR_PREFIX)]
        return min(cpu, key=lambda n: self._load_counts.get(n, 0)), {}

    async def on_load_version(self, load: LoadVersion, envelope: Envelope) -> VersionLoaded:
        """Load ``load`` in every executor its parts go to, at once; all or nothing."""
        if self._stopping:
            raise Unavailable(SHUTTING_DOWN)
        config = ModelConfig()
        config.ParseFromString(load.config)
        parts = self._parts(load, config)
        python = await self._interpreter(load, config)
        outcomes: list[tuple[str, VersionLoaded] | BaseException] = [
            RuntimeError("not run")] * len(parts)

        async def load_part(index: int, part: placement.Part) -> None:
            try:
                outcomes[index] = await self._load_part(load, config, part, python)
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
        return _merged(config, loaded)

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
        self, load: LoadVersion, config: ModelConfig, part: placement.Part, python: str
    ) -> tuple[str, VersionLoaded]:
        name, environment = self._executor_for(load, part)
        if python:  # processes of another interpreter are never shared with ours
            name += "@" + hashlib.sha256(python.encode()).hexdigest()[:8]
        if name != INLINE_EXECUTOR:
            await self._ensure_started(name, environment, isolated=part.own, python=python)
        self._load_counts[name] = self._load_counts.get(name, 0) + 1
        request = replace(load, config=part.config(config), instance_count=part.instance_count)
        try:
            loaded = await self.router.ask(name, request)
        except BaseException:
            self._load_counts[name] -= 1
            executor = self._executors.get(name)
            if executor is not None and executor.isolated and not self._load_counts[name]:
                with anyio.CancelScope(shield=True):
                    await self._retire(executor)
            raise
        assert isinstance(loaded, VersionLoaded)
        return name, loaded

    async def on_unload_version(self, unload: UnloadVersion, envelope: Envelope) -> Ack:
        if unload.load_id not in self._loads:
            self._abandoned.add(unload.load_id)
            return Ack()
        await self._unload(unload.load_id)
        return Ack()

    async def _unload(self, load_id: int) -> None:
        async with anyio.create_task_group() as tasks:
            for name in self._loads.pop(load_id, ()):
                tasks.start_soon(self._unload_from, name, load_id)

    async def _unload_from(self, name: str, load_id: int) -> None:
        self._load_counts[name] = max(0, self._load_counts.get(name, 1) - 1)
        try:
            await self.router.ask(name, UnloadVersion(load_id))
        except ExecutorCrashed:
            pass  # the process took the instances with it
        executor = self._executors.get(name)
        if (executor is not None and executor.isolated and not self._load_counts[name]
                and not self._stopping):
            await self._retire(executor)


def _merged(config: ModelConfig, loaded: list[tuple[str, VersionLoaded]]) -> VersionLoaded:
    """One answer for a load split over executors: the first part's completed config (auto-
    complete fills the same in every part) with the version's own instance groups again,
    and every instance, as (executor, instance id)."""
    completed = ModelConfig()
    completed.ParseFromString(loaded[0][1].config)
    del completed.instance_group[:]
    completed.instance_group.extend(config.instance_group)
    instances = tuple((name, i) for name, part in loaded for i in part.instance_ids)
    return VersionLoaded(completed.SerializeToString(), tuple(i for _, i in instances),
                         loaded[0][0], instances)
