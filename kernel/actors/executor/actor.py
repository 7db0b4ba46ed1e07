"""The executor actor: owns backend instances and runs their batches off the event loop.

One executor lives in each executor process (one per GPU, one per CPU pool, one per isolated
backend), or inline in the main process when configured. It loads a model version through its
backend (imported lazily here, never in the main process), creates the instances, warms them
up, and reports the auto-completed config back to control. Each instance gets a slot
(``inferd.kernel.actors.executor.instance_slot``) that runs ``Instance.execute`` on a worker thread
of its own, so an instance is never called concurrently while different instances run in parallel;
an instance whose batches typically take less than a thread hand-off runs on the event loop
instead, when its thread has nothing queued: for tiny models the hand-off is most of the round
trip. It also carries an instance's own requests to the server (BLS ``infer`` and
``infer_stream``, whose ``cancel()`` it passes on), runs the instances' own readiness checks
(``InstancesReadyRequest``), and keeps the CUDA shared memory the main process sends windows of
(``inferd.kernel.actors.executor.device_memory``), closing a region when told. It knows nothing of
queues, versions policy or routing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor.bls_stream import BlsStream
from inferd.kernel.actors.executor.device_memory import DeviceMemory
from inferd.kernel.actors.executor.instance_ids import (
    incarnation_of,
    new_instance_id,
    number_of,
    process_incarnation,
    stale_instance,
)
from inferd.kernel.actors.executor.instance_slot import (
    InstanceSlot,
    Outcome,
    as_reply,
    batch_result,
    execute_batch,
    execute_stream_batch,
)
from inferd.kernel.actors.executor.load_priority import BackgroundWorker
from inferd.kernel.actors.executor.memory_return import (
    Footprint,
    ProcessMemory,
    measured_load,
    unloading,
)
from inferd.kernel.actors.executor.warmup import Execution, warm_up, warmup_samples
from inferd.kernel.modelconfig.sequence_plan import client_config, execution_config
from inferd.kernel.observability.logs import LogSettings, configure_logging
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import INLINE_EXECUTOR, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk import log_context
from inferd.kernel.sdk.backends import (
    Backend,
    BackendRegistry,
    CancelledRequests,
    Instance,
    Model,
    ModelContext,
)
from inferd.protocols.errors import (
    InferdError,
    Internal,
    NotFound,
    Unavailable,
)
from inferd.protocols.messages import (
    Ack,
    ApplyLogSettings,
    BatchResult,
    CancelRemoteStream,
    CancelRequests,
    CloseDeviceRegions,
    Envelope,
    Failure,
    InferBatch,
    InferRequest,
    InferResponse,
    InstancesReady,
    InstancesReadyRequest,
    LoadVersion,
    Message,
    RemoteStreamRequest,
    Shutdown,
    StreamBatch,
    StreamParts,
    UnloadVersion,
    VersionLoaded,
    VersionUnloaded,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _LoadedVersion:
    name: str
    version: int
    model: Model
    instance_ids: tuple[int, ...]
    footprint: Footprint


class ExecutorActor(Actor):
    def __init__(
        self, router: Router, address: str, backends: BackendRegistry, options: dict[str, Any],
        device_memory: DeviceMemory | None = None, incarnation: int | None = None,
    ) -> None:
        super().__init__(router, address)
        self._specs = backends
        self._options = options
        self._backends: dict[str, Backend] = {}
        self._loads: dict[int, _LoadedVersion] = {}
        self._instances: dict[int, InstanceSlot] = {}
        # Ids unique over this name's processes: a batch for an earlier one's is refused.
        self._incarnation = process_incarnation() if incarnation is None else incarnation
        self._instance_numbers = itertools.count(1)
        self._backend_lock = threading.Lock()  # loads run in threads, possibly two at once
        self.stopped = anyio.Event()
        # Loads yield the CPU to inference, except in the server's own process: there the
        # loop that serves every frontend shares the GIL with them.
        self._background = BackgroundWorker(lower=address != INLINE_EXECUTOR)
        self._stream_tokens = itertools.count(1)
        # BLS streams waiting for their responses, by token (queues read by instance threads).
        self._bls_streams: dict[
            int, queue.Queue[tuple[InferResponse | InferdError | None, bool]]] = {}
        # The batches run off the loop, by (sender, ask id): which of their requests the
        # scheduler said were cancelled (CancelRequests), for their instance to see.
        self._cancelled: dict[tuple[str, int], CancelledRequests] = {}
        # The client CUDA regions the main process sent windows of, opened here once each.
        self.device_memory = device_memory if device_memory is not None else DeviceMemory()
        # What each load takes and each unload gives back (the server's process: its own).
        self._memory = ProcessMemory(with_children=address != INLINE_EXECUTOR)

    async def on_start(self) -> None:
        self.router.answer_here(self.address, self.run_here)

    async def on_shutdown(self, message: Shutdown, envelope: Envelope) -> Ack:
        await self.on_stop()
        self.stopped.set()
        return Ack()

    async def on_apply_log_settings(self, message: ApplyLogSettings, envelope: Envelope) -> Ack:
        """The logging extension changed the settings: this process logs by them now."""
        try:
            configure_logging(LogSettings.from_message(message), process=self.address)
        except OSError as error:
            log.error("cannot write the log file '%s': %s; keeping the previous settings",
                      message.file, error.strerror)
        return Ack()

    async def on_stop(self) -> None:
        for load_id in list(self._loads):
            await self._unload(load_id)
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()
        self._background.close()

    # ------------------------------------------------------------------ loading

    def _backend(self, name: str) -> Backend:
        with self._backend_lock:
            return self._backend_locked(name)

    def _backend_locked(self, name: str) -> Backend:
        backend = self._backends.get(name)
        if backend is None:
            spec = self._specs.get(name)
            if spec is None:
                known = ", ".join(self._specs.names()) or "none"
                raise Unavailable(
                    f"backend '{name}' is not installed in this server (installed: {known})"
                )
            try:
                backend = spec.load_class()()
            except ImportError as error:
                raise Unavailable(
                    f"backend '{name}' cannot be used on this machine: {error}"
                ) from error
            self._backends[name] = backend
        return backend

    async def on_load_version(self, message: LoadVersion, envelope: Envelope) -> VersionLoaded:
        config = ModelConfig()
        config.ParseFromString(message.config)
        context = ModelContext(
            name=message.model,
            version=message.version,
            model_dir=Path(message.path),
            # A sequence model's control and state tensors are ordinary tensors to a backend.
            config=execution_config(config),
            auto_complete=message.auto_complete,
            options={**self._options, **message.options},
            infer=self._infer_function(asyncio.get_running_loop()),
            infer_stream=self._infer_stream_function(asyncio.get_running_loop()),
        )

        footprint: list[Footprint] = []

        def load() -> tuple[Model, list[Instance], list[Execution]]:
            with log_context.bound(message.model, message.version):  # the load's lines name it
                before = self._memory.reading()
                loaded = load_model()
                footprint.append(measured_load(message.model, message.version, before,
                                               self._memory.reading()))
                return loaded

        def load_model() -> tuple[Model, list[Instance], list[Execution]]:
            started = time.perf_counter()
            model = self._backend(message.backend).load_model(context)
            instances = [model.create_instance(i) for i in range(message.instance_count)]
            samples = warmup_samples(model.config, message.version, Path(message.path))
            executions: list[Execution] = []
            if samples:
                try:
                    executions = warm_up(instances, samples, model.config)
                except BaseException:
                    for instance in instances:
                        instance.close()
                    model.unload()
                    raise
                log.info("warmed up %s version %d with %d sample(s)", message.model,
                         message.version, len(samples))
            log.info("loaded %s version %d (%d instance%s) in %.2f s", message.model,
                     message.version, len(instances), "" if len(instances) == 1 else "s",
                     time.perf_counter() - started)
            return model, instances, executions

        try:
            model, instances, executions = await self._background.run(load)
        except InferdError:
            raise
        except Exception as error:  # a backend exception is the load's reason, verbatim
            raise Internal(f"{type(error).__name__}: {error}") from error
        ids = tuple(new_instance_id(self._incarnation, next(self._instance_numbers))
                    for _ in instances)
        # In the server's own process a batch run on the loop holds back the requests that
        # would join the next batch: a model whose batches can grow runs on its threads.
        batches_grow = config.HasField("dynamic_batching") or config.HasField(
            "sequence_batching")
        loop_allowed = not (self.address == INLINE_EXECUTOR and batches_grow)
        for instance_id, instance in zip(ids, instances, strict=True):
            thread = ThreadPoolExecutor(
                1, thread_name_prefix=f"{message.model}-{number_of(instance_id)}")
            self._instances[instance_id] = InstanceSlot(instance, thread, message.load_id,
                                                        loop_allowed=loop_allowed,
                                                        device_memory=self.device_memory)
        self._loads[message.load_id] = _LoadedVersion(message.model, message.version, model, ids,
                                                      footprint[0])
        served = client_config(model.config, config)
        return VersionLoaded(served.SerializeToString(), ids, self.address,
                             warmup=tuple(executions))

    def _infer_function(
        self, loop: asyncio.AbstractEventLoop
    ) -> Callable[[InferRequest, float | None], InferResponse]:
        """``ModelContext.infer``: a request from an instance thread, sent to the scheduler
        (in the main process; from an executor process, through the uplink) on ``loop``."""

        def infer(request: InferRequest, timeout: float | None = None) -> InferResponse:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:  # it would wait forever on the loop it blocks
                raise Internal("a request to the server cannot be sent from the executor's loop")
            ask = self.router.ask(SCHEDULER, request, timeout=timeout)
            try:
                future = asyncio.run_coroutine_threadsafe(ask, loop)
            except RuntimeError as error:  # the loop is closed: the executor is going
                ask.close()
                raise Unavailable(f"the executor is shutting down: {error}") from None
            reply = future.result()
            if not isinstance(reply, InferResponse):
                raise Internal(f"the scheduler answered {type(reply).__name__} to a request")
            return reply

        return infer

    def _infer_stream_function(
        self, loop: asyncio.AbstractEventLoop
    ) -> Callable[[InferRequest, float | None], Iterator[InferResponse | InferdError]]:
        """``ModelContext.infer_stream``: the scheduler streams the responses back to this
        actor as ``StreamParts`` (``on_stream_parts``), handed to the waiting thread."""

        def infer_stream(request: InferRequest, timeout: float | None = None) -> BlsStream:
            token = next(self._stream_tokens)
            stream = BlsStream(
                timeout,
                send_cancel=partial(self._tell_from_thread, loop,
                                    CancelRemoteStream(token, self.address)),
                close=partial(self._bls_streams.pop, token, None))
            self._bls_streams[token] = stream.parts
            message = RemoteStreamRequest(request, token, self.address)
            try:
                loop.call_soon_threadsafe(self.router.tell, SCHEDULER, message)
            except RuntimeError as error:  # the loop is closed: the executor is going
                del self._bls_streams[token]
                raise Unavailable(f"the executor is shutting down: {error}") from None
            return stream

        return infer_stream

    def _tell_from_thread(self, loop: asyncio.AbstractEventLoop, message: CancelRemoteStream
                          ) -> None:
        try:
            loop.call_soon_threadsafe(self.router.tell, SCHEDULER, message)
        except RuntimeError:
            pass  # the loop is closed: the executor, and its streams, are going

    async def on_instances_ready_request(self, message: InstancesReadyRequest,
                                         envelope: Envelope) -> InstancesReady:
        """A model readiness check: each of these instances that has a check of its own
        runs it, at once, each on a thread (not the instance's: a long batch must not hold
        the check back, as Triton's stub answers while ``execute`` runs)."""
        checked = [slot.instance for slot in map(self._instances.get, message.instance_ids)
                   if slot is not None and slot.instance.checks_readiness]
        missing = [i for i in message.instance_ids if i not in self._instances]
        if missing:
            return InstancesReady(False, True, f"instance {missing[0]} is not loaded here")
        if not checked:
            return InstancesReady(True, False)
        reasons: list[str] = []

        def check(instance: Instance) -> None:
            try:
                if not instance.ready():
                    reasons.append("an instance's readiness check said it is not ready")
            except Exception as error:  # noqa: BLE001 - a failing check means not ready
                reasons.append(str(error) or type(error).__name__)

        async with anyio.create_task_group() as tasks:
            for instance in checked:
                tasks.start_soon(partial(anyio.to_thread.run_sync, check, instance,
                                         abandon_on_cancel=True))
        return InstancesReady(not reasons, True, "; ".join(reasons))

    async def on_stream_parts(self, message: StreamParts, envelope: Envelope) -> None:
        """Responses of this executor's BLS streams (``infer_stream``)."""
        for token, result, final in zip(message.tokens, message.results, message.finals,
                                        strict=True):
            parts = self._bls_streams.get(token)
            if parts is not None:
                answer = (InferdError.from_code(result.code, result.message)
                          if isinstance(result, Failure) else result)
                parts.put((answer, final))

    async def on_close_device_regions(self, message: CloseDeviceRegions,
                                      envelope: Envelope) -> None:
        """The main process let go of these CUDA regions: their handles close here once the
        batches still using them are done."""
        self.device_memory.close(message.regions)

    async def on_unload_version(self, message: UnloadVersion, envelope: Envelope
                                ) -> VersionUnloaded:
        return await self._unload(message.load_id)

    async def _unload(self, load_id: int) -> VersionUnloaded:
        """Close the load's instances and model, then give what they freed back to the system
        (``memory_return``); the reply says what the load took and what came back."""
        loaded = self._loads.pop(load_id, None)
        if loaded is None:
            return VersionUnloaded()
        before = await anyio.to_thread.run_sync(self._memory.reading)
        await self._close_instances(loaded.instance_ids)
        await anyio.to_thread.run_sync(loaded.model.unload)
        del loaded.model  # nothing here holds the model past its unload
        return await anyio.to_thread.run_sync(unloading, loaded.name, loaded.version,
                                              loaded.footprint, before, self._memory)

    async def _close_instances(self, instance_ids: tuple[int, ...]) -> None:
        for instance_id in instance_ids:
            slot = self._instances.pop(instance_id)
            await slot.run(slot.instance.close)  # queued behind the batches it still has
            slot.thread.shutdown(wait=False)

    # ------------------------------------------------------------------ inference

    def accept(self, envelope: Envelope) -> None:
        """A batch for an instance that runs on the loop is run right here, its reply sent
        before the next message is read: no task, no hand-off. A batch run off the loop gets
        its cancellation record, which ``CancelRequests`` fills while it runs. Everything
        else, as any actor."""
        batch = envelope.body
        if type(batch) is InferBatch:
            reply = self.run_here(batch)
            if reply is not None:
                self.router.reply(envelope, reply)
                return
            self._cancelled[(envelope.src, envelope.msg_id)] = CancelledRequests()
        elif type(batch) is StreamBatch:  # known before its task first runs
            self._cancelled[(envelope.src, envelope.msg_id)] = CancelledRequests()
        elif type(batch) is CancelRequests:
            cancelled = self._cancelled.get((envelope.src, batch.batch))
            if cancelled is not None:
                cancelled.add(batch.positions)
            return
        super().accept(envelope)

    def run_here(self, batch: Message) -> BatchResult | None:
        """``batch``'s reply when it is an ``InferBatch`` for an instance that runs on the loop
        now (run right here), else None. The router calls it for a scheduler of this process
        (``Router.run_here``), so such a batch needs no envelope, id or pending ask."""
        if type(batch) is not InferBatch:
            return None
        slot = self._instances.get(batch.instance)
        if slot is None or not slot.runs_inline():
            return None
        return batch_result(batch, slot, slot.run_inline(batch))

    def _cancellation(self, key: tuple[str, int]) -> CancelledRequests:
        """The cancellation record of the batch ``key`` names (``accept`` made it)."""
        cancelled = self._cancelled.get(key)
        if cancelled is None:  # a batch handed to the handler directly, as in tests
            cancelled = self._cancelled[key] = CancelledRequests()
        return cancelled

    async def on_stream_batch(self, batch: StreamBatch, envelope: Envelope) -> BatchResult:
        """A decoupled model's batch: each response goes to the scheduler as it is sent (from
        the instance's thread, or later from any thread), in order; the reply says the
        instance is free."""
        key = (envelope.src, envelope.msg_id)
        cancelled = self._cancellation(key)
        slot = self._instances.get(batch.instance)
        if slot is None:
            self._cancelled.pop(key, None)
            raise self._not_here(batch.instance, batch.model)
        loop = asyncio.get_running_loop()
        finished: set[int] = set()
        returned = False

        def emit(index: int, result: InferResponse | InferdError | None, final: bool) -> None:
            if final:
                finished.add(index)
            reply = as_reply(result) if result is not None else None
            parts = StreamParts((batch.tokens[index],), (reply,), (final,))
            try:
                loop.call_soon_threadsafe(self.router.tell, SCHEDULER, parts)
                if returned and len(finished) == len(batch.requests):
                    loop.call_soon_threadsafe(self._cancelled.pop, key, None)
            except RuntimeError:  # the loop is closed: the executor is going
                pass

        started = time.perf_counter_ns()
        try:
            await slot.run(lambda: execute_stream_batch(slot, batch, emit, cancelled))
        except Exception as error:  # noqa: BLE001 - a backend bug fails the batch's requests
            log.error("instance %d of %s failed", batch.instance, batch.model, exc_info=error)
            failure = Internal(f"{type(error).__name__}: {error}")
            for index in range(len(batch.requests)):
                if index not in finished:
                    emit(index, failure, True)
        returned = True
        if len(finished) == len(batch.requests):  # else its senders may still be asked
            self._cancelled.pop(key, None)
        elapsed = time.perf_counter_ns() - started
        slot.observe(elapsed)
        return BatchResult((), (0, elapsed, 0))

    def _not_here(self, instance: int, model: str) -> InferdError:
        """Why a batch for ``instance`` cannot run: an earlier process of this executor
        loaded it (a retryable ``ExecutorCrashed``), or no process of it did."""
        if incarnation_of(instance) != self._incarnation:
            return stale_instance(instance, model, self.address)
        return NotFound(f"instance {instance} of '{model}' is not loaded here")

    async def on_infer_batch(self, batch: InferBatch, envelope: Envelope) -> BatchResult:
        key = (envelope.src, envelope.msg_id)
        cancelled = self._cancellation(key)
        slot = self._instances.get(batch.instance)
        if slot is None:
            self._cancelled.pop(key, None)
            raise self._not_here(batch.instance, batch.model)
        try:
            outcome: Outcome | BaseException = await slot.run(
                lambda: execute_batch(slot, batch, cancelled))
        except Exception as error:  # noqa: BLE001 - execute_batch catches what execute raises
            outcome = error
        finally:
            self._cancelled.pop(key, None)
        return batch_result(batch, slot, outcome)
