"""Every message kind inferd's actors, processes and native clients exchange.

A message is a frozen, slotted dataclass whose fields hold only wire-safe values: ``None``,
``bool``, ``int``, ``float``, ``str``, ``bytes``, tuples of those, ``dict`` with ``str`` keys,
``Tensor`` and other messages. The codec in ``inferd.protocols.wire`` encodes any of them
without knowing the kind; the kind's name is its class name. ``Envelope`` carries a message
between actors with its routing header. This module owns data shapes only: no I/O, no logic
beyond trivial accessors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Tensor:
    """A named tensor. ``data`` is a numpy array of the datatype's numpy form: BYTES is an
    object array of ``bytes``, BF16 a ``uint16`` array of the raw bits. ``shape`` is the
    tensor's logical shape and always equals ``data.shape``."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray = field(compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return (
            self.name == other.name
            and self.datatype == other.datatype
            and tuple(self.shape) == tuple(other.shape)
            and np.array_equal(self.data, other.data, equal_nan=self.data.dtype.kind == "f")
        )

    __hash__ = None  # type: ignore[assignment]


class Message:
    """Marker base of every message kind."""

    __slots__ = ()

    @classmethod
    def kind(cls) -> str:
        return cls.__name__


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message in transit: who sent it, where it goes, what it answers and by when."""

    msg_id: int
    src: str
    dst: str
    body: Message
    reply_to: int | None = None
    deadline: float | None = None  # absolute time.time() after which nobody waits for it
    trace: str | None = None


# --------------------------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class Ack(Message):
    """A successful reply that carries nothing."""


@dataclass(frozen=True, slots=True)
class Failure(Message):
    """A failed reply: an ``inferd.protocols.errors.ErrorCode`` value and a message."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Cancel(Message):
    """Told by an asker that stopped waiting (it was cancelled, or its ask timed out) to the
    actor it asked: ``msg_id`` names that ask. The actor cancels the handler still running
    for it, if its kind is one the actor lets stop (``Actor.CANCELLABLE``); never answered."""

    msg_id: int


# ------------------------------------------------------------------------------ data plane


@dataclass(frozen=True, slots=True)
class InferRequest(Message):
    """One inference request. ``version`` empty means the highest READY version; ``outputs``
    empty means every output of the model. ``classification`` maps a requested output to
    the number of its top classes to return instead of its values (the classification
    extension)."""

    model: str
    inputs: tuple[Tensor, ...]
    version: str = ""
    id: str = ""
    outputs: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    classification: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferResponse(Message):
    model: str
    version: str
    outputs: tuple[Tensor, ...]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthRequest(Message):
    """``what`` is ``live`` or ``ready``."""

    what: str = "live"


@dataclass(frozen=True, slots=True)
class HealthStatus(Message):
    ok: bool


@dataclass(frozen=True, slots=True)
class ServerMetadataRequest(Message):
    pass


@dataclass(frozen=True, slots=True)
class ServerMetadata(Message):
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TensorSpec(Message):
    """An input or output as model metadata shows it (``-1`` for a variable dimension,
    the batch dimension included when the model batches)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadataRequest(Message):
    model: str
    version: str = ""


@dataclass(frozen=True, slots=True)
class ModelMetadata(Message):
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True, slots=True)
class ModelReadyRequest(Message):
    model: str
    version: str = ""


@dataclass(frozen=True, slots=True)
class ModelConfigRequest(Message):
    model: str
    version: str = ""


@dataclass(frozen=True, slots=True)
class ModelConfigReply(Message):
    """The normalized ModelConfig as Triton's JSON (SPEC 1.4)."""

    config_json: str


@dataclass(frozen=True, slots=True)
class IndexRequest(Message):
    ready_only: bool = False


@dataclass(frozen=True, slots=True)
class IndexEntry(Message):
    """A repository index row. A model never loaded has only ``name``."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""
    warnings: tuple[str, ...] = ()  # a READY version's config fields inferd ignores
    # The model's catalog metadata (an inferd extension; ``inferd.kernel.catalog``).
    catalog: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Index(Message):
    entries: tuple[IndexEntry, ...]


@dataclass(frozen=True, slots=True)
class CatalogRequest(Message):
    """The model catalog (an inferd extension): every model of the repository, kept when its
    metadata has every ``labels`` pair and, when set, ``task``."""

    labels: tuple[tuple[str, str], ...] = ()
    task: str = ""


@dataclass(frozen=True, slots=True)
class CatalogEntry(Message):
    """One model as the catalog lists it, known without loading it. ``versions`` are the
    version folders on disk, ``loadable`` those its version policy loads; ``inputs`` and
    ``outputs`` come from the served config when a version is READY, else from the config
    (auto-completed from the model file where the backend can do that offline), and are empty
    where neither says. ``state`` is the index's (``READY``, ``LOADING``, ``UNLOADING``,
    ``UNAVAILABLE``) or ``NOT_LOADED``; ``error`` says why its config or metadata cannot be
    read; ``metadata`` is its ``catalog.toml``."""

    name: str
    platform: str = ""
    backend: str = ""
    versions: tuple[str, ...] = ()
    loadable: tuple[str, ...] = ()
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    state: str = ""
    reason: str = ""
    error: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Catalog(Message):
    entries: tuple[CatalogEntry, ...]


@dataclass(frozen=True, slots=True)
class LoadRequest(Message):
    """Load or reload ``model``. ``config`` (JSON ModelConfig) and ``files``
    (``"<version>/<path>" -> content``) override the repository for this load only."""

    model: str
    config: str = ""
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UnloadRequest(Message):
    model: str
    unload_dependents: bool = False


@dataclass(frozen=True, slots=True)
class PollRequest(Message):
    """POLL mode: look at the repository now instead of at the next poll (inferd extension);
    the reply comes once the changes found have been acted on."""


@dataclass(frozen=True, slots=True)
class StatisticsRequest(Message):
    """Statistics of one model (all its served versions, or ``version``), or of every model
    when ``model`` is empty."""

    model: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class Statistics(Message):
    """One dict per model version, with Triton's statistics-extension fields (SPEC 5.4)."""

    model_stats: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class MetricsRequest(Message):
    """Ask an actor for its Prometheus samples."""


@dataclass(frozen=True, slots=True)
class Metrics(Message):
    """Prometheus samples: (metric name, labels, value) triples."""

    samples: tuple[tuple[str, dict[str, str], float], ...]


# ----------------------------------------------------------------------- kernel-internal


@dataclass(frozen=True, slots=True)
class ResolveModel(Message):
    """Ask the repository actor for a model's parsed, validated config and versions.
    ``config_override`` (JSON) replaces config.pbtxt; ``path_override`` replaces the folder.
    ``cached_ok``: a remote model's cached copy may stand in while its storage cannot be read
    (control's reload after an executor restart)."""

    model: str
    config_override: str = ""
    path_override: str = ""
    cached_ok: bool = False


@dataclass(frozen=True, slots=True)
class ResolvedModel(Message):
    """A model ready to load: ``config`` is a serialized ``ModelConfig``; ``versions`` the
    version numbers the version policy selects; ``path`` the model folder."""

    model: str
    backend: str
    config: bytes
    path: str
    versions: tuple[int, ...]
    # (version, hash of its version folder and of the model folder's files other than the
    # config and the version folders): a READY version whose hash is unchanged may be kept
    version_fingerprints: tuple[tuple[int, str], ...] = ()
    warnings: tuple[str, ...] = ()  # the config's fields inferd ignores (harmless ones)


@dataclass(frozen=True, slots=True)
class ListModels(Message):
    pass


@dataclass(frozen=True, slots=True)
class FingerprintModels(Message):
    """Ask the repository for a fingerprint of every model folder (for POLL)."""


@dataclass(frozen=True, slots=True)
class Fingerprints(Message):
    """Model name -> a hash that changes whenever anything in its folder changes."""

    fingerprints: dict[str, str]
    # Models that cannot load as they are (found in two roots, ...), with why: a poll
    # neither loads nor unloads them.
    problems: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribeModels(Message):
    """Ask the repository actor for the catalog entries of its models (no state), filtered."""

    labels: tuple[tuple[str, str], ...] = ()
    task: str = ""


@dataclass(frozen=True, slots=True)
class ReadCatalogs(Message):
    """Ask the repository actor for every model's catalog metadata (the index's field)."""


@dataclass(frozen=True, slots=True)
class Catalogs(Message):
    """model -> its ``catalog.toml`` as JSON, for the models that have a valid one."""

    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelList(Message):
    """The models found in the repository roots; ``problems`` maps a name to why it cannot
    be loaded (for instance, found in two roots)."""

    names: tuple[str, ...]
    problems: dict[str, str] = field(default_factory=dict)


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
    serving. The pool splits a load over executor processes (``inferd.kernel.placement``):
    each executor gets the config narrowed to its own instance groups and their count."""

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


@dataclass(frozen=True, slots=True)
class VersionLoaded(Message):
    """Executor -> control: the (possibly auto-completed) config the instances run with,
    and the executor-wide ids of the instances created."""

    config: bytes
    instance_ids: tuple[int, ...]
    executor: str = ""
    # (executor, instance id) of every instance, for a load the pool split over executors
    instances: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class UnloadVersion(Message):
    """Control -> executor: close the instances of one load once their batches finish."""

    load_id: int


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
class StreamInferRequest(Message):
    """Frontend -> scheduler, in the main process only: answered with a ``ResponseStream``
    (``inferd.kernel.streams``) of the request's responses, one for a model that is not
    decoupled, any number for one that is."""

    request: InferRequest


@dataclass(frozen=True, slots=True)
class ServeVersion(Message):
    """Control -> scheduler: route requests for this version to these instances
    (``(executor address, instance id)`` pairs). Serving a version that is already served
    swaps its instances; the reply comes once the replaced instances have no batch left.
    With ``config_only`` a served version keeps its instances and only takes ``config`` (a
    load kept the version, with a new version policy)."""

    model: str
    version: int
    config: bytes
    instances: tuple[tuple[str, int], ...]
    path: str = ""  # the model's folder (a sequence model's initial_state/ files are there)
    config_only: bool = False


@dataclass(frozen=True, slots=True)
class ModelKnown(Message):
    """Control -> scheduler: ``model`` is in the repository though no version of it serves
    (its load failed): its requests hear "has no available versions", not "is not found"."""

    model: str


@dataclass(frozen=True, slots=True)
class RetireVersion(Message):
    """Control -> scheduler: accept no new requests for this version; reply once the ones in
    flight have finished. With a ``reloading`` reason (its executor died and it is being
    loaded again) its requests hear that, retryable, until it serves again."""

    model: str
    version: int
    reloading: str = ""


@dataclass(frozen=True, slots=True)
class LoadStartupModels(Message):
    """Supervisor -> control: load the start-up set of the control mode."""


@dataclass(frozen=True, slots=True)
class StartupReport(Message):
    """Control -> supervisor: each start-up model that failed, with why."""

    failures: dict[str, str]


@dataclass(frozen=True, slots=True)
class ExecutorLost(Message):
    """Executor pool -> control: an executor process died; its instances are gone."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Drain(Message):
    """Ask the scheduler to reply once no request is queued or running (shutdown)."""

    timeout: float


@dataclass(frozen=True, slots=True)
class Shutdown(Message):
    """Ask an actor or executor process to finish its work and stop."""


# ------------------------------------------------------------ logging (Triton extension)


@dataclass(frozen=True, slots=True)
class LogSettingsRequest(Message):
    """Frontend -> data plane -> executor pool: Triton's log settings, after changing the ones
    in ``updates`` (setting name -> value, each checked by ``inferd.protocols.logging_api``)
    all together, or none of them if any cannot be applied. No updates: only read them."""

    updates: dict[str, bool | int | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogSettingsReply(Message):
    """Triton's log settings, named as ``GET v2/logging`` names them."""

    log_file: str
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose_level: int
    log_format: str


@dataclass(frozen=True, slots=True)
class ApplyLogSettings(Message):
    """Executor pool -> each executor process: log by these settings from now on (verbosity,
    severities on or off, ``default``/``ISO8601``, and the log file, "" for the console)."""

    verbose: int
    info: bool
    warning: bool
    error: bool
    format: str
    file: str


# ------------------------------------------------------------ trace (Triton extension)


@dataclass(frozen=True, slots=True)
class TraceSettingRequest(Message):
    """Read (``update`` false) or update the trace settings of ``model`` ("" = global).
    A field left ``None`` keeps its value; a name in ``clear`` reverts to the fallback (the
    global setting for a model, the start-up value for the global one)."""

    model: str = ""
    update: bool = False
    level: tuple[str, ...] | None = None  # () means OFF
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None
    clear: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TraceSettingReply(Message):
    """The settings in force, in Triton's order: name and its values (one, except for the
    level and a repeated option)."""

    settings: tuple[tuple[str, tuple[str, ...]], ...]


# ------------------------------------------------- system shared memory (KServe extension)


@dataclass(frozen=True, slots=True)
class SharedMemoryRef(Message):
    """Where a tensor lies in a registered region: ``byte_size`` bytes from ``offset`` (both
    counted from the start of the region, not of the object it maps)."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(frozen=True, slots=True)
class SharedMemoryInput(Message):
    """An input whose bytes lie in a registered region instead of in the request."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    location: SharedMemoryRef


@dataclass(frozen=True, slots=True)
class SharedMemoryInferRequest(Message):
    """An ``InferRequest`` some of whose inputs or requested outputs live in registered system
    shared-memory regions. ``inputs`` holds every input in request order (``request.inputs``
    is empty); ``output_regions`` maps a requested output to where it must be written. Only
    the data plane takes this kind: the scheduler and executors see a plain ``InferRequest``
    whose inputs are ordinary tensors."""

    request: InferRequest
    inputs: tuple[Tensor | SharedMemoryInput, ...]
    output_regions: dict[str, SharedMemoryRef] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SharedMemoryOutput(Message):
    """An output the data plane wrote into a region: the reply names it, its datatype and its
    shape, and carries no data."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    location: SharedMemoryRef


@dataclass(frozen=True, slots=True)
class SharedMemoryInferResponse(Message):
    """The reply to a ``SharedMemoryInferRequest``: ``InferResponse``'s fields, each output
    either travelling in the reply (a ``Tensor``) or already written (``SharedMemoryOutput``)."""

    model: str
    version: str
    outputs: tuple[Tensor | SharedMemoryOutput, ...]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SharedMemoryRegister(Message):
    """Register ``byte_size`` bytes from ``offset`` of the POSIX shared-memory object ``key``
    as region ``name``. ``memory`` is ``system`` or ``cuda`` (which inferd refuses)."""

    name: str
    key: str
    byte_size: int
    offset: int = 0
    memory: str = "system"


@dataclass(frozen=True, slots=True)
class SharedMemoryUnregister(Message):
    """Unregister region ``name``, or every region of ``memory`` when ``name`` is empty."""

    name: str = ""
    memory: str = "system"


@dataclass(frozen=True, slots=True)
class SharedMemoryStatusRequest(Message):
    """The status of region ``name``, or of every region of ``memory`` when it is empty."""

    name: str = ""
    memory: str = "system"


@dataclass(frozen=True, slots=True)
class SharedMemoryRegionStatus(Message):
    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class SharedMemoryStatus(Message):
    regions: tuple[SharedMemoryRegionStatus, ...]


MESSAGE_KINDS: dict[str, type[Message]] = {
    cls.__name__: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, Message) and cls is not Message
}
