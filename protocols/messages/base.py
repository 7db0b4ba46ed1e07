"""The ground every message kind stands on: ``Tensor``, the ``Message`` marker base, the
``Envelope`` that carries a message between actors with its routing header, the replies
any ask may get (``Ack``, ``Failure``) or any asker may send (``Cancel``), and ``DeviceWindow``,
where a tensor's bytes lie in a client's CUDA shared memory. Data shapes only: no I/O, no logic
beyond trivial accessors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class DeviceWindow(Message):
    """``byte_size`` bytes from ``offset`` of a registered CUDA shared-memory region, as the
    main process hands it to a GPU executor instead of the bytes: the client's IPC ``handle``,
    the ``device_id`` as the server counts GPUs, and ``region``, the registration's serial
    (``CloseDeviceRegions`` names it when the main process lets go of the region)."""

    handle: bytes
    device_id: int
    offset: int
    byte_size: int
    region: int
