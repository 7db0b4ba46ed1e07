"""The server's and the models' lifecycle between control, the scheduler and the supervisor:
serving and retiring versions, the start-up load and its report, a lost executor, draining
and shutting down. Kernel-internal. Data shapes only: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.protocols.messages.base import Message


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
    # Its warm-up executions (VersionLoaded's), counted in its statistics as Triton counts them
    warmup: tuple[tuple[int, int, int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ModelKnown(Message):
    """Control -> scheduler: ``model`` has versions though none of them may serve, as in
    Triton once a load got past its config: its requests hear "has no available versions"
    (a request naming one of ``loading``, "is not at ready state"), not "is not found".
    Sent when a load starts bringing up ``loading``, and (without them) when a load failed,
    which also ends the wait for a reload after an executor died."""

    model: str
    loading: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteLabels(Message):
    """Control -> scheduler: where a request for ``model`` that names no version goes (its
    version labels, an inferd extension): to ``stable`` (0: the highest live version) and
    ``canary_percent`` of them to ``canary`` (0: none). All zero: as in Triton."""

    model: str
    stable: int = 0
    canary: int = 0
    canary_percent: float = 0.0


@dataclass(frozen=True, slots=True)
class RetireVersion(Message):
    """Control -> scheduler: accept no new requests for this version; reply once the ones in
    flight have finished. With a ``reloading`` reason (its executor died and it is being
    loaded again) its requests hear that, retryable, until it serves again. Without ``wait``
    the reply (``Retired``) comes at once, saying whether requests are still in flight."""

    model: str
    version: int
    reloading: str = ""
    wait: bool = True


@dataclass(frozen=True, slots=True)
class Retired(Message):
    """Scheduler -> control: the reply to a ``RetireVersion`` without ``wait``."""

    in_flight: bool


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


@dataclass(frozen=True, slots=True)
class LoadOnDemand(Message):
    """Data plane -> control (``--model-load-on-demand``): a request named ``model``, which
    the scheduler does not serve; answered once it is loaded (``Ack``) or with why it is not."""

    model: str


@dataclass(frozen=True, slots=True)
class UsageRequest(Message):
    """Control -> scheduler: how each served version is used (for the memory budget's
    choice of what to unload)."""


@dataclass(frozen=True, slots=True)
class Usage(Message):
    """Per served version ``(model, version, last inference in ms since the epoch, busy)``;
    busy: requests queued, running or pinned by an ensemble request."""

    versions: tuple[tuple[str, int, int, bool], ...] = ()
