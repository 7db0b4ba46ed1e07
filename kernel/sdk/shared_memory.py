"""The contract of client shared memory: the KServe extension a plugin provides.

Clients of Triton may register regions of system (POSIX) or CUDA memory and name them for a
request's inputs and outputs, so tensors cross without being sent. In inferd this is an
optional feature (the built-in plugin ``inferd.plugins.shared_memory``): the frontends decode
the extension's endpoints and a request naming regions into messages, and the data plane asks
the one ``SharedMemory`` a plugin opened to answer them. ``inferd_register_shared_memory``
registers a ``SharedMemorySpec`` whose ``open(setup)`` is called once at start-up; the data
plane then calls the provider directly (no hook per request).

Without a provider the data plane answers the extension's endpoints with Triton's words for
client shared memory that is off (``CLIENT_SHM_DISABLED``, UNIMPLEMENTED / 501) and refuses a
request naming a region (INVALID_ARGUMENT / 400), and the server lists neither extension.
Imports only ``inferd.protocols``, the standard library and the SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.kernel.sdk.registry import Registry
from inferd.protocols.messages import (
    InferRequest,
    InferResponse,
    Message,
    SharedMemoryInferRequest,
    SharedMemoryInferResponse,
    SharedMemoryRegister,
    SharedMemoryStatusRequest,
    SharedMemoryUnregister,
)

__all__ = [
    "CLIENT_SHM_DISABLED", "SERVER_OBJECT_PREFIX", "FinishInference", "OnClosed", "SharedMemory",
    "SharedMemoryProviders", "SharedMemoryRequest", "SharedMemorySetup", "SharedMemorySpec",
]

CLIENT_SHM_DISABLED = ("Client shared memory is disabled. Start the server with "
                       "'--allow-client-shm=true' to enable.")
"""Triton's words (UNIMPLEMENTED / 501) for a register or unregister while client shared
memory is off; inferd answers every endpoint of the extension so without a provider."""

SERVER_OBJECT_PREFIX = "inferd-"
"""How the server names the shared-memory objects and folders it creates itself
(``inferd-<pid>-...``: the process link's segments, the run folder). A provider must refuse a
client's key naming one: that client could read or write other clients' tensors."""

SharedMemoryRequest = SharedMemoryRegister | SharedMemoryUnregister | SharedMemoryStatusRequest
"""The extension's own requests: register, unregister, status (``memory``: system or cuda)."""

OnClosed = Callable[[int, frozenset[str]], None]
"""``on_closed(region serial, executors)``: a CUDA region's handle closed here; the executors
that were sent its windows may close theirs."""

FinishInference = Callable[[InferResponse], SharedMemoryInferResponse]
"""What turns the model's reply into the client's: outputs asked in regions written there."""


class SharedMemory(Protocol):
    """The regions of this server, as the data plane asks about them (from the event loop)."""

    @property
    def extensions(self) -> tuple[str, ...]:
        """The KServe extensions it adds to the server's metadata (``system_shared_memory``,
        ``cuda_shared_memory``)."""

    def answer(self, request: SharedMemoryRequest) -> Message:
        """An ``Ack`` for a register or unregister, a ``SharedMemoryStatus`` for a status;
        raises ``InferdError`` with Triton's status and message otherwise."""

    def prepare(self, request: SharedMemoryInferRequest
                ) -> tuple[InferRequest, FinishInference]:
        """The plain request the scheduler is sent (inputs as tensors over the regions' memory
        or device tensors of CUDA windows, ``output_windows`` for outputs asked in CUDA) and
        what finishes its reply. Checks every region and window first, so a bad one costs no
        inference; what it returns keeps the regions' memory alive until it is done."""

    def usage(self) -> tuple[int, int]:
        """The bytes and the number of system regions registered (for the metrics)."""

    def close(self) -> None:
        """Unmaps every region and closes every CUDA handle (at shutdown)."""


@dataclass(frozen=True, slots=True)
class SharedMemorySetup:
    """What a provider is opened with: the parsed plugin options (``Settings.options``) and
    ``on_closed``, to call (from any thread) when a CUDA region whose windows went to
    executors has closed, so the data plane tells them to close theirs."""

    options: Mapping[str, Any]
    on_closed: OnClosed


@dataclass(frozen=True, slots=True)
class SharedMemorySpec:
    """A provider of client shared memory: ``open(setup)`` makes it at start-up."""

    name: str
    open: Callable[[SharedMemorySetup], SharedMemory]


class SharedMemoryProviders(Registry[SharedMemorySpec]):
    """The registered providers; a server uses at most one (two are a start-up error)."""

    kind = "shared memory provider"
