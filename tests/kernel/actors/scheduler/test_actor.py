"""The scheduler actor driven through its messages, in one process: a router, the scheduler and
a stand-in executor actor (an instance the test holds busy or lets answer), no sockets.
Serving and resolving versions, requests batched while the instance is busy, a retire and a
reload that wait for in-flight batches (woken by the batch's reply, not by a poll), drain at
shutdown, and metrics of what is pending."""

from __future__ import annotations

import gc
from contextlib import AbstractAsyncContextManager

import anyio
import numpy as np
import pytest

from inferd.kernel.actors.scheduler.actor import SHUTTING_DOWN
from inferd.kernel.runtime.addresses import SCHEDULER
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable
from inferd.protocols.messages import (
    Ack,
    Drain,
    InferRequest,
    InferResponse,
    Metrics,
    MetricsRequest,
    ModelMetadata,
    ModelMetadataRequest,
    RetireVersion,
    Tensor,
)
from tests.kernel.actors.scheduler import scheduler_stand_ins as stand_ins
from tests.kernel.actors.scheduler.scheduler_stand_ins import EXECUTOR, WAIT_SECS, Harness

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_recheck")]

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
dynamic_batching { }
"""


def running() -> AbstractAsyncContextManager[Harness]:
    return stand_ins.running(CONFIG)


async def test_a_request_reaches_the_instance_of_the_version_it_resolves_to() -> None:
    async with running() as harness:
        await harness.serve(1)
        await harness.serve(2)
        reply = await harness.infer(7)
        assert reply.version == "2" and reply.id == "7"  # the highest served version
        assert (await harness.infer(3, version="1")).version == "1"
        metadata = await harness.router.ask(SCHEDULER, ModelMetadataRequest("m"))
        assert isinstance(metadata, ModelMetadata) and metadata.versions == ("1", "2")


async def test_unknown_models_and_versions_get_triton_s_refusals() -> None:
    async with running() as harness:
        await harness.serve(1)
        data = np.zeros((1, 2), dtype=np.int32)
        inputs = (Tensor("IN", "INT32", data.shape, data),)
        with pytest.raises(NotFound, match="Request for unknown model: 'x' is not found"):
            await harness.router.call(SCHEDULER, InferRequest("x", inputs))
        with pytest.raises(NotFound, match="'m' version 9 is not found"):
            await harness.router.call(SCHEDULER, InferRequest("m", inputs, version="9"))
        with pytest.raises(InvalidArgument, match="failed to get model version from specified "
                                                "version string 'one'"):
            await harness.router.call(SCHEDULER, InferRequest("m", inputs, version="one"))


async def test_requests_arriving_while_the_instance_is_busy_run_as_one_batch() -> None:
    async with running() as harness:
        await harness.serve()
        harness.instance.hold()
        replies: list[InferResponse] = []

        async def infer(value: int) -> None:
            replies.append(await harness.infer(value))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(infer, 0)
            await harness.instance.started.wait()
            for value in (1, 2, 3):
                tasks.start_soon(infer, value)
            while harness.scheduler._table.resolve("m", "").pending() < 4:
                await anyio.sleep(0.001)  # the three are queued (bounded by the fixture)
            harness.instance.gate.set()
        assert harness.instance.batches == [1, 3]
        assert sorted(int(r.outputs[0].data[0, 0]) for r in replies) == [0, 1, 2, 3]


async def test_retire_answers_once_the_batch_in_flight_is_answered() -> None:
    async with running() as harness:
        await harness.serve()
        harness.instance.hold()
        retired = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(harness.infer, 1)
            await harness.instance.started.wait()

            async def retire() -> None:
                assert isinstance(await harness.router.ask(SCHEDULER, RetireVersion("m", 1)), Ack)
                retired.set()

            tasks.start_soon(retire)
            with anyio.move_on_after(0.2):
                await retired.wait()
            assert not retired.is_set()  # the batch is still at its instance
            harness.instance.gate.set()
            await retired.wait()  # woken by the reply (the re-check is an hour away)
        with pytest.raises(NotFound, match="has no available versions"):
            await harness.infer(2)


async def test_a_reload_answers_once_the_replaced_instance_s_batch_is_answered() -> None:
    async with running() as harness:
        await harness.serve()
        harness.instance.hold()
        served = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(harness.infer, 1)
            await harness.instance.started.wait()

            async def reload() -> None:
                await harness.serve(instances=((EXECUTOR, 1),))
                served.set()

            tasks.start_soon(reload)
            with anyio.move_on_after(0.2):
                await served.wait()
            assert not served.is_set()
            harness.instance.gate.set()
            await served.wait()
        assert (await harness.infer(2)).id == "2"


async def test_drain_waits_for_work_in_flight_then_refuses_new_requests() -> None:
    async with running() as harness:
        await harness.serve()
        harness.instance.hold()
        answers: list[InferResponse] = []
        drained = anyio.Event()
        async with anyio.create_task_group() as tasks:

            async def infer() -> None:
                answers.append(await harness.infer(1))

            tasks.start_soon(infer)
            await harness.instance.started.wait()

            async def drain() -> None:
                assert isinstance(await harness.router.ask(SCHEDULER, Drain(WAIT_SECS)), Ack)
                drained.set()

            tasks.start_soon(drain)
            with anyio.move_on_after(0.2):
                await drained.wait()
            assert not drained.is_set()
            harness.instance.gate.set()
            await drained.wait()
        assert len(answers) == 1
        with pytest.raises(Unavailable, match=SHUTTING_DOWN):
            await harness.infer(2)


async def test_drain_past_its_timeout_answers_what_is_still_queued() -> None:
    async with running() as harness:
        await harness.serve()
        harness.instance.hold()
        errors: list[Exception] = []
        async with anyio.create_task_group() as tasks:

            async def infer(value: int) -> None:
                try:
                    await harness.infer(value)
                except Unavailable as error:
                    errors.append(error)

            tasks.start_soon(infer, 0)
            await harness.instance.started.wait()
            tasks.start_soon(infer, 1)  # queued behind the running batch
            while harness.scheduler._table.resolve("m", "").pending() < 2:
                await anyio.sleep(0.001)
            assert isinstance(await harness.router.ask(SCHEDULER, Drain(0.05)), Ack)
            harness.instance.gate.set()
        assert [error.message for error in errors] == [SHUTTING_DOWN]
        assert harness.instance.batches == [1]


async def test_metrics_count_pending_and_answered_requests() -> None:
    async with running() as harness:
        await harness.serve()
        await harness.infer(1)
        reply = await harness.router.ask(SCHEDULER, MetricsRequest())
        assert isinstance(reply, Metrics)
        values = {name: value for name, labels, value in reply.samples
                  if labels == {"model": "m", "version": "1"}}
        assert values["nv_inference_request_success"] == 1
        assert values["nv_inference_exec_count"] == 1
        assert values["nv_inference_pending_request_count"] == 0


async def test_the_inference_path_leaves_no_reference_cycles() -> None:
    # A cycle per request (a request referring to its batch, the batch to its requests) is
    # freed only by the garbage collector: its passes then cost more than the rest of the
    # scheduler's work and keep tensors alive meanwhile.
    async with running() as harness:
        await harness.serve()
        for value in range(8):  # warm: first-time caches and lazily built objects
            await harness.infer(value)
        gc.collect()
        gc.disable()
        try:
            for value in range(50):
                await harness.infer(value)
            unreachable = gc.collect()
        finally:
            gc.enable()
        assert unreachable == 0
