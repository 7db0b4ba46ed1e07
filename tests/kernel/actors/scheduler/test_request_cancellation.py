"""Request cancellation in the scheduler, without sockets: a request whose asker goes away
leaves its version's queue (or its sequence's) at once and never reaches an instance, counted
as a CANCELED failure, and the queue's accounting (pending count, queue size limit, response
order, sequence slots) stays right; one already in a batch is named to its executor
(``CancelRequests``) while the batch completes for the others; a decoupled request's stream
abandoned by its reader does the same; an ensemble request cancelled starts no further step;
the python backend shows it as ``request.is_cancelled()``."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

import anyio
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.queue_policy import QueuePolicy
from inferd.kernel.actors.scheduler.request_validation import ModelSignature
from inferd.kernel.actors.scheduler.requests import Queued, Slot
from inferd.kernel.actors.scheduler.sequence_batcher import SequenceBatch, SequenceBatcher
from inferd.kernel.actors.scheduler.version import Version, batcher_of
from inferd.kernel.dataplane.streams import ResponseStream
from inferd.kernel.modelconfig.sequence_plan import SequencePlan
from inferd.kernel.runtime.addresses import SCHEDULER
from inferd.kernel.sdk.backends import CancelledRequests
from inferd.plugins.backends.python import triton_python_backend_utils as pb_utils
from inferd.protocols.errors import DeadlineExceeded, Unavailable
from inferd.protocols.messages import (
    BatchResult,
    CancelRequests,
    InferRequest,
    InferResponse,
    ServeVersion,
    StreamInferRequest,
    Tensor,
)
from tests.kernel.actors.scheduler import scheduler_stand_ins as stand_ins
from tests.kernel.actors.scheduler.scheduler_stand_ins import EXECUTOR, Harness, request

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_recheck")]

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""
QUEUE_OF_ONE = "dynamic_batching { default_queue_policy { max_queue_size: 1 } }"


# ---------------------------------------------------------------------- sans-IO: the queue


def version(extra: str = "", instances: int = 1) -> Version:
    config = text_format.Parse(CONFIG + extra, ModelConfig())
    return Version("m", 1, config, ModelSignature.from_config(config), batcher_of(config),
                   QueuePolicy.of(config), [Slot(EXECUTOR, i) for i in range(instances)])


def test_a_withdrawn_request_leaves_the_queue_and_gives_its_place_back() -> None:
    target = version(QUEUE_OF_ONE, instances=0)
    first = target.admit(request(1), 0)
    with pytest.raises(Unavailable):
        target.admit(request(2), 0)
    assert target.withdraw(first) and target.pending() == 0 and not target.busy()
    target.admit(request(3), 0)  # the queue of one has room again
    assert not target.withdraw(first)  # it is no longer there


def test_a_request_already_sent_is_not_withdrawn() -> None:
    target = version()
    queued = target.admit(request(1), 0)
    batches: list[list[Queued]] = []
    target.pump(lambda v, s, batch: batches.append(batch), _no_sequences)
    assert batches == [[queued]] and not target.withdraw(queued)


def test_a_withdrawn_request_takes_no_place_in_the_response_order() -> None:
    target = version("dynamic_batching { preserve_ordering: true }", instances=1)
    target.slots[0].in_flight = 1  # busy: what is admitted waits
    gone, kept = target.admit(request(1), 0), target.admit(request(2), 0)
    assert target.withdraw(gone)
    target.slots[0].in_flight = 0
    batches: list[list[Queued]] = []
    target.pump(lambda v, s, batch: batches.append(batch), _no_sequences)
    assert batches == [[kept]]
    target.finish_batch(target.slots[0], batches[0],
                        BatchResult((InferResponse("m", "1", ()),)))
    assert kept.done.is_set() and not gone.done.is_set()


def _no_sequences(version: Version, slot: Slot, batch: SequenceBatch[Queued],
                  real: list[Queued]) -> None:
    raise AssertionError("not a sequence model")


# ---------------------------------------------------------------------- sans-IO: sequences


SEQUENCE_CONFIG = """
name: "m" max_batch_size: 1
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching { direct { } }
"""


def sequence_request(sequence: int, start: bool = False, end: bool = False) -> InferRequest:
    parameters: dict[str, object] = {"sequence_id": sequence, "sequence_start": start,
                                     "sequence_end": end}
    data = np.ones((1, 1), np.float32)
    return InferRequest("m", (Tensor("INPUT", "FP32", data.shape, data),),
                        parameters=parameters)


def test_a_sequence_whose_end_is_withdrawn_frees_its_slot_once_idle() -> None:
    config = text_format.Parse(SEQUENCE_CONFIG, ModelConfig())
    sequences: SequenceBatcher[str] = SequenceBatcher(SequencePlan.of(config, None), 1)
    sequences.admit("a1", sequence_request(1, start=True), 1, 0)
    sequences.admit("a2", sequence_request(1, end=True), 1, 0)
    sequences.admit("b1", sequence_request(2, start=True), 1, 0)  # waits for the one slot
    running = sequences.next_batch(0, 0)
    assert running is not None and [e.item for e in running.entries] == ["a1"]
    assert sequences.withdraw("a2") and not sequences.withdraw("a2")
    assert sequences.pending() == 1  # b1 only
    sequences.complete(running, [InferResponse("m", "1", ())], 0)
    following = sequences.next_batch(0, 0)  # sequence 1 ended without its END: b1 goes on
    assert following is not None and [e.item for e in following.entries] == ["b1"]


def test_a_withdrawn_end_of_an_idle_sequence_frees_its_slot_at_once() -> None:
    config = text_format.Parse(SEQUENCE_CONFIG, ModelConfig())
    sequences: SequenceBatcher[str] = SequenceBatcher(SequencePlan.of(config, None), 1)
    sequences.admit("a1", sequence_request(1, start=True, end=True), 1, 0)
    sequences.admit("b1", sequence_request(2, start=True), 1, 0)
    assert sequences.withdraw("a1") and sequences.active() == 1
    batch = sequences.next_batch(0, 0)
    assert batch is not None and [e.item for e in batch.entries] == ["b1"]


# ---------------------------------------------------------------------- the actor


def running() -> AbstractAsyncContextManager[Harness]:
    return stand_ins.running(CONFIG, held=True)


async def cancelled(task: asyncio.Task[InferResponse]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancelled_queued_request_never_reaches_its_instance() -> None:
    async with running() as harness:
        await harness.serve(extra=QUEUE_OF_ONE)
        first = harness.start_infer(1)
        await harness.instance.started.wait()
        second = harness.start_infer(2)
        await harness.until_pending(2)  # one at the instance, one queued
        await cancelled(second)
        assert await harness.metric("nv_inference_pending_request_count") == 1
        third = harness.start_infer(3)  # the queue of one has room again
        await harness.until_pending(2)
        harness.instance.gate.set()
        assert (await first).id == "1" and (await third).id == "3"
        assert harness.instance.ran == ["1", "3"]
        assert await harness.metric("nv_inference_request_failure", reason="CANCELED") == 1
        assert await harness.metric("nv_inference_request_success") == 2
        assert await harness.metric("nv_inference_pending_request_count") == 0
        assert not harness.instance.told  # nothing of it reached the executor


async def test_a_cancelled_running_request_is_named_to_its_executor_and_its_batch_completes(
) -> None:
    async with running() as harness:
        await harness.serve(extra="dynamic_batching { max_queue_delay_microseconds: 1000000 "
                                  "preferred_batch_size: [ 2 ] }")
        first, second = harness.start_infer(1), harness.start_infer(2)
        await harness.instance.started.wait()
        assert harness.instance.ran == ["1", "2"]  # one batch
        await cancelled(second)
        assert harness.instance.told == [CancelRequests(harness.instance.asks[0], (1,))]
        harness.instance.gate.set()
        assert (await first).id == "1"
        assert await harness.metric("nv_inference_request_failure", reason="CANCELED") == 1
        assert await harness.metric("nv_inference_request_success") == 1
        assert await harness.metric("nv_inference_exec_count") == 1


async def test_an_ask_whose_asker_stops_waiting_cancels_its_queued_request() -> None:
    async with running() as harness:
        await harness.serve(extra=QUEUE_OF_ONE)
        first = harness.start_infer(1)
        await harness.instance.started.wait()
        with pytest.raises(DeadlineExceeded):  # as a BLS call past its timeout
            await harness.router.ask(SCHEDULER, request(2), timeout=0.05)
        await harness.until_pending(1)
        harness.instance.gate.set()
        await first
        assert harness.instance.ran == ["1"]
        assert await harness.metric("nv_inference_request_failure", reason="CANCELED") == 1


async def test_an_abandoned_decoupled_stream_leaves_the_queue_or_is_named_to_its_executor(
) -> None:
    async with running() as harness:
        await harness.serve(extra=QUEUE_OF_ONE + "model_transaction_policy { decoupled: true }")
        streams = []
        for value in (1, 2):
            stream = await harness.router.call(SCHEDULER, StreamInferRequest(request(value)))
            assert isinstance(stream, ResponseStream)
            streams.append(stream)
        await harness.instance.started.wait()
        for stream in reversed(streams):  # the queued one first, then the running one
            with anyio.move_on_after(0.01):  # its reader gives up
                await stream.__anext__()
        assert await harness.metric("nv_inference_pending_request_count") == 1
        assert await harness.metric("nv_inference_request_failure", reason="CANCELED") == 1
        assert await streams[1].__anext__() == (None, True)  # what relays it stops too
        assert harness.instance.told == [CancelRequests(harness.instance.asks[0], (0,))]
        harness.instance.gate.set()
        await harness.until_pending(0)
        assert harness.instance.ran == ["1"]


# ---------------------------------------------------------------------- ensembles


ENSEMBLE = """
name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
ensemble_scheduling { step [
  { model_name: "first" model_version: -1
    input_map { key: "IN" value: "IN" } output_map { key: "IN" value: "mid" } },
  { model_name: "second" model_version: -1
    input_map { key: "IN" value: "mid" } output_map { key: "IN" value: "OUT" } }
] }
"""


async def test_a_cancelled_ensemble_request_starts_no_further_step() -> None:
    async with running() as harness:
        for name in ("first", "second"):
            parsed = text_format.Parse(CONFIG.replace('"m"', f'"{name}"'), ModelConfig())
            await harness.router.ask(SCHEDULER, ServeVersion(
                name, 1, parsed.SerializeToString(), ((EXECUTOR, 0),)))
        parsed = text_format.Parse(ENSEMBLE, ModelConfig())
        await harness.router.ask(SCHEDULER, ServeVersion(
            "chain", 1, parsed.SerializeToString(), ()))
        data = np.zeros((1, 2), dtype=np.int32)
        chain = asyncio.get_running_loop().create_task(harness.router.call(
            SCHEDULER, InferRequest("chain", (Tensor("IN", "INT32", data.shape, data),),
                                    id="e")))
        await harness.instance.started.wait()
        chain.cancel()
        with pytest.raises(asyncio.CancelledError):
            await chain
        harness.instance.gate.set()
        await harness.until_pending(0)
        await anyio.sleep(0.01)
        assert harness.instance.ran == ["e"]  # the first step only
        assert await harness.metric("nv_inference_request_failure", model="chain",
                                    reason="CANCELED") == 1


# ---------------------------------------------------------------------- the python backend


def test_the_python_backend_shows_cancellation_on_the_request_and_its_sender() -> None:
    cancelled = CancelledRequests()
    received = pb_utils.InferenceRequest.from_inferd(request(1), ["IN"])
    assert not received.is_cancelled()
    received.watch_cancellation(lambda: 0 in cancelled)
    sender = pb_utils.InferenceResponseSender(lambda response, final: None,
                                              lambda: 0 in cancelled)
    assert not received.is_cancelled() and not sender.is_cancelled()
    cancelled.add((0,))
    assert received.is_cancelled() and sender.is_cancelled()
