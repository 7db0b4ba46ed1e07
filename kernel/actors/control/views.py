"""Control's state as the outside sees it: the index, the catalog, metrics, load answers.

Owns turning the control actor's model status (``inferd.kernel.actors.control.model_status``) and
the repository's listing into the entries of Triton's repository index (one per version known,
or one per model with no version: its error, its problem, or nothing when never loaded), into
the state of a catalog entry, into the load-duration metric of each READY version, and a
failed load's error into the answer Triton words it with. Pure: the actor asks the
repository and passes the answers in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.control.model_status import ModelStatus, State
from inferd.kernel.actors.repository.catalog_listing import tensor_specs
from inferd.kernel.actors.repository.folders import TWO_ROOTS_PROBLEM
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import CatalogEntry, IndexEntry, ModelList


def index_entries(
    listing: ModelList, models: Mapping[str, ModelStatus], catalogs: Mapping[str, Any], *,
    ready_only: bool,
) -> tuple[IndexEntry, ...]:
    """The index of every model listed or known to control, by name then version, each with
    its catalog metadata (``catalogs``, by model)."""
    entries: list[IndexEntry] = []
    for name in sorted(set(listing.names) | set(models)):
        model = models.get(name)
        problem = listing.problems.get(name, "")
        # A load refused for a second root says nothing once that folder is gone.
        error = model.error if model is not None else ""
        if error == TWO_ROOTS_PROBLEM and not problem:
            error = ""
        if problem == TWO_ROOTS_PROBLEM and not _serving(model):
            # Triton's one entry, whatever its versions are doing meanwhile (a POLL-mode
            # unload shows no UNLOADING).
            entries.append(IndexEntry(name, "", State.UNAVAILABLE, problem))
        elif model is not None and model.versions:
            # A failed reload leaves the old versions READY: beside them, why the model
            # cannot load now (its folder in a second root) or what the reload failed on,
            # unless that is a version's own failure, in its own entry (as Triton's).
            owner = (model.versions.get(model.error_version)
                     if model.error_version is not None else None)
            if owner is not None and owner.state != State.READY:
                error = ""
            entries.extend(
                IndexEntry(name, str(number), version.state, version.reason,
                           memory=version.memory)
                if version.state != State.READY
                else IndexEntry(name, str(number), version.state,
                                version.reason or problem or error, version.warnings)
                for number, version in sorted(model.versions.items())
            )
        elif error:
            entries.append(IndexEntry(name, "", State.UNAVAILABLE, error))
        elif problem:
            entries.append(IndexEntry(name, "", State.UNAVAILABLE, problem))
        else:
            entries.append(IndexEntry(name))
    if ready_only:
        entries = [e for e in entries if e.state == State.READY]
    return tuple(replace(e, catalog=catalogs[e.name]) if e.name in catalogs else e
                 for e in entries)


def _serving(model: ModelStatus | None) -> bool:
    return model is not None and any(version.state == State.READY
                                     for version in model.versions.values())


def with_state(entry: CatalogEntry, model: ModelStatus | None) -> CatalogEntry:
    """``entry`` with its model's state; a READY model's inputs and outputs are those of the
    config its newest READY version is served with."""
    if model is None or (not model.versions and not model.error):
        return replace(entry, state=State.NOT_LOADED)
    if not model.versions:
        return replace(entry, state=State.UNAVAILABLE, reason=model.error)
    ready = [v for _, v in sorted(model.versions.items()) if v.state == State.READY]
    if ready and ready[-1].config:
        inputs, outputs = tensor_specs(ModelConfig.FromString(ready[-1].config))
        return replace(entry, state=State.READY, reason=ready[-1].reason, inputs=inputs,
                       outputs=outputs)
    _, newest = max(model.versions.items())
    return replace(entry, state=newest.state, reason=newest.reason)


def load_durations(
    models: Mapping[str, ModelStatus],
) -> tuple[tuple[str, dict[str, str], float], ...]:
    """``nv_model_load_duration_secs`` of every READY version."""
    return tuple(
        (
            "nv_model_load_duration_secs",
            {"model": name, "version": str(number)},
            round(version.load_secs, 6),
        )
        for name, model in sorted(models.items())
        for number, version in sorted(model.versions.items())
        if version.state == State.READY
    )


# Triton's openings of a failed load's answer, which clients and scripts match on.
_LOAD_FAILED_OPENINGS = ("failed to load '", "load failed for model '")


def load_failure(model: str, error: InferdError) -> InferdError:
    """``error`` as a load request's answer: Triton's ``failed to load '<m>': `` before
    inferd's real cause (unless it already opens with Triton's words), with its status."""
    if error.message.startswith(_LOAD_FAILED_OPENINGS):
        return error
    return InferdError.from_code(error.code, f"failed to load '{model}': {error.message}")
