"""What the control actor knows of each model and each of its versions.

Owns the states a (model, version) goes through (LOADING, READY, UNLOADING, UNAVAILABLE with
a reason; NOT_LOADED in the catalog) and the records control keeps of them: per version its
state, what it was loaded from and with (so a later load can keep it), where its instances
live; per model its versions, an error known before any version, and the lock that serializes
its loads. Plain data: control and its helpers change it, nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio


class State:
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"
    NOT_LOADED = "NOT_LOADED"  # the catalog's word for a model never loaded (inferd's)


@dataclass(slots=True)
class VersionStatus:
    state: str
    reason: str = ""
    load_id: int = 0
    executors: tuple[str, ...] = ()  # the processes its instances live in
    load_secs: float = 0.0
    # What a later load compares to keep it (inferd.kernel.actors.control.version_reuse), and what
    # it serves.
    signature: bytes = b""
    fingerprint: str = ""
    path: str = ""
    config: bytes = b""  # the auto-completed config the scheduler serves it with
    instances: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()  # its config's fields inferd ignores (for the index)
    warmup: tuple[tuple[int, int, int, int, int], ...] = ()  # VersionLoaded's, to serve with
    memory: dict[str, int] = field(default_factory=dict)  # what its unload gave back (index)


@dataclass(slots=True)
class ModelStatus:
    versions: dict[int, VersionStatus] = field(default_factory=dict)
    error: str = ""  # a failure before any version was known (bad config, ...)
    error_version: int | None = None  # the version whose own failure ``error`` reports
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    override_dir: str = ""
    cause: str = ""  # why the load under way (or the last one) happens, for the log
    # Set by an unload once every version takes no new request and some have requests in
    # flight: an unload request is answered then (as Triton's), not when they finish.
    draining: anyio.Event = field(default_factory=anyio.Event)

    def ready(self) -> bool:
        return any(v.state == State.READY for v in self.versions.values())

    def serving(self) -> list[int]:
        """The numbers of the READY versions, in order."""
        return sorted(n for n, v in self.versions.items() if v.state == State.READY)

