"""How models run: executor processes greeting the kernel and releasing shared memory, loading
and unloading versions on them, and the batches and streams the scheduler sends them and
their results. Kernel-internal (no frontend sends these, except ``StreamInferRequest`` inside
the main process). Data shapes only: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.protocols.messages.base import Failure, Message
from inferd.protocols.messages.dataplane import InferRequest, InferResponse


@dataclass(frozen=True, slots=True)
class ExecutorHello(Message):
    """First message an executor process sends once it can serve."""

    name: str
    pid: int
    backends: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReleaseSegments(Message):
    """Process link -> process link: the receiver of these shared memory segments holds no
    view of them any more; their owner may reuse them. Handled by the links themselves,
    never by an actor."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoadVersion(Message):
    """Control -> executor pool -> executors: load one version of a model with
    ``instance_count`` instances. ``config`` is a serialized ModelConfig; ``load_id`` names
    this load, so a reload can bring up a second copy of the same version beside the one
    serving. The pool splits a load over executor processes
    (``inferd.kernel.actors.executor_pool.placement``): each executor gets the config narrowed to
    its device's instance groups, and the instances of them it creates: ``instance_count``
    of them from number ``first_instance`` (counted across those groups), so an instance in a
    process of its own still knows its place, and Triton's name, in its group."""

    load_id: int
    model: str
    version: int
    backend: str
    config: bytes
    path: str
    instance_count: int
    auto_complete: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    isolated: bool = False  # in executor processes of the model's own
    first_instance: int = 0


@dataclass(frozen=True, slots=True)
class VersionLoaded(Message):
    """Executor -> control: the (possibly auto-completed) config the instances run with,
    and the executor-wide ids of the instances created."""

    config: bytes
    instance_ids: tuple[int, ...]
    executor: str = ""
    # (executor, instance id) of every instance, for a load the pool split over executors
    instances: tuple[tuple[str, int], ...] = ()
    # The warm-up executions, (batch size, requests, input, infer, output ns), which the
    # version's statistics count (as Triton's do)
    warmup: tuple[tuple[int, int, int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class UnloadVersion(Message):
    """Control -> executor: close the instances of one load once their batches finish."""

    load_id: int


@dataclass(frozen=True, slots=True)
class VersionUnloaded(Message):
    """Executor -> control, the reply to ``UnloadVersion``: what the load took (its growth of
    the executor process's resident memory, and of its device memory) and what the unload
    gave back (their fall; a process that ended gives back all it held), in bytes. A device
    figure is None where no GPU could be read."""

    loaded_resident: int = 0
    returned_resident: int = 0
    loaded_device: int | None = None
    returned_device: int | None = None


@dataclass(frozen=True, slots=True)
class InferBatch(Message):
    """Scheduler -> executor: run these requests together on one instance."""

    model: str
    version: int
    instance: int
    requests: tuple[InferRequest, ...]


@dataclass(frozen=True, slots=True)
class BatchResult(Message):
    """Executor -> scheduler: one ``InferResponse`` or ``Failure`` per request, in order.
    ``compute_ns`` is (input, infer, output) nanoseconds for the statistics; ``started_ns``
    the steady clock (``time.perf_counter_ns``, one clock for every process of a machine) when
    the instance began the batch, for traces."""

    results: tuple[InferResponse | Failure, ...]
    compute_ns: tuple[int, int, int] = (0, 0, 0)
    started_ns: int = 0


@dataclass(frozen=True, slots=True)
class StreamBatch(Message):
    """Scheduler -> executor: run these requests of a decoupled model on one instance. Each
    request's responses come back to the scheduler as ``StreamParts`` under its token, any
    number, any time, until its final one; the reply (a ``BatchResult`` without results)
    comes when the instance is free again."""

    model: str
    version: int
    instance: int
    requests: tuple[InferRequest, ...]
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CancelRequests(Message):
    """Scheduler -> executor: the clients of some requests of a batch it sent (``InferBatch``
    or ``StreamBatch``, named by that ask's ``msg_id``) went away; ``positions`` are their
    indices in the batch. The batch still runs; a backend that can tell its model (the python
    backend's ``request.is_cancelled()``) does. Never answered."""

    batch: int
    positions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CloseDeviceRegions(Message):
    """Main process -> the GPU executors it sent windows of these CUDA shared-memory regions
    (``DeviceWindow.region``): no request uses them any more and they are unregistered; each
    executor closes its IPC handle once the batches still holding it are done. Never
    answered."""

    regions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StreamParts(Message):
    """Executor -> scheduler: responses of decoupled requests. Part ``i`` belongs to the
    request of ``tokens[i]``: a response, a ``Failure``, or ``None`` (a final flag alone);
    ``finals[i]`` says it is that request's last."""

    tokens: tuple[int, ...]
    results: tuple[InferResponse | Failure | None, ...]
    finals: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class RemoteStreamRequest(Message):
    """Executor -> scheduler: stream the responses to ``request`` (a BLS call with
    ``decoupled=True``) back to actor ``reply_to`` as ``StreamParts`` under ``token``."""

    request: InferRequest
    token: int
    reply_to: str


@dataclass(frozen=True, slots=True)
class CancelRemoteStream(Message):
    """Executor -> scheduler: the model that opened the BLS stream ``token`` (a
    ``RemoteStreamRequest`` of ``reply_to``) cancelled it (``cancel()`` on its response
    iterator); the request is cancelled as when a client goes away, and its stream still
    ends with a final part."""

    token: int
    reply_to: str


@dataclass(frozen=True, slots=True)
class InstancesReadyRequest(Message):
    """Scheduler -> executor: whether these instances are ready, for a model readiness
    check (Triton's ``TRITONBACKEND_ModelInstanceReady``)."""

    instance_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class InstancesReady(Message):
    """Executor -> scheduler: ``ready`` is False when an instance's own check said no (or
    failed: ``reason`` says why); ``checked`` is False when none of them has a check of its
    own, so the scheduler need not ask again for this version."""

    ready: bool
    checked: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StreamInferRequest(Message):
    """Frontend -> scheduler, in the main process only: answered with a ``ResponseStream``
    (``inferd.kernel.dataplane.streams``) of the request's responses, one for a model that is not
    decoupled, any number for one that is."""

    request: InferRequest
