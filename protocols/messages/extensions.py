"""The messages of three Triton/KServe extensions: logging (read and change the log settings,
and apply them in each executor process), trace settings, and system shared memory (requests
and replies whose tensors lie in registered regions, and the register, unregister and status
calls). Data shapes only: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.protocols.messages.base import Message, Tensor
from inferd.protocols.messages.dataplane import InferRequest


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
    as region ``name``; or, with ``memory="cuda"``, ``byte_size`` bytes of the GPU memory the
    CUDA IPC handle ``raw_handle`` names on device ``device_id`` (``key`` and ``offset``
    unused)."""

    name: str
    key: str
    byte_size: int
    offset: int = 0
    memory: str = "system"
    raw_handle: bytes = b""
    device_id: int = 0


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
    """One region's status row; a CUDA region's has no key or offset, a system one's no
    device."""

    name: str
    key: str
    offset: int
    byte_size: int
    device_id: int = 0


@dataclass(frozen=True, slots=True)
class SharedMemoryStatus(Message):
    regions: tuple[SharedMemoryRegionStatus, ...]
