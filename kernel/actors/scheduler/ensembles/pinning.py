"""Fixing the versions one ensemble request runs on (SPEC 4.3).

Owns ``Pin``: the served version a request to an ensemble chose, and, step by step, the
version of each composing model (nested ensembles pinned in turn), each counted in its
version's ``pinned`` so a version being retired waits until the requests that chose it are
done with it. Also what a pin says of its steps: whether the ensemble may be cached and which
steps are decoupled. Which version a model resolves to is the caller's (the scheduler's):
it is passed in as ``resolve``. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from inferd.kernel.actors.scheduler.ensembles.served import ServedVersion, ensemble_state
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable

V = TypeVar("V", bound=ServedVersion)

Resolve = Callable[[str, str], V]
"""``resolve(model, version)``: the served version a request would go to (raising Triton's
unknown-model errors)."""


@dataclass(eq=False, slots=True)
class Pin(Generic[V]):
    """A version fixed for one request; for an ensemble, also the versions of its steps."""

    version: V
    steps: dict[int, Pin[V]] = field(default_factory=dict)
    released: bool = False


def pin_for(version: V, wanted: Iterable[str], resolve: Resolve[V]) -> Pin[V]:
    """``pin`` for a request to the ensemble ``version``: a step with no version to serve is
    the ensemble's own unavailability, and the answer names the ensemble (as Triton's does),
    keeping the cause of one that is reloading."""
    try:
        return pin(version, wanted, frozenset({version.model}), resolve)
    except NotFound:
        raise NotFound(f"Request for unknown model: '{version.model}' has no available "
                       "versions") from None
    except Unavailable as error:
        raise Unavailable(f"model '{version.model}' is not available: {error.message}"
                          ) from None


def pin(version: V, wanted: Iterable[str], visiting: frozenset[str], resolve: Resolve[V]
        ) -> Pin[V]:
    """Pin ``version`` and the steps that lead to ``wanted`` (``visiting``: the ensembles
    this one is nested in, so a cycle is refused)."""
    plan = ensemble_state(version).plan
    pinned: Pin[V] = Pin(version)
    version.pinned += 1
    try:
        for index in sorted(plan.steps_for(wanted)):
            step = plan.steps[index]
            if step.model in visiting:
                raise InvalidArgument(
                    f"in ensemble '{plan.name}', {step.label} uses an ensemble that contains it"
                )
            target = resolve(step.model, "" if step.version < 0 else str(step.version))
            if target.ensemble is not None:
                nested_wanted = [name for name, _ in step.outputs]
                pinned.steps[index] = pin(target, nested_wanted, visiting | {step.model},
                                          resolve)
            else:
                target.pinned += 1
                pinned.steps[index] = Pin(target)
    except BaseException:
        release(pinned)
        raise
    return pinned


def release(pinned: Pin[Any]) -> None:
    """The request is done with ``pinned`` and its steps (a second release does nothing)."""
    if pinned.released:
        return
    pinned.released = True
    pinned.version.pinned -= 1
    for step_pin in pinned.steps.values():
        release(step_pin)


def cacheable(pinned: Pin[Any]) -> bool:
    """Whether every model a pinned ensemble runs (nested ones included) could be cached:
    as in Triton, a decoupled or sequence model in it keeps the ensemble uncached."""
    for step_pin in pinned.steps.values():
        target = step_pin.version
        if target.ensemble is not None:
            if not cacheable(step_pin):
                return False
        elif target.decoupled or target.sequences is not None:
            return False
    return True


def decoupled_steps(pinned: Pin[Any]) -> list[int]:
    """The steps of a pinned ensemble (not of nested ones) that run a decoupled model."""
    return [index for index, step_pin in pinned.steps.items()
            if step_pin.version.ensemble is None and step_pin.version.decoupled]
