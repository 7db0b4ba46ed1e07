"""The backend contract: what every framework plugin implements, and the registry it fills.

Re-exported beside it, what every backend handles (from ``inferd.protocols``: the request and
response messages and ``Tensor``, the errors an instance returns, the datatype and tensor
helpers).

Three levels, as in Triton: a ``Backend`` is created once per executor process; it loads a
``Model`` (one version of one model) from a ``ModelContext``; the model creates one
``Instance`` per instance-group slot. The executor calls ``Instance.execute`` with a batch of
already-validated requests, never concurrently on one instance, always off the event loop.

Plugins register a ``BackendSpec`` naming their backend class by import path, so the hook
module imports no framework: the class is imported only inside the executor, when a model
needs it. This module owns the contract and the backend registry (an
``inferd.kernel.sdk.registry.Registry``); it does no I/O. A backend's helpers are beside it:
``inferd.kernel.sdk.batching`` (one execute over a batch of array requests),
``inferd.kernel.sdk.process_threads`` (a framework's once-per-process thread pools),
``inferd.kernel.sdk.modelconfig`` (config completion from the model file, config JSON and
text) and ``inferd.kernel.sdk.devices`` (the device an instance runs on, outputs written in
place in CUDA shared memory).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from inferd.kernel.sdk.registry import Registry, import_entry, load_entry
from inferd.protocols.errors import (
    DeadlineExceeded,
    InferdError,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unsupported,
)
from inferd.protocols.messages import DeviceWindow, InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import (
    config_type_to_datatype,
    datatype_of,
    datatype_to_config_type,
    deserialize_bytes,
    from_numpy,
    numpy_dtype,
    serialize_bytes,
)

__all__ = [
    "Backend", "BackendRegistry", "BackendSpec", "CancelledRequests", "Emit", "Instance",
    "Model", "ModelContext", "batch_inputs", "split_batch",
    "InferRequest", "InferResponse", "Tensor",
    "InferdError", "InvalidArgument", "NotFound", "Unavailable", "Unsupported", "Internal",
    "DeadlineExceeded",
    "config_type_to_datatype", "datatype_to_config_type", "numpy_dtype", "datatype_of",
    "from_numpy", "serialize_bytes", "deserialize_bytes",
]

Emit = Callable[[int, "InferResponse | InferdError | None", bool], None]
"""How a decoupled instance sends a response: ``emit(index, result, final)``."""

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """What a plugin tells the kernel about one backend.

    ``entry`` is ``"package.module:BackendClass"``, imported lazily in the executor.
    ``platforms`` are the config ``platform`` values that select it (e.g. ``onnxruntime_onnx``).
    ``default_filename`` is the model file looked for in a version folder. ``isolate`` asks
    for a process of its own, so a framework that conflicts with others never shares an
    interpreter with them. ``gpu_packages`` are distributions any one of which, installed,
    lets the backend run on a GPU (``inferd.kernel.runtime.devices``: what ``KIND_AUTO`` becomes).
    ``process_per_instance`` puts each instance of its models in an executor process of its
    own (``inferd.kernel.actors.executor_pool.placement``), as Triton runs a python model's
    instances in stubs. ``completion`` is ``"package.module:function"``, a ``function(context) ->
    ModelConfig`` that completes and checks a config from the model file as a load would, without a
    server (``inferd check``, the catalog), imported lazily; ``completion_runs_model_code`` says it
    runs the model's own code (then only ``inferd check`` uses it, never a server).
    ``runs_in_server`` says the backend is native and thread-safe, so its CPU instances may
    run in the server's own process, as Triton runs its native backends (``--cpu-executor
    server``, the default; ``inferd.kernel.actors.executor_pool.actor`` places them).
    ``auto_completes`` says a load fills in a config's missing inputs and outputs from the
    model file (Triton's auto-complete), for every config of the backend or, with
    ``auto_completes_only``, for those platforms or default file names alone.
    """

    name: str
    entry: str
    platforms: tuple[str, ...] = ()
    default_filename: str = ""
    isolate: bool = False
    gpu_packages: tuple[str, ...] = ()
    process_per_instance: bool = False
    completion: str = ""
    completion_runs_model_code: bool = False
    runs_in_server: bool = False
    auto_completes: bool = False
    auto_completes_only: tuple[str, ...] = ()

    def completes(self, platform: str, default_filename: str) -> bool:
        """Whether a load of a config of ``platform`` and ``default_filename`` fills in its
        missing inputs and outputs from the model file."""
        return self.auto_completes and (not self.auto_completes_only or bool(
            {platform, default_filename} & set(self.auto_completes_only)))

    def load_class(self) -> type[Backend]:
        backend_class: type[Backend] = load_entry(self.entry, Backend, "backend")
        return backend_class

    def load_completion(self) -> Callable[[ModelContext], ModelConfig] | None:
        """The ``completion`` function, or ``None`` when the backend has none."""
        if not self.completion:
            return None
        function: Callable[[ModelContext], ModelConfig] = import_entry(self.completion)
        return function


class BackendRegistry(Registry[BackendSpec]):
    """Filled by ``inferd_register_backends`` hooks: ``registry.add(BackendSpec(...))``."""

    kind = "backend"

    def for_platform(self, platform: str) -> BackendSpec | None:
        return next((s for s in self._specs.values() if platform in s.platforms), None)

    def for_filename(self, filename: str) -> BackendSpec | None:
        return next((s for s in self._specs.values() if s.default_filename == filename), None)


@dataclass(slots=True)
class ModelContext:
    """Everything a backend needs to load one version of one model."""

    name: str
    version: int
    model_dir: Path
    config: ModelConfig
    auto_complete: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    infer: Callable[[InferRequest, float | None], InferResponse] | None = None
    """Send a request to any model of this server and wait for its response (the timeout in
    seconds, or ``None``), from an instance thread; raises ``InferdError``. ``None`` when
    the model is loaded outside a server."""
    infer_stream: Callable[[InferRequest, float | None],
                           Iterator[InferResponse | InferdError]] | None = None
    """``infer`` for a model that may answer any number of times (a decoupled one): its
    responses (or errors) as they come, the timeout bounding each wait. The request is sent
    at once; the iterator's ``cancel()`` cancels it (the called model may stop), and it still
    runs to the final response."""

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.version)

    def model_file(self, default_filename: str) -> Path:
        """The version's model file: ``default_model_filename`` if the config sets it."""
        return self.version_dir / (self.config.default_model_filename or default_filename)


class CancelledRequests:
    """The positions, in the batch an instance runs, of the requests whose clients went away
    (or timed out) meanwhile: the executor adds them from its event loop as the scheduler
    says, a backend reads them from the instance's thread (``position in cancelled``)."""

    __slots__ = ("_positions",)

    def __init__(self) -> None:
        self._positions: frozenset[int] = frozenset()

    def add(self, positions: Iterable[int]) -> None:
        self._positions = self._positions | frozenset(positions)  # one swap: thread-safe

    def __contains__(self, position: object) -> bool:
        return position in self._positions

    def __bool__(self) -> bool:
        return bool(self._positions)


NONE_CANCELLED = CancelledRequests()  # never added to: what an instance sees outside a batch
NO_WINDOWS: Mapping[DeviceWindow, int] = MappingProxyType({})


class Instance(abc.ABC):
    """One execution slot of a model. ``execute`` is never called concurrently on one
    instance, so an instance may keep per-call state (a session, a CUDA stream)."""

    cancelled: CancelledRequests = NONE_CANCELLED
    """Set by the executor for each batch run off its event loop: which of its requests were
    cancelled while it runs. A backend whose framework can stop or skip work may read it
    (the python backend's ``request.is_cancelled()``); the others run the batch whole."""

    phase_ns: tuple[int, int, int] | None = None
    """Set by ``execute`` when the backend can tell its phases apart: the nanoseconds the
    last call spent preparing inputs, running the model and producing outputs. They become
    the compute_input/infer/output statistics; left ``None``, the whole call is infer."""

    takes_device_memory: bool = False
    """Whether ``execute`` takes inputs that stay in a client's CUDA shared memory as device
    tensors (``inferd.protocols.device_tensors``: their ``pointer`` is the device address) and
    may write an output asked there (``InferRequest.output_windows``) itself, on the device,
    at the address ``window_addresses`` gives, answering it as a device tensor of the part of
    the window it wrote. For any other instance the executor copies such inputs to the host
    and such outputs onto the device, once each; so it does for an output left on the host."""

    window_addresses: Mapping[DeviceWindow, int] = NO_WINDOWS
    """Set by the executor for each batch of an instance that takes device memory: the device
    address of each output window of its requests, valid until ``execute`` returns."""

    runs_on_event_loop: bool = True
    """Whether the executor may run a short ``execute`` on its event loop rather than the
    instance's thread. An instance whose ``execute`` can wait on the server (a python model
    calling another model through ``ModelContext.infer``) sets it False."""

    @abc.abstractmethod
    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        """Run a batch; return one response or one error per request, in order."""

    def execute_decoupled(self, requests: Sequence[InferRequest], emit: Emit) -> None:
        """Run a batch of a decoupled model: send each request's responses, zero or more,
        through ``emit(index, result, final)`` (``index`` into ``requests``; ``result`` a
        response, an error, or ``None`` with ``final`` alone), from any thread, before or
        after this returns, the last with ``final`` true. Backends whose models can be
        decoupled override it."""
        raise Unsupported(f"the {type(self).__name__} backend has no decoupled models")

    checks_readiness: bool = False
    """Whether the instance has a readiness check of its own (``ready``), which every model
    readiness check then runs (Triton's ``TRITONBACKEND_ModelInstanceReady``); left False, a
    loaded instance is ready and readiness checks never reach its executor."""

    def ready(self) -> bool:
        """Whether the instance can serve now, for an instance that ``checks_readiness``.
        Called on a thread of its own, possibly while ``execute`` runs; a raised error means
        not ready. Kept short: a readiness check waits five seconds at most."""
        return True

    def close(self) -> None:
        """Release what the instance holds. Called once, after the last ``execute``."""


class Model(abc.ABC):
    """One loaded version. ``config`` is the config the instances run with, auto-completed
    from the model file when the context allows it."""

    config: ModelConfig

    @abc.abstractmethod
    def create_instance(self, index: int) -> Instance:
        """Create instance number ``index``, counted from 0 across ``config``'s instance
        groups in order; a process may be asked for only some of them (one, for a backend
        whose instances each run in a process of their own)."""

    def unload(self) -> None:
        """Release model-level resources after every instance is closed."""


class Backend(abc.ABC):
    """Created once per executor process, the first time one of its models is loaded."""

    name: str = ""

    @abc.abstractmethod
    def load_model(self, context: ModelContext) -> Model:
        """Load one version; raise ``InferdError`` (or any exception) with a clear reason."""

    def close(self) -> None:
        """Called when the executor stops."""


def batch_inputs(requests: Sequence[InferRequest], name: str) -> Any:
    """Concatenate input ``name`` of every request along the batch dimension. A helper for
    backends whose framework runs one batch as one call."""
    import numpy as np

    arrays = [next(t.data for t in r.inputs if t.name == name) for r in requests]
    if len(arrays) == 1:
        return arrays[0]
    return np.concatenate(arrays, axis=0)


def split_batch(array: Any, sizes: Sequence[int]) -> list[Any]:
    """Split ``array`` along the batch dimension into pieces of ``sizes``."""
    if len(sizes) == 1:
        return [array]
    if int(array.shape[0]) != sum(sizes):
        raise InvalidArgument(
            f"output batch dimension {array.shape[0]} does not match the batch of {sum(sizes)}"
        )
    pieces, start = [], 0
    for size in sizes:
        pieces.append(array[start : start + size])
        start += size
    return pieces
