"""Control's memory budget per device (``--model-memory-budget``, an inferd extension), an
object the policy of this plugin (``policy``) calls around every load of a model with instances.

Owns each loaded model's footprint (declared by the config parameter
``INFERD_MEMORY_BYTES``, else measured after its load: the growth of the resident memory of
the server and its executor processes for a CPU model, of the device memory NVML reports for
a GPU model, and never less than its files; ``memory_meter``), the
budget of each device and its use, and when a load would not fit what to unload
(``budget_rules`` chooses): the least recently used idle models on that device,
never a pinned one
(``--load-model``, ``INFERD_PIN``), one with requests queued or running, one being loaded or
unloaded, or a composing model of an ensemble that is busy or loading (an idle ensemble goes
with its composing model). A model with a declared size has it reserved and loads beside
others; loads that are measured run one at a time, so a measurement sees one load's growth
only. When nothing more can go, the load fails with a 503 naming the budget and
what holds it. The unloading itself, the model status and the scheduler's usage figures are
control's, passed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk import MemoryMeter, folder_bytes
from inferd.kernel.sdk.control import Usage
from inferd.plugins.on_demand.budget_rules import (
    Candidate,
    choose_evictions,
    declared_bytes,
    device_of,
    format_bytes,
)
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import IndexEntry

log = logging.getLogger(__name__)


class NoRoom(Unavailable):
    """A load the budget has no room for, however much it unloads (503)."""


@dataclass(slots=True)
class Footprint:
    device: str
    held: int  # bytes, for all its versions
    measured: bool  # False: declared by INFERD_MEMORY_BYTES


@dataclass(slots=True)
class BudgetCounters:
    evictions: dict[str, int] = field(default_factory=dict)  # per device
    refused: dict[str, int] = field(default_factory=dict)  # loads that could not fit


class MemoryBudget:
    """``budgets``: bytes per device (``parse_budget``). What it needs of the actor:
    ``changing(name)`` (being loaded or unloaded), ``usage()`` (the scheduler's figures),
    ``pinned(name)``,
    ``ensembles_using(name)`` (the ensembles loaded or loading that use it) and
    ``evict(name, reason)`` (unload it, its versions' index entries saying ``reason``)."""

    def __init__(
        self, budgets: tuple[tuple[str, int], ...], *, changing: Callable[[str], bool],
        usage: Callable[[], Awaitable[Usage]], pinned: Callable[[str], bool],
        ensembles_using: Callable[[str], list[str]],
        evict: Callable[[str, str], Awaitable[None]], meter: MemoryMeter | None = None,
    ) -> None:
        self.budgets = dict(budgets)
        self._changing = changing
        self._usage = usage
        self._pinned = pinned
        self._ensembles_using = ensembles_using
        self._evict = evict
        self._meter = meter if meter is not None else MemoryMeter()
        self.footprints: dict[str, Footprint] = {}  # per loaded model
        self._remembered: dict[str, int] = {}  # a model's last footprint, once unloaded
        self._touched: dict[str, int] = {}  # ms: when a request last asked for it to load
        self._loading: set[str] = set()  # loads under way within the budget
        self._lock = anyio.Lock()
        self.counters = BudgetCounters()

    def touch(self, name: str) -> None:
        """A request asked for ``name``: it counts as used now (a model just loaded for a
        request is not the least recently used before that request ran)."""
        self._touched[name] = int(time.time() * 1000)

    def used(self, device: str) -> int:
        return sum(f.held for f in self.footprints.values() if f.device == device)

    async def load_within(self, name: str, config: ModelConfig, path: str,
                          load: Callable[[], Awaitable[None]]) -> None:
        """Run ``load`` (of ``name``, whose config is ``config`` and files ``path``) within
        its device's budget: first unload what must go for it to fit, then keep what it
        holds. A declared size is reserved and loads beside other loads; a measured one
        loads alone, so that the meter sees its growth only."""
        device = device_of(config)
        budget = self.budgets.get(device)
        declared = declared_bytes(config)
        if budget is None:
            await load()
            if declared is not None:
                self.footprints[name] = Footprint(device, declared, False)
            return
        if declared is not None:
            await self._load_declared(name, device, budget, declared, load)
            return
        async with self._lock:
            files = folder_bytes(path)
            # Its files at least, else what it held last time (a first load in the process
            # also holds the framework's own start-up, which may read larger than the
            # budget: only a declared size or its files refuse the load outright).
            need = max(files, min(self._remembered.get(name, 0), budget))
            await self._make_room(name, device, need, budget)
            before = self._meter.reading(device)
            await self._loading_while(name, load)
            after = self._meter.reading(device)
            grown = after - before if after is not None and before is not None else need
            # Growth reads low when the allocator reuses what an unloaded model freed: a
            # model holds at least its files.
            held = max(grown, files)
            self.footprints[name] = Footprint(device, held, True)
            self._remembered[name] = held
            if self.used(device) > budget:  # it holds more than it was thought to
                try:
                    await self._make_room(name, device, held, budget)
                except NoRoom as error:
                    log.warning("the %s budget is exceeded, '%s' stays loaded: %s", device,
                                name, error.message)
            self._loaded(name, device, budget)

    async def _load_declared(self, name: str, device: str, budget: int, declared: int,
                             load: Callable[[], Awaitable[None]]) -> None:
        async with self._lock:
            await self._make_room(name, device, declared, budget)
            previous = self.footprints.get(name)
            self.footprints[name] = Footprint(device, declared, False)  # reserved
            self._loading.add(name)
        try:
            await self._loading_while(name, load)
        except BaseException:
            if previous is not None:  # a reload that failed: the copy serving stays
                self.footprints[name] = previous
            else:
                self.footprints.pop(name, None)
            raise
        self._loaded(name, device, budget)

    async def _loading_while(self, name: str, load: Callable[[], Awaitable[None]]) -> None:
        """``load()``, with ``name`` kept from eviction until it is done."""
        self._loading.add(name)
        try:
            await load()
        finally:
            self._loading.discard(name)
        self.touch(name)

    def _loaded(self, name: str, device: str, budget: int) -> None:
        log.info("model '%s' holds %s of the %s budget (%s of %s used)", name,
                 format_bytes(self.footprints[name].held), device,
                 format_bytes(self.used(device)), format_bytes(budget))

    def unloaded(self, name: str) -> None:
        """``name`` has no version loaded any more: it holds nothing."""
        self.footprints.pop(name, None)

    async def _make_room(self, name: str, device: str, need: int, budget: int) -> None:
        usage = await self._usage()
        candidates, holders = self._candidates(name, device, usage)
        used = self.used(device) - (self.footprints[name].held if name in self.footprints
                                    else 0)
        chosen = choose_evictions(need, budget, used, candidates)
        if chosen is None:
            self.counters.refused[device] = self.counters.refused.get(device, 0) + 1
            opening = (f"cannot load '{name}' within the {device} memory budget of "
                       f"{format_bytes(budget)} (--model-memory-budget): it needs about "
                       f"{format_bytes(need)}")
            if need > budget:
                raise NoRoom(f"{opening}, more than the whole budget")
            held = ", ".join(f"'{model}' ({format_bytes(size)}, {why})"
                             for model, size, why in holders) or "nothing"
            raise NoRoom(
                f"{opening}, {format_bytes(max(0, budget - used))} is free, and what holds "
                f"the rest cannot be unloaded now: {held}")
        reason = (f"unloaded: evicted to make room for '{name}' ({device} budget "
                  f"{format_bytes(budget)})")
        for candidate in chosen:
            log.info("model '%s' (%s, last used %s) is unloaded to make room for '%s' in "
                     "the %s budget", candidate.model, format_bytes(candidate.held),
                     _when(candidate.last_used_ms), name, device)
            for ensemble in candidate.ensembles:
                await self._evict(ensemble, reason)
            await self._evict(candidate.model, reason)
            self.footprints.pop(candidate.model, None)
            self.counters.evictions[device] = self.counters.evictions.get(device, 0) + 1

    def _candidates(self, name: str, device: str, usage: Usage
                    ) -> tuple[list[Candidate], list[tuple[str, int, str]]]:
        """What may go to make room on ``device``, and what may not (model, bytes, why)."""
        candidates: list[Candidate] = []
        holders: list[tuple[str, int, str]] = []
        for model, footprint in sorted(self.footprints.items()):
            if footprint.device != device or model == name:
                continue
            why = self._why_kept(model, usage)
            ensembles = tuple(self._ensembles_using(model))
            for ensemble in ensembles if not why else ():
                kept = self._why_kept(ensemble, usage)
                if kept:
                    why = f"used by ensemble '{ensemble}', {kept}"
                    break
            if why:
                holders.append((model, footprint.held, why))
                continue
            last = max([self._touched.get(model, 0), self._last_used(model, usage),
                        *(self._last_used(e, usage) for e in ensembles),
                        *(self._touched.get(e, 0) for e in ensembles)])
            candidates.append(Candidate(model, footprint.held, last, ensembles))
        return candidates, holders

    def _why_kept(self, model: str, usage: Usage) -> str:
        if self._pinned(model):
            return "pinned"
        if model in self._loading or self._changing(model):
            return "loading or unloading"
        if any(busy for (m, _), (_, busy) in usage.items() if m == model):
            return "in use"
        return ""

    @staticmethod
    def _last_used(model: str, usage: Usage) -> int:
        return max((last for (m, _), (last, _) in usage.items() if m == model), default=0)

    def annotate(self, entries: tuple[IndexEntry, ...], usage: Usage
                 ) -> tuple[IndexEntry, ...]:
        """The index ``entries`` with what each READY version holds (its model's footprint
        shared among its READY versions) and its last use (inference or on-demand request)."""
        ready: dict[str, int] = {}
        for entry in entries:
            if entry.state == "READY":
                ready[entry.name] = ready.get(entry.name, 0) + 1
        annotated = []
        for entry in entries:
            footprint = self.footprints.get(entry.name)
            if entry.state == "READY" and entry.version.isdigit():
                held = footprint.held // ready[entry.name] if footprint is not None else 0
                last, _ = usage.get((entry.name, int(entry.version)), (0, False))
                entry = replace(entry, memory_bytes=held,
                                last_used_ms=max(last, self._touched.get(entry.name, 0)))
            annotated.append(entry)
        return tuple(annotated)

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        samples: list[tuple[str, dict[str, str], float]] = []
        for device, budget in sorted(self.budgets.items()):
            samples += [
                ("inferd_model_memory_budget_bytes", {"device": device}, budget),
                ("inferd_model_memory_used_bytes", {"device": device}, self.used(device)),
                ("inferd_model_evictions_total", {"device": device},
                 self.counters.evictions.get(device, 0)),
                ("inferd_model_budget_refusals_total", {"device": device},
                 self.counters.refused.get(device, 0)),
            ]
        samples += [
            ("inferd_model_memory_bytes",
             {"model": model, "device": f.device, "measured": str(f.measured).lower()}, f.held)
            for model, f in sorted(self.footprints.items())
        ]
        return samples


def _when(ms: int) -> str:
    return "never" if not ms else f"{(time.time() * 1000 - ms) / 1000:.1f} s ago"
