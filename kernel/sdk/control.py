"""The contract of a control policy: an optional part of the model lifecycle.

A control policy takes part in the model lifecycle without owning it (the built-ins: models
on demand and the memory budget, ``inferd.plugins.on_demand``; the control-state record,
``inferd.plugins.control_state``).

The control actor keeps the lifecycle (which versions load, serve and go); at a few points of
it, it calls every policy a plugin opened: around a load (``around_load``: a budget makes room
first), once a model holds nothing (``unloaded``), when a request names a model not served
(``requested``), around a client's load or unload request, once the start-up set is
handled, when the index and the metrics are read, at shutdown. A policy reaches the actor only
through the ``ControlHandle`` it is given, and the data plane through the ``UnservedModels``
it may add. ``inferd_register_control_policies`` registers a ``ControlPolicySpec`` whose
``open(setup)`` returns the policy for this server, or None when its flags leave it off.
Imports only ``inferd.protocols``, the standard library and the registry type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.kernel.sdk.control_state import ControlStateStoreRegistry
from inferd.kernel.sdk.registry import Registry
from inferd.protocols.messages import IndexEntry, Message

__all__ = [
    "ControlHandle", "ControlPolicy", "ControlPolicyRegistry", "ControlPolicySpec",
    "OpenedPolicy", "PolicySetup", "Resolved", "Sample", "UnservedModels", "Usage",
]

Sample = tuple[str, dict[str, str], float]
"""A Prometheus sample: its name, its labels, its value."""

Usage = Mapping[tuple[str, int], tuple[int, bool]]
"""The scheduler's figures: per (model, version), its last inference (ms) and whether busy."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the repository makes of a model before it loads: its backend ("" for an
    ensemble), its config (serialized ``ModelConfig``) and the folder of its files."""

    backend: str
    config: bytes
    path: str


class ControlHandle(Protocol):
    """What a policy may ask of the control actor."""

    def is_ready(self, name: str) -> bool:
        """Whether a version of ``name`` serves."""

    def is_changing(self, name: str) -> bool:
        """Whether ``name`` is being loaded or unloaded now."""

    def loaded_configs(self, name: str) -> list[bytes]:
        """The configs (serialized ``ModelConfig``) of the versions of ``name`` loaded."""

    def named_at_start(self, name: str) -> bool:
        """Whether ``--load-model`` names ``name`` (``*``: every start-up model)."""

    def ensembles_using(self, name: str) -> list[str]:
        """The ensembles loaded or loading that use ``name``."""

    async def usage(self) -> Usage: ...

    async def resolve(self, name: str, config_override: str) -> Resolved:
        """What the repository makes of ``name`` (raises what a load would)."""

    async def load(self, name: str, cause: str) -> None:
        """Load ``name`` as a client's load request would (within every policy)."""

    async def evict(self, name: str, reason: str) -> None:
        """Unload ``name``, its versions' index entries saying ``reason``."""

    async def apply_load(self, name: str, config: str, files: dict[str, bytes],
                         cause: str) -> None:
        """Load ``name`` with these overrides as a load request would, outside every policy;
        once loaded it is one the server must serve."""

    async def apply_unload(self, name: str) -> None:
        """Unload ``name`` and the composing models only it brought in, and forget it if it
        never loaded here."""

    def note_failure(self, name: str, why: str) -> None:
        """Keep ``why`` as the reason the index gives for ``name`` not being loaded."""

    def spawn(self, work: Callable[[], Coroutine[Any, Any, None]]) -> object:
        """Run ``work`` in a task of the actor's own."""


class UnservedModels(Protocol):
    """The data plane's part of a policy: ``call`` sends a request naming ``model`` (through
    ``send``) and answers it, doing what the policy does when the model is not served."""

    async def call(self, send: Callable[[], Awaitable[Message]], request: Message,
                   model: str) -> Message: ...


class ControlPolicy:
    """A policy's calls, each a no-op here: a policy overrides those it takes part in.
    ``loads_on_request``: models load on a request naming them, so the start-up set and a
    poll load no new model, and ensembles bring their composing models in every mode."""

    loads_on_request = False

    async def around_load(self, name: str, config_override: str,
                          load: Callable[[], Awaitable[None]]) -> None:
        """Run ``load`` (of ``name``), with what the policy does around it."""
        await load()

    def unloaded(self, name: str) -> None:
        """``name`` has no version loaded any more."""

    async def started(self, loaded: set[str]) -> None:
        """The start-up set is handled (``loaded``: those that loaded)."""

    async def around_client_load(self, name: str, config: str, files: Mapping[str, bytes],
                                 versions: tuple[int, ...],
                                 load: Callable[[], Awaitable[None]]) -> None:
        """Run ``load``, a client's load request of ``name`` (with these overrides; of
        ``versions`` only, when given); it raises when the load fails."""
        await load()

    async def around_client_unload(self, name: str,
                                   unload: Callable[[], Awaitable[list[str]]]) -> None:
        """Run ``unload``, a client's unload request of ``name``; it returns the models that
        went (``name`` and the dependents that went with it)."""
        await unload()

    def stopping(self) -> None:
        """The server shuts down: the policy starts nothing more."""

    def load_requested(self, name: str) -> None:
        """A client asked for ``name`` to be loaded (the repository API)."""

    async def requested(self, name: str) -> bool:
        """A request named ``name``, which is not served: whether the policy loaded it."""
        return False

    async def annotate(self, entries: tuple[IndexEntry, ...]) -> tuple[IndexEntry, ...]:
        """The index rows, with what the policy adds to them."""
        return entries

    def metrics(self) -> list[Sample]:
        return []


@dataclass(frozen=True, slots=True)
class PolicySetup:
    """What ``ControlPolicySpec.open`` is given: the parsed values of the flags plugins
    declared (``Settings.options``), the control mode, the way to ask control (for the
    data plane's part: ``ask_control(message, timeout)``) and the control-state stores
    plugins registered."""

    options: Mapping[str, Any]
    control_mode: str
    ask_control: Callable[[Message, float], Awaitable[Message]]
    control_state_stores: ControlStateStoreRegistry = field(
        default_factory=ControlStateStoreRegistry)


@dataclass(frozen=True, slots=True)
class OpenedPolicy:
    """A policy as ``open`` returns it: control's part, and the data plane's if it has one."""

    control: Callable[[ControlHandle], ControlPolicy]
    unserved: UnservedModels | None = None


@dataclass(frozen=True, slots=True)
class ControlPolicySpec:
    """``open(setup)``: the policy for this server, None when its flags leave it off;
    ``ValueError`` for a flag it refuses (the server does not start, the message said). It
    runs in a worker thread at start-up, before anything loads: it may block (read a
    record)."""

    name: str
    open: Callable[[PolicySetup], OpenedPolicy | None]


class ControlPolicyRegistry(Registry[ControlPolicySpec]):
    """Filled by ``inferd_register_control_policies``: ``registry.add(ControlPolicySpec(...))``."""

    kind = "control policy"
