"""Control's ensemble bookkeeping: cycles, dependents, readiness blockers, and what
``unload_dependents`` may take down. Pure, no actors."""

from __future__ import annotations

import pytest

from inferd.kernel.actors.control.ensemble_dependencies import EnsembleDependencies, Requirement
from inferd.protocols.errors import InvalidArgument


def loaded(deps: EnsembleDependencies, ensemble: str, *models: str, version: int = 1) -> None:
    deps.begin_load(ensemble, [Requirement(m) for m in models])
    deps.serve(ensemble, version)


def test_a_cycle_through_nested_ensembles_is_refused_with_its_path() -> None:
    deps = EnsembleDependencies()
    deps.begin_load("outer", [Requirement("inner"), Requirement("m")])
    with pytest.raises(InvalidArgument) as error:
        deps.begin_load("inner", [Requirement("outer")])
    assert error.value.message == (
        "ensemble 'inner': its composing models form a cycle: 'inner' -> 'outer' -> 'inner'"
    )
    assert deps.requirements("inner") == ()
    deps.begin_load("inner", [Requirement("m")])  # without the cycle it is fine


def test_an_abandoned_load_restores_what_was_needed_before() -> None:
    deps = EnsembleDependencies()
    previous = deps.begin_load("e", [Requirement("a")])
    deps.abandon_load("e", previous)
    assert deps.requirements("e") == ()
    loaded(deps, "e", "a")
    previous = deps.begin_load("e", [Requirement("b")])  # a reload with other steps
    deps.abandon_load("e", previous)
    assert deps.requirements("e") == (Requirement("a"),)


def test_dependents_are_transitive_and_nested_ones_come_first() -> None:
    deps = EnsembleDependencies()
    loaded(deps, "outer", "inner", "m")
    loaded(deps, "inner", "m")
    loaded(deps, "other", "n")
    assert deps.dependents("m") == ["inner", "outer"]
    assert deps.dependents("inner") == ["outer"]
    assert deps.dependents("n", "m") == ["inner", "other", "outer"]
    assert deps.dependents("unused") == []


def test_the_blocker_is_the_first_requirement_not_ready() -> None:
    deps = EnsembleDependencies()
    deps.begin_load("e", [Requirement("a"), Requirement("b", 2), Requirement("a")])
    assert deps.requirements("e") == (Requirement("a"), Requirement("b", 2))
    ready = {("a", -1), ("b", 2)}
    assert deps.blocker("e", lambda m, v: (m, v) in ready) is None
    ready.discard(("b", 2))
    assert deps.blocker("e", lambda m, v: (m, v) in ready) == Requirement("b", 2)


def test_served_versions_and_retiring_the_last_one_forgets_the_ensemble() -> None:
    deps = EnsembleDependencies()
    loaded(deps, "e", "a", version=1)
    deps.serve("e", 2)
    assert deps.served_versions("e") == (1, 2)
    assert deps.is_served("e", 2) and not deps.is_served("e", 3)
    deps.retire("e", 1)
    assert deps.requirements("e") == (Requirement("a"),)
    assert deps.unload_candidates("e") == ["a"]
    deps.retire("e", 2)
    assert deps.requirements("e") == ()
    assert deps.dependents("a") == []
    assert deps.unload_candidates("e") == []
    deps.retire("never", 1)  # nothing to do


def test_unload_dependents_takes_what_no_user_asked_for_and_no_other_ensemble_uses() -> None:
    deps = EnsembleDependencies()
    # "mine" came in with e; "orphan" came in with an ensemble unloaded since (e found it
    # READY): both were loaded implicitly, so both go, as in Triton's cascading removal.
    loaded(deps, "e", "mine", "shared", "requested", "orphan")
    loaded(deps, "f", "shared")
    deps.mark_requested("e", "f", "requested")
    assert deps.unload_candidates("e") == ["mine", "orphan"]
    deps.retire("f", 1)
    assert deps.unload_candidates("e") == ["mine", "shared", "orphan"]


def test_unload_dependents_follows_nested_ensembles_outer_first() -> None:
    deps = EnsembleDependencies()
    loaded(deps, "outer", "inner", "leaf")
    loaded(deps, "inner", "leaf", "deep")
    deps.mark_requested("outer")
    assert deps.unload_candidates("outer") == ["inner", "leaf", "deep"]
    # Unloading inner alone: outer still uses leaf, and nothing else uses deep.
    assert deps.unload_candidates("inner") == ["deep"]
    # A nested ensemble loaded on request stays, and so does what it uses.
    deps.mark_requested("inner")
    assert deps.unload_candidates("outer") == []


def test_a_model_unloaded_on_its_own_forgets_it_was_requested() -> None:
    deps = EnsembleDependencies()
    loaded(deps, "e", "a")
    deps.mark_requested("a")
    assert deps.unload_candidates("e") == []
    deps.forget_model("a")  # unloaded, then loaded again only for e
    assert deps.unload_candidates("e") == ["a"]
