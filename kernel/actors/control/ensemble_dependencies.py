"""Which ensembles depend on which models, and why each composing model is loaded.

Owns control's bookkeeping for ensembles (SPEC 4.2): the composing models of every ensemble
that is loaded or being loaded (so a cycle through nested ensembles is refused before any
load waits on another), which ensemble versions the scheduler serves (their state follows
their composing models: READY only while each has a READY version), and which models were
loaded on request (so ``unload_dependents`` knows what it may take down: as Triton's
cascading removal, every composing model no user asked for that no other ensemble uses).
Pure: no I/O and no model states of its own; whether a model is READY is asked through a
callable. Control does the loading and unloading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from inferd.protocols.errors import InvalidArgument

ANY_VERSION = -1


@dataclass(frozen=True, slots=True)
class Requirement:
    """An ensemble step's need: a READY ``version`` of ``model`` (-1: any version)."""

    model: str
    version: int = ANY_VERSION


class EnsembleDependencies:
    def __init__(self) -> None:
        self._composing: dict[str, tuple[Requirement, ...]] = {}  # loading or loaded ensembles
        self._served: dict[str, set[int]] = {}  # ensemble -> versions the scheduler serves
        self._requested: set[str] = set()  # loaded by a load request or at start-up

    # ------------------------------------------------------------------ the graph

    def begin_load(
        self, ensemble: str, requirements: Iterable[Requirement]
    ) -> tuple[Requirement, ...] | None:
        """Record what ``ensemble`` is about to need, before its composing models load.
        Raise ``InvalidArgument`` when that closes a cycle through loaded or loading
        ensembles. Returns what it needed before (for ``abandon_load``)."""
        needed = tuple(dict.fromkeys(requirements))
        cycle = self.find_cycle(ensemble, [r.model for r in needed])
        if cycle is not None:
            raise InvalidArgument(
                f"ensemble '{ensemble}': its composing models form a cycle: "
                + " -> ".join(f"'{name}'" for name in cycle)
            )
        previous = self._composing.get(ensemble)
        self._composing[ensemble] = needed
        return previous

    def abandon_load(self, ensemble: str, previous: tuple[Requirement, ...] | None) -> None:
        """A load of ``ensemble`` failed: it needs what it needed before (nothing, if it
        was not loaded)."""
        if previous is not None:
            self._composing[ensemble] = previous
        elif not self._served.get(ensemble):
            self._composing.pop(ensemble, None)

    def find_cycle(self, ensemble: str, models: Iterable[str]) -> list[str] | None:
        """The path ``ensemble -> ... -> ensemble`` that making ``ensemble`` use ``models``
        would close, through the ensembles known here, or None."""
        for start in models:
            path = self._path(start, ensemble, [ensemble])
            if path is not None:
                return path
        return None

    def _path(self, current: str, target: str, trail: list[str]) -> list[str] | None:
        trail = [*trail, current]
        if current == target:
            return trail
        if current in trail[:-1]:
            return None  # a cycle not through target (refused when it was made)
        for requirement in self._composing.get(current, ()):
            found = self._path(requirement.model, target, trail)
            if found is not None:
                return found
        return None

    def requirements(self, ensemble: str) -> tuple[Requirement, ...]:
        return self._composing.get(ensemble, ())

    def dependents(self, *models: str) -> list[str]:
        """Every ensemble that uses one of ``models``, directly or through other ensembles,
        each after the ensembles it uses (so refreshing states in this order is consistent)."""
        affected: set[str] = set()
        pending = list(models)
        while pending:
            name = pending.pop()
            for ensemble, needed in self._composing.items():
                if ensemble not in affected and any(r.model == name for r in needed):
                    affected.add(ensemble)
                    pending.append(ensemble)
        ordered: list[str] = []
        while affected:
            ready = sorted(
                e for e in affected if not any(r.model in affected for r in self._composing[e])
            )
            if not ready:  # a cycle (never recorded, but stay finite)
                ready = sorted(affected)
            ordered.extend(ready)
            affected.difference_update(ready)
        return ordered

    def blocker(
        self, ensemble: str, is_ready: Callable[[str, int], bool]
    ) -> Requirement | None:
        """The first requirement of ``ensemble`` that ``is_ready(model, version)`` says is
        not met (version -1 means any version), or None when the ensemble can serve."""
        return next(
            (r for r in self._composing.get(ensemble, ()) if not is_ready(r.model, r.version)),
            None,
        )

    # ------------------------------------------------------------------ served versions

    def serve(self, ensemble: str, version: int) -> None:
        self._served.setdefault(ensemble, set()).add(version)

    def retire(self, ensemble: str, version: int) -> None:
        """The scheduler no longer serves this version; after the last one the ensemble is
        unloaded: it uses nothing and loaded nothing any more."""
        versions = self._served.get(ensemble)
        if versions is None:
            return
        versions.discard(version)
        if not versions:
            del self._served[ensemble]
            self._composing.pop(ensemble, None)

    def is_served(self, ensemble: str, version: int) -> bool:
        return version in self._served.get(ensemble, ())

    def served_versions(self, ensemble: str) -> tuple[int, ...]:
        return tuple(sorted(self._served.get(ensemble, ())))

    # ------------------------------------------------------------------ why loaded

    def mark_requested(self, *models: str) -> None:
        """These models were loaded on request (load API, start-up set)."""
        self._requested.update(models)

    def forget_model(self, model: str) -> None:
        """``model`` was unloaded: a later load records anew why it is loaded."""
        self._requested.discard(model)

    def unload_candidates(self, ensemble: str) -> list[str]:
        """What unloading ``ensemble`` with ``unload_dependents`` also unloads (Triton's
        cascading removal): its composing models, and theirs through nested ensembles, that
        were not loaded on request (they came in implicitly, with this ensemble or with one
        unloaded before) and that no ensemble left loaded uses; nested ensembles before the
        models they use. Ask before unloading ``ensemble``."""
        removing = {ensemble}
        chosen: list[str] = []
        pending = [ensemble]
        while pending:
            current = pending.pop(0)
            for requirement in self._composing.get(current, ()):
                model = requirement.model
                if model in removing or model in self._requested:
                    continue
                if any(
                    other not in removing and any(r.model == model for r in needed)
                    for other, needed in self._composing.items()
                ):
                    continue
                removing.add(model)
                chosen.append(model)
                pending.append(model)
        return chosen
