"""The control-state record (``--model-control-state``, an inferd extension) as a control
policy: replicas in EXPLICIT mode that agree on what is loaded.

Owns what the control-state record (its format: ``inferd.kernel.sdk.control_state``) means to
a replica: every successful load and unload of the repository API is written to it (a load that
matches it writes nothing); at start-up, after ``--load-model``, each model it names is loaded with
its overrides (one that fails shows in the index and stops nothing, whatever ``--exit-on-error``
says: one bad entry must not crash-loop every replica); and while running the replica follows
it, re-reading it every ``--model-control-state-poll-secs`` (a stat or a HEAD when nothing
changed) and converging: loading what another replica added or changed, unloading what it
removed (an ensemble with the composing models only it brought in: what a replica started
on the record serves). The replica's own loads while following write nothing back.

What the replica last applied of each model is kept with the record generation it came from
(``None`` for a removal); the follower acts on a model only from a newer generation, and under
that model's lock, which an API load holds too from its load to its write: a follower that
read the record just before this replica's own write never undoes it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from inferd.kernel.sdk import ControlStateStore, Entry, Record, RecordError
from inferd.kernel.sdk.control import ControlHandle, ControlPolicy
from inferd.protocols.errors import InferdError, NotFound, Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")



class ControlStateRecord(ControlPolicy):
    """The control-state record as one replica's control actor calls it. ``start`` is the
    record as read at start-up (before anything loads) and its token; ``poll_secs`` how
    often the record is re-read (0: never). It loads, unloads and marks a model failed, and
    runs its follower, through ``control``."""

    def __init__(
        self, control: ControlHandle, store: ControlStateStore,
        start: tuple[Record, str | None], *, poll_secs: float,
    ) -> None:
        self._store = store
        self._start_record, self._token = start
        self._poll_secs = poll_secs
        self._control = control
        self._applied: dict[str, tuple[Entry | None, int]] = {}
        self._generation = 0  # the newest generation seen
        self._model_locks: defaultdict[str, anyio.Lock] = defaultdict(anyio.Lock)
        self._problem = ""  # the last read's error, logged once
        self._following = True

    def stopping(self) -> None:
        """Shutting down: the follower acts no more (what it does now finishes)."""
        self._following = False

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(function, *args)

    # ------------------------------------------------------------------ the API's writes

    async def around_client_load(self, name: str, config: str, files: Mapping[str, bytes],
                                 versions: tuple[int, ...],
                                 load: Callable[[], Awaitable[None]]) -> None:
        """An API load, under the model's lock from its start to its write: a successful one
        gets its entry in the record (nothing written if it is there). Single versions are
        not recorded (docs/versions.md)."""
        async with self._model_locks[name]:
            await load()
            if not versions:
                entry, blobs = Entry.of_load(config, files)
                await self._write(name, entry, lambda record: record.with_model(name, entry),
                                  blobs, f"'{name}' is loaded")

    async def around_client_unload(self, name: str,
                                   unload: Callable[[], Awaitable[list[str]]]) -> None:
        """An API unload of ``name``: what went (it and the dependents that went with it)
        is removed from the record."""
        async with self._model_locks[name]:
            unloaded = await unload()
            await self._write(name, None, lambda record: record.without(*unloaded), {},
                              f"'{name}' is unloaded")
            for other in unloaded:
                self._applied[other] = (None, self._applied[name][1])

    async def _write(self, name: str, entry: Entry | None,
                     change: Callable[[Record], Mapping[str, Entry] | None],
                     blobs: Mapping[str, bytes], done: str) -> None:
        try:
            record = await self._in_thread(self._store.update, change, blobs)
        except RecordError as error:
            log.error("the control-state record was not updated: %s", error)
            raise Unavailable(f"{done}, but --model-control-state was not updated (other "
                              f"replicas will not follow): {error}") from None
        self._applied[name] = (entry, record.generation)
        self._generation = max(self._generation, record.generation)

    # ------------------------------------------------------------------ start-up, following

    async def started(self, loaded: set[str]) -> None:
        """After ``--load-model``: load what the record names (a plain entry already loaded
        by ``--load-model`` is left as it is), then follow the record."""
        record = self._start_record
        self._generation = record.generation
        async with anyio.create_task_group() as tasks:
            for name, entry in record.models.items():
                if entry == Entry() and name in loaded:
                    self._applied[name] = (entry, record.generation)
                else:
                    tasks.start_soon(self._follow_model, name, record, "start-up")
        if self._poll_secs > 0:
            self._control.spawn(self._follow_forever)

    async def _follow_forever(self) -> None:
        while True:
            await anyio.sleep(self._poll_secs)
            if not self._following:
                return
            try:
                token = await self._in_thread(self._store.token)
                if token == self._token:
                    continue
                if token is None:  # a record that vanished is not an empty one
                    raise RecordError(f"{self._store.where}: the record is gone")
                record, self._token = await self._in_thread(self._store.read)
            except RecordError as error:
                if str(error) != self._problem:
                    log.error("cannot follow the control-state record, keeping the models "
                              "served: %s", error)
                self._problem = str(error)
                continue
            if self._problem:
                log.info("the control-state record %s is readable again", self._store.where)
                self._problem = ""
            try:
                await self._converge(record)
            except Exception:  # the follower must outlive any one failure; it says why
                log.exception("following the control-state record failed")

    async def _converge(self, record: Record) -> None:
        if record.generation < self._generation:
            # The record was replaced by an older one (restored, or removed and started
            # again): follow it as it is.
            log.warning("the control-state record went back from generation %d to %d",
                        self._generation, record.generation)
            self._applied = {name: (entry, -1) for name, (entry, _) in self._applied.items()}
        self._generation = record.generation
        names = set(record.models) | {n for n, (e, _) in self._applied.items() if e is not None}
        async with anyio.create_task_group() as tasks:
            for name in sorted(names):
                if self._stale(name, record):
                    tasks.start_soon(self._follow_model, name, record, "follow")

    def _stale(self, name: str, record: Record) -> bool:
        entry, generation = self._applied.get(name, (None, -1))
        stale: bool = generation < record.generation and entry != record.models.get(name)
        return stale

    async def _follow_model(self, name: str, record: Record, why: str) -> None:
        """Bring ``name`` to what ``record`` says (unless this replica knows newer)."""
        async with self._model_locks[name]:
            if why != "start-up" and not self._stale(name, record):
                return
            entry = record.models.get(name)
            self._applied[name] = (entry, record.generation)
            if entry is None:
                # With the composing models only it brought in: what a replica started on the
                # record would serve (whether the writer cascaded or not).
                await self._control.apply_unload(name)
                return
            cause = f"the control-state record ({why}, generation {record.generation})"
            try:
                files = {path: await self._in_thread(self._store.blob, sha)
                         for path, sha in entry.files.items()}
                await self._control.apply_load(name, entry.config, files, cause)
            except (InferdError, RecordError) as error:
                message = error.message if isinstance(error, InferdError) else str(error)
                if isinstance(error, (NotFound, RecordError)):
                    self._control.note_failure(name, f"{cause}: {message}")  # the index says why
                log.error("%s: loading '%s' failed: %s", cause, name, message)
