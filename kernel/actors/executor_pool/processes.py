"""The executor processes of a server: starting each, watching it, restarting it, stopping it.

Owns one record per executor process (``ExecutorProcess``: the environment and interpreter it
starts with, whether it is one model's own, its crash and restart counts, the log settings it
runs with) and the process itself: the command line of ``inferd.kernel.actors.executor.main`` (or
of the same module under another environment's interpreter), readiness at its hello, restart
with back-off when it dies (the process link forgets it, every ask waiting on it fails with
``ExecutorCrashed``, control hears ``ExecutorLost`` and, at the hello of the new process, that
it is back), the log settings every running process is sent and every new one starts with,
and an orderly stop (``Shutdown``, then a kill past a deadline). The executor pool actor
decides which processes exist and what loads where; this module never chooses a placement,
and never touches a model or a tensor.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from inferd.kernel.actors.executor import execution_env
from inferd.kernel.observability.logs import LogSettings, console_descriptor
from inferd.kernel.runtime.addresses import CONTROL
from inferd.kernel.runtime.process_link import ProcessLink
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import ExecutorCrashed, InferdError
from inferd.protocols.messages import ExecutorHello, ExecutorLost, Shutdown

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECS = 10.0
LOG_SETTINGS_TIMEOUT_SECS = 10.0
RESTART_BACKOFF_SECS = (0.5, 1.0, 2.0, 5.0, 10.0)

Spawn = Callable[..., object]
"""``spawn(function, *args)``: run ``function(*args)`` in a task the pool actor owns."""


@dataclass(slots=True)
class ExecutorProcess:
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


class ExecutorProcesses:
    """The pool's processes, by name. ``forget_loads(name)`` is called when the process
    ``name`` dies, before control hears of it: what lived there went with it."""

    def __init__(
        self, router: Router, hub_endpoint: str, options: dict[str, Any], logs: LogSettings,
        link: ProcessLink | None, *, spawn: Spawn, forget_loads: Callable[[str], None],
    ) -> None:
        self._router = router
        self._hub = hub_endpoint
        self._options = options
        self._link = link
        self._spawn = spawn
        self._forget_loads = forget_loads
        self.by_name: dict[str, ExecutorProcess] = {}
        self.logs = logs  # the settings every process runs with, and new ones start with
        self.stopping = False

    async def ensure_started(
        self, name: str, environment: dict[str, str], *, isolated: bool = False,
        python: str = "",
    ) -> None:
        """Start ``name`` unless it runs, and wait for its hello."""
        executor = self.by_name.get(name)
        if executor is None:
            executor = self.by_name[name] = ExecutorProcess(
                name, environment, isolated=isolated, python=python)
            await self._start(executor)
        elif executor.retired:
            if executor.process is not None:
                await executor.process.wait()  # still stopping
            executor.retired = False
            executor.crashes = 0
            executor.started_once = False  # a fresh process: nothing of it to reload
            await self._start(executor)
        await executor.ready.wait()

    async def _start(self, executor: ExecutorProcess) -> None:
        # -P: the server's working directory is not put on the executor's sys.path, so a
        # folder there named like a plugin's package (a plugin author's project folder)
        # cannot shadow the installed plugin as an empty namespace package.
        start = (execution_env.command(Path(executor.python)) if executor.python
                 else [sys.executable, "-P", "-m", "inferd.kernel.actors.executor.main"])
        command = [
            *start,
            "--name", executor.name, "--hub", self._hub,
            "--options", json.dumps(self._options),
            "--parent-pid", str(os.getpid()),
            *self.logs.as_arguments(),
        ]
        if executor.ready.is_set():
            # A fresh event only once the last one fired: a load waiting on an unset one (its
            # executor crashed, or is restarting) must wake at this process's hello, not hang
            # on an event no process will ever set.
            executor.ready = anyio.Event()
        executor.logs = self.logs
        # The console, not a log file: the process opens --log-file itself, so it can follow
        # a change of file later.
        executor.process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=None, stderr=console_descriptor(),
            env={**os.environ, **executor.environment}, start_new_session=True,
        )
        log.info("started %s (pid %d)", executor.name, executor.process.pid)
        self._spawn(self._watch, executor, executor.process)

    async def _watch(self, executor: ExecutorProcess, process: anyio.abc.Process) -> None:
        code = await process.wait()
        if self.stopping or executor.retired:
            return
        reason = f"executor process {executor.name} (pid {process.pid}) exited with code {code}"
        log.error("%s; restarting it", reason)
        if self._link is not None:
            self._link.forget(executor.name, reason)
        self._router.fail_pending_to(executor.name, ExecutorCrashed(reason))
        self._forget_loads(executor.name)
        self._router.tell(CONTROL, ExecutorLost(executor.name, reason))
        executor.crashes += 1
        executor.restarts += 1
        backoff = RESTART_BACKOFF_SECS[min(executor.crashes, len(RESTART_BACKOFF_SECS)) - 1]
        await anyio.sleep(backoff)
        # Its model was unloaded meanwhile, or unloaded and loaded again, which started a
        # process already: a second one under the same name would take its messages.
        if executor.retired or self.stopping or executor.process is not process:
            return
        await self._start(executor)

    def hello(self, hello: ExecutorHello) -> None:
        """A process says it serves: loads waiting on it go on, it gets the log settings that
        changed while it started, and after a restart control reloads its models."""
        executor = self.by_name.get(hello.name)
        if executor is None:
            log.warning("hello from unknown executor %s ignored", hello.name)
            return
        log.info("%s ready (pid %d, backends: %s)", hello.name, hello.pid,
                 ", ".join(hello.backends) or "none")
        executor.ready.set()
        if executor.logs != self.logs:  # settings changed while it was starting
            self._spawn(self._send_log_settings, executor)
        if executor.started_once:
            self._router.tell(CONTROL, hello)  # a restart: control reloads its models
        executor.started_once = True

    # ------------------------------------------------------------------ log settings

    async def apply_logs(self, settings: LogSettings) -> None:
        """Make ``settings`` every process's: sent to each running one, given to new ones."""
        self.logs = settings
        async with anyio.create_task_group() as tasks:
            for executor in self.by_name.values():
                running = executor.process is not None and executor.process.returncode is None
                if running and executor.ready.is_set() and not executor.retired:
                    tasks.start_soon(self._send_log_settings, executor)

    async def _send_log_settings(self, executor: ExecutorProcess) -> None:
        settings = self.logs
        try:
            with anyio.fail_after(LOG_SETTINGS_TIMEOUT_SECS):
                await self._router.ask(executor.name, settings.as_message())
            executor.logs = settings
        except (InferdError, TimeoutError) as error:
            log.warning("%s did not take the new log settings: %s", executor.name, error)

    # ------------------------------------------------------------------ stopping

    async def retire(self, executor: ExecutorProcess) -> None:
        """Stop an isolated executor whose model has no load left in it."""
        executor.retired = True
        log.info("stopping %s: its model is unloaded", executor.name)
        await self.stop(executor)

    async def stop_all(self) -> None:
        """Stop every process at once: each unloads its models, then exits."""
        self.stopping = True
        async with anyio.create_task_group() as tasks:
            for executor in self.by_name.values():
                tasks.start_soon(self.stop, executor)

    def kill_all(self) -> None:
        """Kill what still runs (start-up failed or a stop timed out)."""
        self.stopping = True
        for executor in self.by_name.values():
            if executor.process is not None and executor.process.returncode is None:
                executor.process.kill()

    async def stop(self, executor: ExecutorProcess) -> None:
        process = executor.process
        if process is None or process.returncode is not None:
            return
        with anyio.move_on_after(STOP_TIMEOUT_SECS):
            try:
                await self._router.ask(executor.name, Shutdown())
            except InferdError as error:
                log.warning("%s did not stop cleanly: %s", executor.name, error.message)
            await process.wait()
            return
        log.warning("%s did not stop in %.0f s; killing it", executor.name, STOP_TIMEOUT_SECS)
        process.kill()
        await process.wait()
