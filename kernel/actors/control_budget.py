"""Control's memory budget per device (``--model-memory-budget``, an inferd extension), an
object the control actor owns and calls around every load of a model with instances.

Owns each loaded version's footprint (declared by the config parameter
``INFERD_MEMORY_BYTES``, else measured after its load: the growth of the resident memory of
the server and its executor processes for a CPU model, of the device memory NVML reports for
a GPU model), the budget of each device and its use, and the choice of what to unload when a
load would not fit: the least recently used idle models on that device, never a pinned one
(``--load-model``, ``INFERD_PIN``), one with requests queued or running, one being loaded or
unloaded, or a composing model of an ensemble that is busy or loading (an idle ensemble goes
with its composing model). Loads within a budget run one at a time, so a measurement sees one
load's growth only. When nothing more can go, the load fails with a 503 naming the budget and
what holds it. The unloading itself, the model status and the scheduler's usage figures are
the actor's, passed in.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.model_status import ModelStatus, State
from inferd.kernel.process_metrics import PROC, machine_memory, process_usage
from inferd.protocols.errors import Unavailable
from inferd.protocols.messages import IndexEntry

log = logging.getLogger(__name__)

MEMORY_PARAMETER = "INFERD_MEMORY_BYTES"
PIN_PARAMETER = "INFERD_PIN"

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DEVICE = re.compile(r"^(cpu|gpu\d+)$")


# ---------------------------------------------------------------------- pure parts


def parse_size(text: str) -> int:
    """``16GiB``, ``500MB``, ``1048576``: a number of bytes (``ValueError`` otherwise)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"expected a size such as 16GiB, 500MB or 1048576, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_budget(text: str, device_total: Callable[[str], int | None]
                 ) -> tuple[tuple[str, int], ...]:
    """``cpu=16GiB,gpu0=70%``: each device's budget in bytes; a percentage is of the
    device's total memory (``device_total``). ``ValueError`` says what is wrong."""
    budgets: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        device, equals, amount = part.partition("=")
        device = device.strip().lower()
        if not equals or not _DEVICE.match(device):
            raise ValueError(f"expected DEVICE=SIZE or DEVICE=PERCENT% with DEVICE cpu or gpuN, "
                             f"got {part!r}")
        if device in budgets:
            raise ValueError(f"device {device} is given twice")
        amount = amount.strip()
        if amount.endswith("%"):
            try:
                share = float(amount[:-1])
            except ValueError:
                share = -1.0
            if not 0 < share <= 100:
                raise ValueError(f"{part}: a percentage above 0 and at most 100")
            total = device_total(device)
            if total is None:
                raise ValueError(f"{part}: the total memory of {device} is not known here")
            budgets[device] = int(total * share / 100)
        else:
            budgets[device] = parse_size(amount)
        if budgets[device] <= 0:
            raise ValueError(f"{part}: a budget above 0 bytes")
    if not budgets:
        raise ValueError("expected at least one DEVICE=SIZE")
    return tuple(sorted(budgets.items()))


def format_bytes(count: float) -> str:
    """``16 GiB``, ``1.5 MiB``, ``512 B``: for messages and the index."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(count) >= size:
            return f"{count / size:.3g} {unit}"
    return f"{int(count)} B"


def _parameter(config: ModelConfig, key: str) -> str:
    return config.parameters[key].string_value.strip() if key in config.parameters else ""


def device_of(config: ModelConfig) -> str:
    """The device whose budget a model's instances count against: its first GPU for a
    config whose instance groups ask for KIND_GPU, else the CPU."""
    for group in config.instance_group:
        if group.kind == group.KIND_GPU:
            return f"gpu{group.gpus[0] if group.gpus else 0}"
    return "cpu"


def declared_bytes(config: ModelConfig) -> int | None:
    """``INFERD_MEMORY_BYTES`` of the config, or None (a bad value is the load's error)."""
    text = _parameter(config, MEMORY_PARAMETER)
    return parse_size(text) if text else None


def is_pinned(config: ModelConfig) -> bool:
    """Config parameter ``INFERD_PIN: "true"``: never unloaded to make room."""
    return _parameter(config, PIN_PARAMETER).lower() in ("true", "1", "yes")


def folder_bytes(path: str) -> int:
    """The size of a model's files: the estimate of a footprint never measured."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


@dataclass(slots=True)
class Candidate:
    """A model that may be unloaded to make room: what it holds, when it was last used,
    and the idle ensembles that go with it."""

    model: str
    held: int
    last_used_ms: int
    ensembles: tuple[str, ...] = ()


def choose_evictions(need: int, budget: int, used: int,
                     candidates: list[Candidate]) -> list[Candidate] | None:
    """The least recently used candidates whose unloading lets ``need`` more bytes fit
    (``[]`` when it fits already), or None when even all of them are not enough."""
    chosen: list[Candidate] = []
    for candidate in sorted(candidates, key=lambda c: (c.last_used_ms, c.model)):
        if used + need <= budget:
            break
        chosen.append(candidate)
        used -= candidate.held
    return chosen if used + need <= budget else None


# ---------------------------------------------------------------------- measuring


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (the executors), from ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            parent = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(parents.get(pid, ()))
    return tree


def resident_bytes(root: int) -> int | None:
    usages = [process_usage(pid) for pid in process_tree(root)]
    held = [usage[1] for usage in usages if usage is not None]
    return sum(held) if held else None


class MemoryMeter:
    """What a device holds now: the server's processes' resident memory (cpu), or the used
    memory NVML reports (gpuN); None where it cannot be read."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def reading(self, device: str) -> int | None:
        if device == "cpu":
            return resident_bytes(os.getpid())
        nvml = self._open_nvml()
        if nvml is None:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(device[3:]))
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # NVMLError: a GPU it does not see
            return None

    def total(self, device: str) -> int | None:
        if device == "cpu":
            memory = machine_memory()
            return memory[0] if memory else None
        nvml = self._open_nvml()
        if nvml is None:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(device[3:]))
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception:
            return None

    def _open_nvml(self) -> Any:
        if self._nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
                nvml.nvmlInit()
            except Exception:  # no gpu extra, no driver
                return None
            self._nvml = nvml
        return self._nvml


# ---------------------------------------------------------------------- the budget


@dataclass(slots=True)
class Footprint:
    device: str
    held: int  # bytes, for all its versions
    measured: bool  # False: declared by INFERD_MEMORY_BYTES


Usage = Mapping[tuple[str, int], tuple[int, bool]]
"""The scheduler's figures: per (model, version), its last inference (ms) and whether busy."""


@dataclass(slots=True)
class BudgetCounters:
    evictions: dict[str, int] = field(default_factory=dict)  # per device
    refused: dict[str, int] = field(default_factory=dict)  # loads that could not fit


class MemoryBudget:
    """``budgets``: bytes per device (``parse_budget``). What it needs of the actor:
    ``models`` (its status map), ``usage()`` (the scheduler's figures), ``pinned(name)``,
    ``ensembles_using(name)`` (the ensembles loaded or loading that use it) and
    ``evict(name, reason)`` (unload it, its versions' index entries saying ``reason``)."""

    def __init__(
        self, budgets: tuple[tuple[str, int], ...], models: Mapping[str, ModelStatus], *,
        usage: Callable[[], Awaitable[Usage]], pinned: Callable[[str], bool],
        ensembles_using: Callable[[str], list[str]],
        evict: Callable[[str, str], Awaitable[None]], meter: MemoryMeter | None = None,
    ) -> None:
        self.budgets = dict(budgets)
        self._models = models
        self._usage = usage
        self._pinned = pinned
        self._ensembles_using = ensembles_using
        self._evict = evict
        self._meter = meter if meter is not None else MemoryMeter()
        self.footprints: dict[str, Footprint] = {}  # per loaded model
        self._remembered: dict[str, int] = {}  # a model's last footprint, once unloaded
        self._touched: dict[str, int] = {}  # ms: when a request last asked for it to load
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
        its device's budget: first unload what must go for it to fit, then measure it."""
        device = device_of(config)
        budget = self.budgets.get(device)
        declared = declared_bytes(config)
        if budget is None:
            await load()
            if declared is not None:
                self.footprints[name] = Footprint(device, declared, False)
            return
        async with self._lock:
            need = declared if declared is not None else self._remembered.get(
                name, folder_bytes(path))
            await self._make_room(name, device, need, budget)
            before = self._meter.reading(device) if declared is None else None
            await load()
            self.touch(name)
            if declared is not None:
                held, measured = declared, False
            else:
                after = self._meter.reading(device)
                held = max(0, after - before) if after is not None and before is not None \
                    else need
                measured = True
                if name in self.footprints:  # a reload: what it held before still counts
                    held = max(held, self.footprints[name].held)
            self.footprints[name] = Footprint(device, held, measured)
            self._remembered[name] = held
            log.info("model '%s' holds %s of the %s budget (%s of %s used)", name,
                     format_bytes(held), device, format_bytes(self.used(device)),
                     format_bytes(budget))

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
            held = ", ".join(f"'{model}' ({format_bytes(size)}, {why})"
                             for model, size, why in holders) or "nothing"
            raise Unavailable(
                f"cannot load '{name}' within the {device} memory budget of "
                f"{format_bytes(budget)} (--model-memory-budget): it needs about "
                f"{format_bytes(need)}, {format_bytes(max(0, budget - used))} is free, and "
                f"what holds the rest cannot be unloaded now: {held}")
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
        status = self._models.get(model)
        if self._pinned(model):
            return "pinned"
        if status is not None and status.lock.locked():
            return "loading or unloading"
        if status is not None and any(v.state in (State.LOADING, State.UNLOADING)
                                      for v in status.versions.values()):
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
            if entry.state == State.READY:
                ready[entry.name] = ready.get(entry.name, 0) + 1
        annotated = []
        for entry in entries:
            footprint = self.footprints.get(entry.name)
            if entry.state == State.READY and entry.version.isdigit():
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
