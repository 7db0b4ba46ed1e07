"""The executor actor: owns backend instances and runs their batches off the event loop.

One executor lives in each executor process (one per GPU, one per CPU pool, one per isolated
backend), or inline in the main process when configured. It loads a model version through its
backend (imported lazily, never in the main process; the load's steps are
``inferd.kernel.actors.executor.version_load``), creates the instances, warms them up, and
reports the auto-completed config back to control. Each instance gets a slot
(``inferd.kernel.actors.executor.instance_slot``) that runs ``Instance.execute`` on a worker thread
of its own, so an instance is never called concurrently while different instances run in parallel;
an instance whose batches typically take less than a thread hand-off runs on the event loop
instead, when its thread has nothing queued: for tiny models the hand-off is most of the round
trip. It also carries an instance's own requests to the server (BLS ``infer`` and
``infer_stream``, whose ``cancel()`` it passes on:
``inferd.kernel.actors.executor.bls_requests``), runs the instances' own readiness checks
(``InstancesReadyRequest``), and keeps the CUDA shared memory the main process sends windows of
(``inferd.kernel.actors.executor.device_memory``), closing a region when told. It knows nothing of
queues, versions policy or routing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor.bls_requests import BlsRequests
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
from inferd.kernel.actors.executor.memory_return import ProcessMemory, unloading
from inferd.kernel.actors.executor.version_load import Backends, LoadedVersion, load_version
from inferd.kernel.modelconfig.sequence_plan import client_config, execution_config
from inferd.kernel.observability.logs import LogSettings, configure_logging
from inferd.kernel.runtime.actor import Actor
from inferd.kernel.runtime.addresses import INLINE_EXECUTOR, SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.backends import (
    BackendRegistry,
    CancelledRequests,
    Instance,
    ModelContext,
)
from inferd.protocols.errors import (
    InferdError,
    Internal,
    NotFound,
)
from inferd.protocols.messages import (
    Ack,
    ApplyLogSettings,
    BatchResult,
    CancelRequests,
    CloseDeviceRegions,
    Envelope,
    InferBatch,
    InferResponse,
    InstancesReady,
    InstancesReadyRequest,
    LoadVersion,
    Message,
    Shutdown,
    StreamBatch,
    StreamParts,
    UnloadVersion,
    VersionLoaded,
    VersionUnloaded,
)

log = logging.getLogger(__name__)


class ExecutorActor(Actor):
    def __init__(
        self, router: Router, address: str, backends: BackendRegistry, options: dict[str, Any],
        device_memory: DeviceMemory | None = None, incarnation: int | None = None,
    ) -> None:
        super().__init__(router, address)
        self._backends = Backends(backends)
        self._options = options
        self._loads: dict[int, LoadedVersion] = {}
        self._instances: dict[int, InstanceSlot] = {}
        # Ids unique over this name's processes: a batch for an earlier one's is refused.
        self._incarnation = process_incarnation() if incarnation is None else incarnation
        self._instance_numbers = itertools.count(1)
        self.stopped = anyio.Event()
        # Loads yield the CPU to inference, except in the server's own process: there the
        # loop that serves every frontend shares the GIL with them.
        self._background = BackgroundWorker(lower=address != INLINE_EXECUTOR)
        self._bls = BlsRequests(router, address)
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
        self._backends.close()
        self._background.close()

    # ------------------------------------------------------------------ loading

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
            infer=self._bls.infer_function(asyncio.get_running_loop()),
            infer_stream=self._bls.infer_stream_function(asyncio.get_running_loop()),
        )
        try:
            loaded = await self._background.run(
                partial(load_version, self._backends, message, context, self._memory))
        except InferdError:
            raise
        except Exception as error:  # a backend exception is the load's reason, verbatim
            raise Internal(f"{type(error).__name__}: {error}") from error
        ids = tuple(new_instance_id(self._incarnation, next(self._instance_numbers))
                    for _ in loaded.instances)
        # In the server's own process a batch run on the loop holds back the requests that
        # would join the next batch: a model whose batches can grow runs on its threads.
        batches_grow = config.HasField("dynamic_batching") or config.HasField(
            "sequence_batching")
        loop_allowed = not (self.address == INLINE_EXECUTOR and batches_grow)
        for instance_id, instance in zip(ids, loaded.instances, strict=True):
            thread = ThreadPoolExecutor(
                1, thread_name_prefix=f"{message.model}-{number_of(instance_id)}")
            self._instances[instance_id] = InstanceSlot(instance, thread, message.load_id,
                                                        loop_allowed=loop_allowed,
                                                        device_memory=self.device_memory)
        self._loads[message.load_id] = LoadedVersion(message.model, message.version,
                                                     loaded.model, ids, loaded.footprint)
        served = client_config(loaded.model.config, config)
        return VersionLoaded(served.SerializeToString(), ids, self.address,
                             warmup=tuple(loaded.executions))

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
        self._bls.deliver(message)

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
