"""The data plane's requests and replies: what the frontends and native clients ask (inference,
health, server and model metadata, model config, the repository index and catalog, load,
unload and poll, statistics, metrics) and what they are answered. Data shapes only: no I/O,
no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.protocols.messages.base import DeviceWindow, Message, Tensor


@dataclass(frozen=True, slots=True)
class InferRequest(Message):
    """One inference request. ``version`` empty means the highest READY version; ``outputs``
    empty means every output of the model. ``classification`` maps a requested output to
    the number of its top classes to return instead of its values (the classification
    extension). ``output_windows`` maps a requested output to the CUDA shared memory it is
    written into on the device (the data plane sets it; the scheduler keeps it only for a
    request it sends to a GPU executor of that memory's device, which writes it there)."""

    model: str
    inputs: tuple[Tensor, ...]
    version: str = ""
    id: str = ""
    outputs: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    classification: dict[str, int] = field(default_factory=dict)
    output_windows: dict[str, DeviceWindow] = field(default_factory=dict)


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
    # The model's catalog metadata (an inferd extension;
    # ``inferd.kernel.actors.repository.catalog``).
    catalog: dict[str, Any] = field(default_factory=dict)
    # With --model-memory-budget (inferd's): the bytes a READY version holds and its last
    # inference (ms since the epoch), 0 when not known.
    memory_bytes: int = 0
    last_used_ms: int = 0
    # An unloaded version's: bytes its load took and its unload gave back (inferd's;
    # ``inferd.kernel.actors.control.unload_report``). Measurements, not the row's identity:
    # two rows that differ only there are equal.
    memory: dict[str, int] = field(default_factory=dict, compare=False)


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
    # inferd's: load exactly these versions (any with a folder), leaving the others as they
    # are; empty: Triton's load, the versions the policy (and the version labels) select.
    versions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class UnloadRequest(Message):
    model: str
    unload_dependents: bool = False
    versions: tuple[int, ...] = ()  # inferd's: unload only these, the others serve on


@dataclass(frozen=True, slots=True)
class LabelsRequest(Message):
    """Read (nothing to change) or move a model's version labels (an inferd extension):
    ``labels`` set (label -> version), ``remove`` dropped, ``canary_percent`` set unless
    negative. Answered with the model's ``VersionLabelsReply`` once the switch is done."""

    model: str
    labels: dict[str, int] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    canary_percent: float = -1.0


@dataclass(frozen=True, slots=True)
class VersionLabelsReply(Message):
    model: str
    labels: dict[str, int] = field(default_factory=dict)
    canary_percent: float = 0.0


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
