"""Ensemble planning: what an ensemble's steps read and write, and in which order they may run.

Owns turning an ensemble ``ModelConfig`` (``platform: "ensemble"``) into an ``EnsemblePlan``
(each step's composing model and version, the ensemble tensors it reads and writes, the steps
it waits for) and ``Dataflow``, the progress of one request through a plan: a step may start
as soon as every tensor it reads exists, so independent steps run side by side, and only the
steps that lead to the requested outputs run at all. Pure: no I/O, no tensors (only their
names), no knowledge of which versions are served; the scheduler executes what this plans.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.modelconfig.ensemble_graph import check_ensemble_graph
from inferd.kernel.modelconfig.validation import ENSEMBLE_PLATFORM
from inferd.protocols.errors import InvalidArgument

LATEST_VERSION = -1


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    """One step: a request to ``model`` (``version`` -1 is the latest READY one).
    ``inputs`` pairs each model input with the ensemble tensor it reads; ``outputs`` pairs
    each model output with the ensemble tensor it writes."""

    index: int
    model: str
    version: int
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    reads: frozenset[str] = field(init=False, compare=False)
    writes: frozenset[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # Asked for on every request: computed once.
        object.__setattr__(self, "reads", frozenset(tensor for _, tensor in self.inputs))
        object.__setattr__(self, "writes", frozenset(tensor for _, tensor in self.outputs))

    @property
    def label(self) -> str:
        return f"step {self.index} (model '{self.model}')"


@dataclass(frozen=True, slots=True)
class EnsemblePlan:
    """An ensemble's dataflow graph. ``waits_on[i]`` holds the steps whose outputs step ``i``
    reads; a step with none reads only ensemble inputs."""

    name: str
    inputs: tuple[str, ...]
    optional_inputs: frozenset[str]
    outputs: tuple[str, ...]
    steps: tuple[EnsembleStep, ...]
    waits_on: tuple[frozenset[int], ...]
    _writers: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    _needed: dict[tuple[str, ...], frozenset[int]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def from_config(cls, config: ModelConfig) -> EnsemblePlan:
        """The plan of a normalized ensemble config; ``InvalidArgument`` (from the graph
        checks of ``check_ensemble_graph``) when it is not a valid dataflow graph."""
        if config.platform != ENSEMBLE_PLATFORM:
            raise InvalidArgument(f"model '{config.name}' is not an ensemble")
        check_ensemble_graph(config)
        steps = tuple(
            EnsembleStep(
                index=index,
                model=step.model_name,
                version=int(step.model_version),
                inputs=tuple(sorted(step.input_map.items())),
                outputs=tuple(sorted(step.output_map.items())),
            )
            for index, step in enumerate(config.ensemble_scheduling.step)
        )
        writer = {tensor: step.index for step in steps for tensor in step.writes}
        waits_on = tuple(
            frozenset(writer[tensor] for tensor in step.reads if tensor in writer)
            for step in steps
        )
        return cls(
            name=config.name,
            inputs=tuple(tensor.name for tensor in config.input),
            optional_inputs=frozenset(tensor.name for tensor in config.input if tensor.optional),
            outputs=tuple(tensor.name for tensor in config.output),
            steps=steps,
            waits_on=waits_on,
            _writers=writer,
        )

    def composing_models(self) -> tuple[str, ...]:
        """Every model a step uses, once each, sorted."""
        return tuple(sorted({step.model for step in self.steps}))

    def writer_of(self, tensor: str) -> EnsembleStep | None:
        index = self._writers.get(tensor)
        return None if index is None else self.steps[index]

    def steps_for(self, outputs: Iterable[str]) -> frozenset[int]:
        """The steps that must run to produce ``outputs`` (ensemble tensors): their writers
        and, transitively, the writers of what those read."""
        key = tuple(outputs)
        found = self._needed.get(key)
        if found is not None:
            return found
        needed: set[int] = set()
        pending = [self._writers[name] for name in key if name in self._writers]
        while pending:
            index = pending.pop()
            if index not in needed:
                needed.add(index)
                pending.extend(self.waits_on[index])
        if len(self._needed) < 64:  # requested subsets are few; never grow without bound
            self._needed[key] = frozenset(needed)
        return frozenset(needed)

    def stages(self) -> list[list[int]]:
        """Steps grouped by how many steps must finish before them at the least: every step
        of a stage can run in parallel with the others of the same stage."""
        depth: dict[int, int] = {}
        for index in self._topological_order():
            depth[index] = 1 + max((depth[w] for w in self.waits_on[index]), default=-1)
        grouped: dict[int, list[int]] = {}
        for index, level in sorted(depth.items()):
            grouped.setdefault(level, []).append(index)
        return [grouped[level] for level in sorted(grouped)]

    def _topological_order(self) -> list[int]:
        order: list[int] = []
        done: set[int] = set()
        progressed = True
        while progressed:
            progressed = False
            for step in self.steps:
                if step.index not in done and self.waits_on[step.index] <= done:
                    order.append(step.index)
                    done.add(step.index)
                    progressed = True
        return order  # from_config refuses cycles, so every step is in it


class Dataflow:
    """One request's progress through a plan. ``take_ready`` hands out each step once, as
    soon as every tensor it reads exists (or is an optional ensemble input the request left
    out); ``finished`` records that a step wrote its tensors."""

    def __init__(
        self, plan: EnsemblePlan, wanted_outputs: Iterable[str], given_inputs: Collection[str]
    ) -> None:
        self.plan = plan
        self._waiting = set(plan.steps_for(wanted_outputs))
        self._running: set[int] = set()
        self._available = set(given_inputs)
        self._absent = plan.optional_inputs - self._available

    @property
    def needed(self) -> frozenset[int]:
        """The steps not yet handed out (all the request needs, before the first take)."""
        return frozenset(self._waiting)

    @property
    def done(self) -> bool:
        return not self._waiting and not self._running

    def is_absent(self, tensor: str) -> bool:
        """Whether ``tensor`` is an optional ensemble input the request did not give."""
        return tensor in self._absent

    def take_ready(self) -> list[EnsembleStep]:
        ready = [
            self.plan.steps[index]
            for index in sorted(self._waiting)
            if self.plan.steps[index].reads <= self._available | self._absent
        ]
        for step in ready:
            self._waiting.discard(step.index)
            self._running.add(step.index)
        return ready

    def finished(self, step: EnsembleStep) -> None:
        self._running.discard(step.index)
        self._available |= step.writes
