"""Python instances that share the first instance's memory: forked from it after its
``initialize`` (the model's ``parameters { key: "INFERD_FORK_AFTER_INITIALIZE" value {
string_value: "true" } }``).

Triton gives every instance a process that imports ``model.py`` and runs ``initialize``
itself, so ``count: 4`` holds four copies of the weights (server#4975). With this option the
version's instances live in one executor process of the model's own: instance 0 is an ordinary
instance there, and instances 1 to count - 1 are ``os.fork()`` children of that process taken
right after instance 0's ``initialize``, so the pages it filled (weights, tokenizers, tables)
are shared copy-on-write until someone writes to them. Each child serves one instance: the
executor's proxy for it (``ForkedInstance``) sends it each batch over a socket pair in the
kernel wire format and relays its BLS calls to the server; its results come back the same
way. Each fork gets its own identity: the ``args`` Triton would have given its
``initialize`` (``model_instance_name``, ``model_instance_device_id``) are handed to the
model's optional ``after_fork(args)``, and its errors name it.

What a fork does not get: threads that ``initialize`` started (only the forking thread
crosses a fork; ``after_fork`` may start them again), a GPU context (so ``KIND_GPU`` is
refused), a decoupled model's response senders (refused), a decoupled BLS call
(``exec(decoupled=True)`` fails in a fork) and ``is_ready()`` (a fork is ready while its
process lives); ``request.is_cancelled()`` asks the executor over the link. A fork that dies
takes its executor process down with it, which inferd restarts and reloads, as after any
crash.
Owns the fork, the link and the proxy; what an instance does with a batch is
``backend.PythonInstance``'s.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk import CancelledRequests, Instance
from inferd.kernel.sdk.modelconfig import FORK_PARAMETER
from inferd.protocols.wire import codec as wire
from inferd.protocols.errors import (
    InferdError,
    Internal,
    InvalidArgument,
    Unsupported,
    to_failure,
)
from inferd.protocols.messages import (
    Ack,
    BatchResult,
    CancelRequests,
    Envelope,
    Failure,
    HealthStatus,
    InferBatch,
    InferRequest,
    InferResponse,
    Message,
    Shutdown,
)

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECS = 10.0
_KIND_GPU = model_config_pb2.ModelInstanceGroup.KIND_GPU
_COUNT = struct.Struct("!I")
# The executor's end of every link this process holds: a new fork closes its copies of the
# others', so that each link has one end in the executor and one in its fork, and a fork whose
# executor died reads the end of its link (no PR_SET_PDEATHSIG: it fires when the thread that
# forked ends, and that is a load thread).
_open_links: set[Connection] = set()


class Link:
    """Messages over one end of a socket pair: a frame count, then each frame."""

    def __init__(self, end: socket.socket) -> None:
        self._connection = Connection(end.detach())
        self._lock = threading.Lock()
        self._call_lock = threading.Lock()

    def send(self, body: Message) -> None:
        frames = wire.encode(Envelope(0, "", "", body))
        with self._lock:
            self._connection.send_bytes(_COUNT.pack(len(frames)))
            for frame in frames:
                self._connection.send_bytes(frame)

    def call(self, body: Message) -> Message:
        """Send ``body`` and return the answer (a fork's question to its executor, from
        whichever of its threads asks)."""
        with self._call_lock:
            self.send(body)
            return self.receive()

    def receive(self, timeout: float | None = None) -> Message:
        """The next message; ``EOFError`` when the other end closed, ``TimeoutError`` past
        ``timeout``."""
        if timeout is not None and not self._connection.poll(timeout):
            raise TimeoutError
        (count,) = _COUNT.unpack(self._connection.recv_bytes())
        frames = [self._connection.recv_bytes() for _ in range(count)]
        return wire.decode(frames).body

    def close(self) -> None:
        _open_links.discard(self._connection)
        self._connection.close()


def fork_instance(
    serve: Callable[[Link], None], name: str,
) -> tuple[int, Link]:
    """Fork this process; the child runs ``serve(link)`` and exits, never returning here.
    Returns the child's pid and the parent's end of the link, once the child said it is
    ready (its ``after_fork`` ran), or raises the error it reported."""
    parent_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child: only this thread came along
        code = 0
        try:
            for other in list(_open_links):
                other.close()
            _open_links.clear()
            parent_end.close()
            # Its collector never walks what it inherited: a walk writes to every object's
            # header, and would copy the pages of an object-heavy model (as gunicorn's
            # --preload users freeze theirs).
            gc.freeze()
            _restore_priority()
            serve(Link(child_end))
        except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
            log.exception("forked instance %s failed", name)
            code = 1
        finally:
            os._exit(code)
    child_end.close()
    link = Link(parent_end)
    _open_links.add(link._connection)
    try:
        ready = link.receive()
    except EOFError:
        _reap(pid)
        raise Internal(f"forked instance {name} (pid {pid}) exited before it was ready") from None
    if isinstance(ready, Failure):
        link.close()
        _reap(pid)
        raise InferdError.from_code(ready.code, ready.message)
    return pid, link


def _restore_priority() -> None:
    """Loads run at a low CPU priority (the executor's load worker), which a fork taken
    there inherits; a fork serves inference, so it asks for normal priority back (granted to
    root or CAP_SYS_NICE, as for the threads a load starts)."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def check_forkable(config: ModelConfig, model: str) -> None:
    """Refuse, at load, what cannot cross a fork."""
    if any(group.kind == _KIND_GPU for group in config.instance_group):
        raise InvalidArgument(
            f"model '{model}': parameter {FORK_PARAMETER} needs KIND_CPU instances: a process "
            "forked after initialize cannot use the GPU context initialize created")
    if config.model_transaction_policy.decoupled:
        raise InvalidArgument(
            f"model '{model}': parameter {FORK_PARAMETER} is not available for decoupled "
            "models: their response senders cannot cross a fork")


# ------------------------------------------------------------------ in the fork


def serve_forked(link: Link, execute: Callable[[Sequence[InferRequest]], list[Any]],
                 phases: Callable[[], tuple[int, int, int] | None],
                 close: Callable[[], None], after_fork: Callable[[], None]) -> None:
    """The fork's loop: run each batch the proxy sends with ``execute``, until ``Shutdown``
    (then ``close``, which runs ``finalize``) or until the executor is gone."""
    try:
        after_fork()
    except Exception as error:  # noqa: BLE001 - reported to the load that forked it
        link.send(to_failure(Internal(f"after_fork failed: {type(error).__name__}: {error}")))
        return
    link.send(Ack())
    while True:
        try:
            message = link.receive()
        except EOFError:
            return  # the executor went
        if isinstance(message, Shutdown):
            close()
            link.send(Ack())
            return
        if isinstance(message, InferBatch):
            results = execute(message.requests)
            link.send(BatchResult(
                tuple(to_failure(r) if isinstance(r, InferdError) else r for r in results),
                phases() or (0, 0, 0)))


def server_infer(link: Link) -> Callable[[InferRequest, float | None], InferResponse]:
    """A fork's ``infer`` (BLS ``exec()``): the request goes to the proxy, which sends it to
    the server and hands the answer back, while the batch that made it waits."""

    def infer(request: InferRequest, timeout: float | None = None) -> InferResponse:
        answer = link.call(request)
        if isinstance(answer, Failure):
            raise InferdError.from_code(answer.code, answer.message)
        if not isinstance(answer, InferResponse):
            raise Internal(f"a forked instance's BLS call was answered {type(answer).__name__}")
        return answer

    return infer


class AskedCancellations(CancelledRequests):
    """A fork's ``request.is_cancelled()``: each look asks the executor, whose batch it is
    (``CancelRequests`` naming the position, answered with a ``HealthStatus``)."""

    __slots__ = ("_link",)

    def __init__(self, link: Link) -> None:
        super().__init__()
        self._link = link

    def __contains__(self, position: object) -> bool:
        if not isinstance(position, int):
            return False
        answer = self._link.call(CancelRequests(0, (position,)))
        return isinstance(answer, HealthStatus) and answer.ok


def no_streams(request: InferRequest, timeout: float | None = None) -> Any:
    raise Unsupported("a decoupled BLS call (exec(decoupled=True)) is not available in an "
                      "instance forked after initialize (INFERD_FORK_AFTER_INITIALIZE)")


# ------------------------------------------------------------------ in the executor


class ForkedInstance(Instance):
    """The executor's side of one fork: ``execute`` sends it the batch and serves its BLS
    calls until its results come; it is ready while the fork's process lives."""

    runs_on_event_loop = False  # it waits on the fork, which may wait on the server (BLS)
    checks_readiness = True

    def __init__(self, name: str, model: str, version: int, pid: int, link: Link,
                 infer: Callable[[InferRequest, float | None], InferResponse] | None) -> None:
        self.name = name
        self.pid = pid
        self._model = model
        self._version = version
        self._link = link
        self._infer = infer
        self.phase_ns: tuple[int, int, int] | None = None
        self._closing = False
        self._exited = threading.Event()
        threading.Thread(target=self._watch, name=f"fork-{pid}", daemon=True).start()

    def _watch(self) -> None:
        """Reap the fork when it exits; one that exits before its ``close`` died."""
        _reap(self.pid)
        self._exited.set()
        if not self._closing:
            self._died()

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        try:
            self._link.send(InferBatch(self._model, self._version, 0, tuple(requests)))
            while True:
                message = self._link.receive()
                if isinstance(message, BatchResult):
                    self.phase_ns = message.compute_ns
                    return [InferdError.from_code(r.code, r.message)
                            if isinstance(r, Failure) else r for r in message.results]
                if isinstance(message, InferRequest):
                    self._link.send(self._bls(message))
                elif isinstance(message, CancelRequests):
                    cancelled = self.cancelled
                    self._link.send(HealthStatus(all(p in cancelled for p in message.positions)))
        except (EOFError, OSError):
            self._exited.wait(STOP_TIMEOUT_SECS)  # its watcher ends this process
            self._died()
            raise  # not reached: _died ends the process

    def _bls(self, request: InferRequest) -> Message:
        if self._infer is None:
            return to_failure(Internal("BLS requests need a running inferd server"))
        try:
            return self._infer(request, request.timeout_us / 1e6 or None)
        except Exception as error:  # noqa: BLE001 - the fork's BLS call gets it as its answer
            return to_failure(error)

    def _died(self) -> None:
        """The fork is gone (killed, out of memory, crashed): the executor process goes with
        it, so inferd restarts it and reloads the model, as after any crash."""
        log.critical("model '%s': forked instance %s (pid %d) died; ending this executor "
                     "process so that the model is restarted", self._model, self.name, self.pid)
        os._exit(70)

    def ready(self) -> bool:
        return not self._exited.is_set()

    def close(self) -> None:
        """The fork runs ``finalize`` and exits; past a deadline it is killed."""
        self._closing = True
        try:
            self._link.send(Shutdown())
            self._link.receive(STOP_TIMEOUT_SECS)
        except (EOFError, OSError, TimeoutError):
            log.warning("forked instance %s (pid %d) did not stop in time; killing it",
                        self.name, self.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        finally:
            self._link.close()
            self._exited.wait(STOP_TIMEOUT_SECS)
