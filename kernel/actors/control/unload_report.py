"""What each unload gave back, as control reports it: a log line, the repository index (the
``memory`` of the version's UNAVAILABLE entry, an inferd extension) and two metric families.

Owns the last figures of every (model, version) unloaded: what its load took and what its
unload gave back, resident and on the device (``VersionUnloaded``, from the executor pool,
which adds up a load's parts and counts an ended process's memory as returned). The index's
``reason`` stays Triton's ``unloaded``: clients match on it. Plain data and formatting.
"""

from __future__ import annotations

import logging

from inferd.protocols.messages import VersionUnloaded

log = logging.getLogger(__name__)

LOADED = "inferd_model_unload_footprint_bytes"
RETURNED = "inferd_model_unload_returned_bytes"


def index_figures(reply: VersionUnloaded) -> dict[str, int]:
    """The index's ``memory`` of an unloaded version: bytes its load took and its unload gave
    back, resident (``*_resident_bytes``) and, where a GPU was read, on the device."""
    figures = {"loaded_resident_bytes": reply.loaded_resident,
               "returned_resident_bytes": reply.returned_resident}
    if reply.loaded_device is not None:
        figures["loaded_device_bytes"] = reply.loaded_device
    if reply.returned_device is not None:
        figures["returned_device_bytes"] = reply.returned_device
    return figures


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class UnloadReports:
    """The last unload's figures of every (model, version) unloaded since the start."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], VersionUnloaded] = {}

    def record(self, name: str, version: int, reply: object) -> dict[str, int]:
        """``reply`` is the pool's answer to the unload (anything else: nothing measured,
        nothing reported); returns the index's figures."""
        if not isinstance(reply, VersionUnloaded) or reply == VersionUnloaded():
            return {}
        self._last[(name, version)] = reply
        device = ""
        if reply.loaded_device is not None or reply.returned_device is not None:
            device = (f"; GPU memory: {_mib(reply.returned_device or 0)} returned of "
                      f"{_mib(reply.loaded_device or 0)}")
        log.info("model '%s' version %d unloaded: %s of resident memory returned to the "
                 "system, its load took %s%s", name, version, _mib(reply.returned_resident),
                 _mib(reply.loaded_resident), device)
        return index_figures(reply)

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        samples: list[tuple[str, dict[str, str], float]] = []
        for (name, version), reply in sorted(self._last.items()):
            for memory, loaded, returned in (
                    ("resident", reply.loaded_resident, reply.returned_resident),
                    ("device", reply.loaded_device, reply.returned_device)):
                labels = {"model": name, "version": str(version), "memory": memory}
                if loaded is not None:
                    samples.append((LOADED, labels, loaded))
                if returned is not None:
                    samples.append((RETURNED, labels, returned))
        return samples
