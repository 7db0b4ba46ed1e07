"""What an unload gave back over every executor a load was split over, as control hears it.

Owns two rules: the figures of a load's parts add up (``total``), and an executor process
that ends with its last model (an isolated one: ``--cpu-executor process`` pools stay)
gives back all it still held at its exit, resident and on the device (``ended``). Its
resident memory (with its python stubs) is read just before it is stopped; the process is
checked to have exited before its memory counts as returned. Pure, except that one reading.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from inferd.kernel.sdk.memory_meter import resident_bytes
from inferd.protocols.messages import VersionUnloaded

log = logging.getLogger(__name__)


def _sum(values: Iterable[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def total(parts: Iterable[VersionUnloaded]) -> VersionUnloaded:
    """One reply for a load whose parts each answered one."""
    replies = list(parts)
    return VersionUnloaded(
        sum(r.loaded_resident for r in replies), sum(r.returned_resident for r in replies),
        _sum(r.loaded_device for r in replies), _sum(r.returned_device for r in replies))


def held_by(pid: int | None) -> int:
    """The resident bytes of the process ``pid`` and those below it (0: gone, or none)."""
    return (resident_bytes(pid) or 0) if pid else 0


def ended(reply: VersionUnloaded, name: str, held: int, exited: bool) -> VersionUnloaded:
    """``reply`` of the executor process ``name``, which held ``held`` bytes after the unload
    and was then stopped: once it has ``exited``, that is returned too, and on the device
    whatever its load took (a process's CUDA memory goes with it)."""
    if not exited:
        log.warning("%s was stopped but has not exited: its memory is not returned", name)
        return reply
    log.info("%s exited with its model: %.1f MiB resident returned to the system", name,
             held / (1 << 20))
    device = reply.returned_device
    if reply.loaded_device is not None:
        device = max(device or 0, reply.loaded_device)
    return VersionUnloaded(reply.loaded_resident, reply.returned_resident + held,
                           reply.loaded_device, device)
