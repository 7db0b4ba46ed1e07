"""The sequence batcher: how the requests of stateful models reach their instances.

A sequence (the requests sharing a correlation id, from the one flagged START to the one
flagged END) is bound to one batch slot of one instance for its whole life, as in Triton; a
sequence that finds every slot taken waits in the backlog for one. Each instance is sent at
most one batch at a time, so a request always sees the state its predecessor left:

- **direct**: a batch has one entry per slot, up to the highest slot with a request waiting;
  a slot with nothing waiting gets a null request (a copy of a real one with READY false),
  so every sequence keeps its place in the batch (``max_queue_delay_microseconds`` with
  ``minimum_slot_utilization`` may hold a batch back until enough slots have a request);
- **oldest**: the instance's candidate sequences (``max_candidate_sequences`` slots) are
  batched by the age of their next request, at most one request each, up to
  ``max_batch_size`` (a ``preferred_batch_size``, or ``max_queue_delay_microseconds`` to
  wait for a fuller batch).

Each request gets its control tensors (START, END, READY, CORRID) and its implicit state
inputs (the initial state at START, else what the previous request's state outputs were);
the state outputs are taken out of its response. A sequence idle longer than
``max_sequence_idle_microseconds`` is released. Sans-IO: the scheduler actor owns the queued
requests, sends the batches and hands the results back; unit tests drive it directly.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import numpy as np

from inferd.kernel.modelconfig.sequence_plan import SequencePlan
from inferd.protocols.errors import InferdError, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import from_numpy

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
CorrelationId = int | str


@dataclass(frozen=True, slots=True)
class SequenceFlags:
    """What a request says of its sequence (the ``sequence_*`` request parameters)."""

    id: CorrelationId
    start: bool
    end: bool

    @classmethod
    def of(cls, request: InferRequest) -> SequenceFlags:
        """Raise Triton's error for a request without a correlation id."""
        value = request.parameters.get("sequence_id", 0)
        if isinstance(value, bool) or not isinstance(value, (int, str)) or value in (0, ""):
            raise InvalidArgument(f"inference request to model '{request.model}' must specify "
                                  "a non-zero or non-empty correlation ID")
        return cls(value, bool(request.parameters.get("sequence_start", False)),
                   bool(request.parameters.get("sequence_end", False)))


@dataclass(eq=False, slots=True)
class _Waiting(Generic[ItemT]):
    item: ItemT
    request: InferRequest
    flags: SequenceFlags
    arrived_ns: int


@dataclass(eq=False, slots=True)
class _Sequence(Generic[ItemT]):
    id: CorrelationId
    slot: tuple[int, int] | None  # (instance, slot); None while in the backlog
    queue: deque[_Waiting[ItemT]] = field(default_factory=deque)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # by state input name
    last_ns: int = 0
    closed: bool = False  # its END is queued: no more requests join it
    running: bool = False  # a request of it is in the batch an instance runs


@dataclass(frozen=True, slots=True)
class BatchEntry(Generic[ItemT]):
    """One entry of a batch: ``item`` is ``None`` for a null request."""

    item: ItemT | None
    request: InferRequest
    sequence: Any  # the _Sequence it belongs to (None for a null request)
    end: bool


@dataclass(frozen=True, slots=True)
class SequenceBatch(Generic[ItemT]):
    instance: int
    entries: tuple[BatchEntry[ItemT], ...]

    @property
    def requests(self) -> tuple[InferRequest, ...]:
        return tuple(entry.request for entry in self.entries)

    @property
    def real(self) -> list[BatchEntry[ItemT]]:
        return [entry for entry in self.entries if entry.item is not None]


class SequenceBatcher(Generic[ItemT]):
    """The sequences of one served version of a model with ``instances`` instances."""

    def __init__(self, plan: SequencePlan, instances: int) -> None:
        self._plan = plan
        self._instances = max(1, instances)
        self._by_id: dict[CorrelationId, _Sequence[ItemT]] = {}
        self._slots: list[list[_Sequence[ItemT] | None]] = [
            [None] * plan.slots_per_instance for _ in range(self._instances)]
        self._backlog: deque[_Sequence[ItemT]] = deque()
        self._busy = [False] * self._instances  # a batch of the instance is running

    @property
    def instances(self) -> int:
        return self._instances

    # ------------------------------------------------------------------ admission

    def admit(self, item: ItemT, request: InferRequest, batch_size: int, now_ns: int) -> None:
        """Queue ``request`` (carried as ``item``) on its sequence; raises Triton's error
        for a request that cannot join one."""
        if batch_size > 1:
            raise InvalidArgument(f"inference request to model '{request.model}' must specify "
                                  "batch-size 1 due to requirements of sequence batcher")
        flags = SequenceFlags.of(request)
        self.expire(now_ns)
        sequence = self._by_id.get(flags.id)
        if sequence is None:
            if not flags.start:
                raise InvalidArgument(
                    f"inference request for sequence {flags.id} to model '{request.model}' "
                    "must specify the START flag on the first request of the sequence")
            sequence = self._new_sequence(flags.id)
        elif flags.start:
            log.warning("sequence %s for model '%s' has a conflict. The previous sequence did "
                        "not end before this sequence start. Previous sequence will be "
                        "terminated early.", flags.id, request.model)
        sequence.queue.append(_Waiting(item, request, flags, now_ns))
        sequence.last_ns = now_ns
        if flags.end:
            sequence.closed = True
            del self._by_id[flags.id]

    def _new_sequence(self, correlation_id: CorrelationId) -> _Sequence[ItemT]:
        sequence: _Sequence[ItemT] = _Sequence(correlation_id, self._free_slot())
        if sequence.slot is None:
            self._backlog.append(sequence)
        else:
            instance, slot = sequence.slot
            self._slots[instance][slot] = sequence
        self._by_id[correlation_id] = sequence
        return sequence

    def _free_slot(self) -> tuple[int, int] | None:
        """The lowest free slot of the instance with the fewest sequences."""
        best: tuple[int, int] | None = None
        best_load = 0
        for instance, slots in enumerate(self._slots):
            load = sum(1 for s in slots if s is not None)
            free = next((i for i, s in enumerate(slots) if s is None), None)
            if free is not None and (best is None or load < best_load):
                best, best_load = (instance, free), load
        return best

    # ------------------------------------------------------------------ batches

    def next_batch(self, instance: int, now_ns: int) -> SequenceBatch[ItemT] | None:
        """The batch ``instance`` runs next, or ``None`` (nothing waiting, the instance still
        runs one, or a queue delay holds it back: ``wake_at`` says until when)."""
        if self._busy[instance]:
            return None
        ready = [(index, s) for index, s in enumerate(self._slots[instance])
                 if s is not None and s.queue]
        if not ready:
            return None
        if self._held_back(len(ready), min(s.queue[0].arrived_ns for _, s in ready), now_ns):
            return None
        if self._plan.oldest:
            entries = self._oldest(ready)
        else:
            entries = self._direct(ready)
        self._busy[instance] = True
        return SequenceBatch(instance, tuple(entries))

    def _held_back(self, ready: int, oldest_ns: int, now_ns: int) -> bool:
        plan = self._plan
        if not plan.max_queue_delay_ns or now_ns - oldest_ns >= plan.max_queue_delay_ns:
            return False
        if plan.oldest:
            full = min(plan.max_batch_size, plan.slots_per_instance)
            return ready < full and ready not in plan.preferred_batch_sizes
        threshold = plan.minimum_slot_utilization
        return bool(threshold > 0 and ready / plan.max_batch_size < threshold)

    def wake_at(self) -> int | None:
        """When a batch held back by a queue delay, or a sequence going idle, needs a look."""
        times = []
        for slots in self._slots:
            for sequence in slots:
                if sequence is not None and sequence.queue and self._plan.max_queue_delay_ns:
                    times.append(sequence.queue[0].arrived_ns + self._plan.max_queue_delay_ns)
                elif sequence is not None and self._backlog and self._plan.idle_ns:
                    times.append(sequence.last_ns + self._plan.idle_ns + 1)
        return min(times) if times else None

    def _direct(self, ready: list[tuple[int, _Sequence[ItemT]]]) -> list[BatchEntry[ItemT]]:
        by_slot = dict(ready)
        template = ready[0][1].queue[0].request
        entries: list[BatchEntry[ItemT]] = []
        for index in range(max(by_slot) + 1):
            sequence = by_slot.get(index)
            if sequence is None:
                entries.append(BatchEntry(None, self._null_request(template), None, False))
            else:
                entries.append(self._take(sequence))
        return entries

    def _oldest(self, ready: list[tuple[int, _Sequence[ItemT]]]) -> list[BatchEntry[ItemT]]:
        plan = self._plan
        ordered = sorted((s for _, s in ready), key=lambda s: s.queue[0].arrived_ns)
        count = min(len(ordered), plan.max_batch_size)
        fitting = [size for size in plan.preferred_batch_sizes if size <= count]
        if fitting and count < plan.max_batch_size:
            count = max(fitting)
        return [self._take(sequence) for sequence in ordered[:count]]

    def _take(self, sequence: _Sequence[ItemT]) -> BatchEntry[ItemT]:
        waiting = sequence.queue.popleft()
        sequence.running = True
        flags = waiting.flags
        if flags.start:
            sequence.state = {}
        inputs = [*waiting.request.inputs, *self._controls(flags, ready=True),
                  *self._states(sequence, flags.start)]
        outputs = waiting.request.outputs
        if outputs:
            outputs = (*outputs, *self._plan.added_outputs())
        request = replace(waiting.request, inputs=tuple(inputs), outputs=outputs)
        return BatchEntry(waiting.item, request, sequence, flags.end)

    def _null_request(self, template: InferRequest) -> InferRequest:
        flags = SequenceFlags(0, False, False)
        inputs = [*template.inputs, *self._controls(flags, ready=False),
                  *self._states(None, True)]
        return replace(template, id="", inputs=tuple(inputs), outputs=(), parameters={})

    def _controls(self, flags: SequenceFlags, ready: bool) -> list[Tensor]:
        shape = (1, 1) if self._plan.batching else (1,)
        tensors = []
        for control in self._plan.controls:
            if control.kind == "corrid":
                value: Any = flags.id if ready else (b"" if control.datatype == "BYTES" else 0)
                if isinstance(value, str):
                    value = value.encode()
                if control.datatype != "BYTES" and isinstance(value, bytes):
                    value = 0  # a string id for a numeric CORRID: Triton sends 0 too
            else:
                on = {"start": flags.start, "end": flags.end, "ready": ready}[control.kind]
                value = control.values[1] if on else control.values[0]
            array = np.full(shape, value, dtype=object if control.datatype == "BYTES" else None)
            tensors.append(from_numpy(control.name, array, control.datatype))
        return tensors

    def _states(self, sequence: _Sequence[ItemT] | None, start: bool) -> list[Tensor]:
        tensors = []
        for state in self._plan.states:
            value = None if start or sequence is None else sequence.state.get(state.input_name)
            if value is None:
                value = state.initial[np.newaxis] if self._plan.batching else state.initial
            tensors.append(from_numpy(state.input_name, value, state.datatype))
        return tensors

    # ------------------------------------------------------------------ results

    def complete(self, batch: SequenceBatch[ItemT],
                 results: list[InferResponse | InferdError], now_ns: int
                 ) -> list[tuple[ItemT, InferResponse | InferdError]]:
        """Take a batch's results (one per entry): keep each sequence's new state, release
        the slots of sequences that ended; the result of each real entry, state outputs
        removed."""
        self._busy[batch.instance] = False
        answers: list[tuple[ItemT, InferResponse | InferdError]] = []
        state_outputs = {state.output_name: state.input_name for state in self._plan.states}
        for entry, result in zip(batch.entries, results, strict=True):
            if entry.item is None:
                continue
            sequence: _Sequence[ItemT] = entry.sequence
            sequence.running = False
            sequence.last_ns = now_ns
            if isinstance(result, InferResponse) and state_outputs:
                for tensor in result.outputs:
                    if tensor.name in state_outputs:
                        sequence.state[state_outputs[tensor.name]] = tensor.data
                kept = tuple(t for t in result.outputs if t.name not in state_outputs)
                result = replace(result, outputs=kept)
            if sequence.closed and not sequence.queue:  # its END ran (or was cancelled)
                self._release(sequence)
            answers.append((entry.item, result))
        return answers

    def _release(self, sequence: _Sequence[ItemT]) -> None:
        if self._by_id.get(sequence.id) is sequence:
            del self._by_id[sequence.id]
        if sequence.slot is None:
            if sequence in self._backlog:
                self._backlog.remove(sequence)
            return
        instance, slot = sequence.slot
        self._slots[instance][slot] = None
        sequence.slot = None
        if self._backlog:  # the oldest waiting sequence takes the slot
            waiting = self._backlog.popleft()
            waiting.slot = (instance, slot)
            self._slots[instance][slot] = waiting

    def withdraw(self, item: ItemT) -> bool:
        """Take the queued request ``item`` out of its sequence (its client went away); False
        when it is not queued. The sequence goes on without it; one whose END it was is
        released once nothing of it is queued or running."""
        for sequence in self._all():
            for waiting in sequence.queue:
                if waiting.item is item:
                    sequence.queue.remove(waiting)
                    if sequence.closed and not sequence.queue and not sequence.running:
                        self._release(sequence)
                    return True
        return False

    def expire(self, now_ns: int) -> None:
        """Release every sequence idle past ``max_sequence_idle_microseconds`` with nothing
        queued or running: a later request of it must START again."""
        idle_ns = self._plan.idle_ns
        if not idle_ns:
            return
        for sequence in list(self._by_id.values()):
            if (not sequence.queue and not sequence.running
                    and now_ns - sequence.last_ns > idle_ns):
                log.info("sequence %s released after %.3f s idle", sequence.id,
                         (now_ns - sequence.last_ns) / 1e9)
                self._release(sequence)

    # ------------------------------------------------------------------ bookkeeping

    def pending(self) -> int:
        """Requests queued and not yet sent to an instance."""
        return sum(len(s.queue) for s in self._all())

    def drain(self) -> list[ItemT]:
        """Every queued request, taken out (the server is stopping)."""
        items = [waiting.item for s in self._all() for waiting in s.queue]
        for sequence in self._all():
            sequence.queue.clear()
        return items

    def _all(self) -> list[_Sequence[ItemT]]:
        bound = [s for slots in self._slots for s in slots if s is not None]
        return bound + [s for s in self._backlog if s not in bound]

    def active(self) -> int:
        return sum(1 for slots in self._slots for s in slots if s is not None)

