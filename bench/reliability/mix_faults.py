"""The chaos's faults, and which of them explains a failed request.

Owns ``Fault`` (one injected fault: its kind, what it hit, when it began and when every model
was READY again, the models whose requests it may fail, and ``Reason``s: the status and the
words a failure it caused carries, naming what was hit), the constructors ``mix_chaos`` calls
as it injects each, ``explain`` (the fault a failed ``Call`` is tied to, or none: a failure
must overlap a fault's window, be on a model it touched and carry one of its reasons) and
``Window`` (the calls during a fault, and after it until the next). It acts on nothing and
judges no answer (``mix_traffic`` does).

The reasons are inferd's messages, each with the fault's own names filled in: a SIGKILLed
executor's requests fail with ``executor process <name> (pid <pid>) exited with code -9`` (in
flight; sent to one of its instances after its successor started, ``instance <n> of '<m>' was
loaded by executor process <name> (pid <pid>), which exited; ...``; or ``model '<m>' is being
reloaded: ...`` until it is back, the ensemble's ``model '<e>' is not available: ...``); an
unloaded model's with ``Request for unknown model: '<m>' has no available versions`` (a
stream in flight with ``model '<m>' was unloaded``); a sequence whose model's state was
dropped with ``... must specify the START flag ...``; an unregistered region with ``Unable to
find ... shared memory region: '<region>'``. A reload
fails nothing but a stream in flight on an instance it replaced (``the model's executor was
restarted``, the one message that names neither model nor process: only a stream of the
reloaded decoupled model may carry it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.reliability import mix_traffic
from bench.reliability.mix_traffic import IN_STREAM, Call

KILL_ONE = "SIGKILL an executor"
KILL_ALL = "SIGKILL every executor"
RELOAD = "reload a model"
UNLOAD = "unload, then load a model"
UNREGISTER = "unregister every shared memory region"
KINDS = (KILL_ONE, KILL_ALL, RELOAD, UNLOAD, UNREGISTER)
RETRY = frozenset({"UNAVAILABLE", IN_STREAM})  # a 503 (UNAVAILABLE), or a stream's in-band error


@dataclass(frozen=True, slots=True)
class Reason:
    """What a failure a fault caused says: one of ``codes``, words matching ``pattern``, on
    a request to one of ``models``."""

    codes: frozenset[str]
    pattern: re.Pattern[str]
    models: frozenset[str]

    def matches(self, call: Call) -> bool:
        return (call.model in self.models and call.code in self.codes
                and self.pattern.search(call.message) is not None)


@dataclass
class Fault:
    """One injected fault. ``ended`` is when every model was READY again (``inf`` while it
    lasts); ``touched`` the models whose requests it may fail."""

    kind: str
    target: str
    started: float
    touched: frozenset[str]
    reasons: tuple[Reason, ...]
    ended: float = math.inf

    def explains(self, call: Call) -> bool:
        """Whether ``call`` (failed) is this fault's doing: what it depended on overlaps the
        fault, and it says one of the fault's reasons."""
        return (self.started <= call.ended and call.since <= self.ended
                and any(reason.matches(call) for reason in self.reasons))


def dependents(models: Iterable[str]) -> frozenset[str]:
    """``models`` and the models whose requests go through one of them (the ensemble)."""
    chosen = set(models)
    return frozenset(chosen | {m for m, steps in mix_traffic.STEPS.items()
                               if chosen & set(steps)})


def hosted(executor: str) -> frozenset[str]:
    """The mix's models an executor process holds, by its name: a python model's own
    (``executor/model/<model>/<n>``) or the CPU executors (``executor/cpu<n>``, the onnx
    models under ``--cpu-executor process``)."""
    parts = executor.split("/")
    if parts[:2] == ["executor", "model"] and len(parts) > 2:
        return frozenset({parts[2]})
    if len(parts) == 2 and parts[0] == "executor" and parts[1].startswith("cpu"):
        return frozenset(mix_traffic.ONNX_MODELS)
    return frozenset()


def _any(names: Iterable[str]) -> str:
    """A pattern for any one of ``names``, quoted as inferd's messages quote a name."""
    return "'(" + "|".join(re.escape(name) for name in sorted(names)) + ")'"


def _sequence_dropped(models: frozenset[str]) -> tuple[Reason, ...]:
    """A sequence running when the sequence model's state went: its next request, sent
    without START, is refused."""
    if mix_traffic.SEQUENCE not in models:
        return ()
    return (Reason(frozenset({"INVALID_ARGUMENT"}), re.compile(
        rf"^inference request for sequence \d+ to model {_any([mix_traffic.SEQUENCE])} must "
        "specify the START flag on the first request of the sequence$"),
        frozenset({mix_traffic.SEQUENCE})),)


def executors_killed(kind: str, started: float, victims: Sequence[tuple[str, int]]) -> Fault:
    """SIGKILL of ``victims`` (name, pid): their models' requests fail naming the process,
    until the pool has restarted it and control has loaded them again."""
    reasons: list[Reason] = []
    touched: set[str] = set()
    for name, pid in victims:
        models = dependents(hosted(name))
        touched |= models
        died = rf"executor process {re.escape(name)} \(pid {pid}\) exited with code -9"
        # sent to an instance of the dead process after its successor's hello (a retired
        # version still pinned by an ensemble's step): the successor refuses it
        stale = (rf"instance \d+ of {_any(hosted(name))} was loaded by executor process "
                 rf"{re.escape(name)} \(pid {pid}\), which exited; it is being restarted")
        reasons += [
            # in flight when it died (a stream's request, and an ensemble's step, too)
            Reason(RETRY, re.compile(rf"^({died}(; it is being restarted)?|{stale})$"),
                   hosted(name)),
            Reason(RETRY, re.compile(rf"^in ensemble {_any(models)}, step {_any(hosted(name))} "
                                     rf"failed: ({died}(; it is being restarted)?|{stale})$"),
                   models - hosted(name)),
            Reason(RETRY, re.compile(rf"^model {_any(hosted(name))} is being reloaded: {died}; "
                                     "retry the request$"), hosted(name)),
            Reason(RETRY, re.compile(rf"^model {_any(models)} is not available: model "
                                     rf"{_any(hosted(name))} is being reloaded: {died}; retry "
                                     "the request$"), models - hosted(name)),
        ]
        reasons += _sequence_dropped(hosted(name))
    target = ", ".join(f"{name} (pid {pid})" for name, pid in victims)
    return Fault(kind, target, started, frozenset(touched), tuple(reasons))


def unloaded(started: float, model: str) -> Fault:
    """``model`` unloaded, then loaded again: its requests and its dependents' are refused as
    a model with no version, Triton's words."""
    models = dependents({model})
    reasons = (Reason(frozenset({"NOT_FOUND", IN_STREAM}), re.compile(
        rf"^Request for unknown model: {_any(models)} has no available versions$"), models),
        # a stream of the decoupled model in flight when it went
        Reason(RETRY, re.compile(rf"^model {_any([model])} was unloaded$"), frozenset({model})),
        *_sequence_dropped(frozenset({model})))
    return Fault(UNLOAD, f"model '{model}'", started, models, reasons)


def reloaded(started: float, model: str) -> Fault:
    """``model`` loaded again while loaded: its requests go on to the old version until the
    new one serves (a sequence's state included); only a stream of the decoupled model in
    flight on an instance the new one replaced ends, in the scheduler's words."""
    reasons = (Reason(frozenset({IN_STREAM}), re.compile(
        "^the model's executor was restarted$"), frozenset({model})),
    ) if model == mix_traffic.DECOUPLED else ()
    return Fault(RELOAD, f"model '{model}'", started, dependents({model}), reasons)


def regions_unregistered(started: float, regions: Iterable[str]) -> Fault:
    """Every shared memory region unregistered: a request naming one of ``regions`` (the
    clients' own) is refused until its client registers it again."""
    names = tuple(regions)
    reasons = (Reason(frozenset({"INVALID_ARGUMENT", "NOT_FOUND"}), re.compile(
        rf"^Unable to find (system )?shared memory region: {_any(names)}$"),
        frozenset({mix_traffic.SHARED_MEMORY_MODEL})),) if names else ()
    return Fault(UNREGISTER, f"{len(names)} region(s)", started,
                 frozenset({mix_traffic.SHARED_MEMORY_MODEL}), reasons)


def explain(call: Call, faults: Sequence[Fault]) -> Fault | None:
    """The fault that explains ``call`` (failed), the latest first, or None."""
    return next((fault for fault in reversed(faults) if fault.explains(call)), None)


@dataclass
class Window:
    """The calls during one fault (from its start until every model was READY again) and
    after it (until the next fault began, or the end), by outcome, split by whether the fault
    touched their model."""

    fault: Fault
    during: dict[bool, list[Call]] = field(default_factory=lambda: {True: [], False: []})
    after: list[Call] = field(default_factory=list)

    @staticmethod
    def of(fault: Fault, until: float, calls: Iterable[Call]) -> Window:
        window = Window(fault)
        for call in calls:
            if call.started <= fault.ended and call.ended >= fault.started:
                window.during[call.model in fault.touched].append(call)
            elif fault.ended < call.started and call.ended <= until:
                window.after.append(call)
        return window

