"""``inferd check``'s ensemble checks: what loading each ensemble would run into.

Owns the checks that need every model's report first: an ensemble is refused as control would
refuse it (``validate_ensemble``, and ``EnsembleDependencies`` for a cycle), and
``ensemble_problems`` (pure) finds what only a repository-wide view tells before any load: a
step naming a version its model does not load, a tensor mapped to an input or output its model
lacks, and a tensor whose datatype or shape differs between the step that writes it and those
that read it. A composing model that would fail makes its ensembles fail too; an ensemble's
``model_warmup`` samples are made as its load makes them (reading its ``warmup/`` files). It
never loads a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.kernel.actors.control.ensemble_dependencies import EnsembleDependencies, Requirement
from inferd.kernel.actors.executor.warmup import warmup_samples
from inferd.kernel.actors.repository.fingerprints import CONFIG_FILENAME
from inferd.kernel.cli.check.report import (
    NEEDS_SERVER,
    NOT_NEEDED,
    CheckReport,
    Finding,
    ModelReport,
)
from inferd.kernel.modelconfig.reading import ENSEMBLE_PLATFORM, ModelConfig, validate_ensemble
from inferd.kernel.sdk.modelconfig import shapes_agree
from inferd.protocols.errors import InferdError


def check_ensembles(report: CheckReport, names: set[str]) -> None:
    """Check every ensemble in ``report`` once each model's own check is done (``names``:
    every model in the repository)."""
    by_name = {model.name: model for model in report.models}
    ensembles = {
        model.name: [Requirement(step.model_name, int(step.model_version))
                     for step in model.config.ensemble_scheduling.step]
        for model in report.models
        if model.config is not None and model.config.platform == ENSEMBLE_PLATFORM
        and not model.errors
    }
    for model in report.models:
        config = model.config
        if model.name not in ensembles or config is None:
            continue
        where = _config_file(model)
        try:
            validate_ensemble(config, names.__contains__)
            _check_no_cycle(model.name, ensembles)
            for version in model.versions:
                warmup_samples(config, version, Path(model.path))
        except InferdError as error:
            model.errors.append(Finding(error.message, where))
            continue
        for problem in ensemble_problems(config, {n: m.config for n, m in by_name.items()},
                                         {n: m.versions for n, m in by_name.items()}):
            model.errors.append(Finding(problem, where))
        for step in config.ensemble_scheduling.step:
            composing = by_name.get(step.model_name)
            if composing is not None and composing.errors:
                model.errors.append(Finding(
                    f"ensemble '{model.name}': composing model '{step.model_name}' would fail "
                    "to load (see its errors)", where))
            elif composing is not None and composing.completion == NEEDS_SERVER:
                model.notes.append(f"step '{step.model_name}': its tensors need the server "
                                   "to be checked")
        model.completion = NOT_NEEDED


def _check_no_cycle(name: str, ensembles: dict[str, list[Requirement]]) -> None:
    """Refuse ``name`` as control would once every other ensemble were loaded: the others are
    recorded first (one that closes a cycle of its own is left out, as its load would fail),
    then ``name``, whose record raises when it closes a cycle."""
    dependencies = EnsembleDependencies()
    for other, needed in ensembles.items():
        if other != name:
            try:
                dependencies.begin_load(other, needed)
            except InferdError:
                pass
    dependencies.begin_load(name, ensembles[name])


def ensemble_problems(
    ensemble: ModelConfig, configs: dict[str, ModelConfig | None],
    versions: dict[str, tuple[int, ...]],
) -> list[str]:
    """What loading ``ensemble`` would run into between its steps: a step naming a version
    its model does not load, a tensor mapped to an input or output its model lacks, and a
    tensor whose datatype or shape differs between the step that writes it (or the
    ensemble's inputs) and the steps that read it (or the ensemble's outputs). A step whose
    model's tensors are not known (``None`` config, or incomplete) is skipped. Pure."""
    name = ensemble.name
    problems: list[str] = []
    # tensor -> (datatype, full shape, who gives it)
    sources: dict[str, tuple[int, tuple[int, ...], str]] = {
        entry.name: (entry.data_type, _full_shape(entry, ensemble.max_batch_size),
                     "the ensemble's input")
        for entry in ensemble.input
    }
    steps = list(ensemble.ensemble_scheduling.step)
    known: dict[int, ModelConfig] = {}
    for index, step in enumerate(steps):
        config = configs.get(step.model_name)
        label = f"step {index} ('{step.model_name}')"
        if step.model_version >= 0 and step.model_name in versions and \
                step.model_version not in versions[step.model_name]:
            loaded = ", ".join(map(str, versions[step.model_name])) or "none"
            problems.append(f"ensemble '{name}': {label} uses version {step.model_version}, "
                            f"which its version policy does not load (it loads: {loaded})")
        if config is None or not (config.input or config.output):
            continue
        known[index] = config
        outputs = {entry.name: entry for entry in config.output}
        for key, tensor in step.output_map.items():
            entry = outputs.get(key)
            if entry is None:
                problems.append(f"ensemble '{name}': {label} maps output '{key}', which model "
                                f"'{step.model_name}' does not have (its outputs: "
                                f"{_names(config.output)})")
                continue
            sources[tensor] = (entry.data_type, _full_shape(entry, config.max_batch_size),
                               f"output '{key}' of {label}")
    for index, config in known.items():
        step = steps[index]
        label = f"step {index} ('{step.model_name}')"
        inputs = {entry.name: entry for entry in config.input}
        for key, tensor in step.input_map.items():
            entry = inputs.get(key)
            if entry is None:
                problems.append(f"ensemble '{name}': {label} maps tensor '{tensor}' to input "
                                f"'{key}', which model '{step.model_name}' does not have (its "
                                f"inputs: {_names(config.input)})")
                continue
            source = sources.get(tensor)
            if source is not None:
                problems.extend(_mismatch(name, tensor, source, entry, config.max_batch_size,
                                          f"input '{key}' of {label}"))
    for entry in ensemble.output:
        source = sources.get(entry.name)
        if source is not None and source[2] != "the ensemble's input":
            problems.extend(_mismatch(name, entry.name, source, entry, ensemble.max_batch_size,
                                      "the ensemble's output"))
    return problems


def _mismatch(
    ensemble: str, tensor: str, source: tuple[int, tuple[int, ...], str], entry: Any,
    max_batch_size: int, reader: str,
) -> list[str]:
    datatype, shape, writer = source
    wanted_shape = _full_shape(entry, max_batch_size)
    if entry.data_type != datatype:
        return [f"ensemble '{ensemble}': tensor '{tensor}' is {_type(datatype)} as "
                f"{writer} but {reader} expects {_type(entry.data_type)}"]
    if not shapes_agree(wanted_shape, shape):
        return [f"ensemble '{ensemble}': tensor '{tensor}' has shape {list(shape)} as "
                f"{writer} but {reader} expects {list(wanted_shape)}"]
    return []


def _full_shape(entry: Any, max_batch_size: int) -> tuple[int, ...]:
    """A tensor's shape as it travels: the batch dimension first when the model batches."""
    dims = tuple(int(d) for d in entry.dims)
    return (-1, *dims) if max_batch_size > 0 else dims


def _type(data_type: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return str(model_config_pb2.DataType.Name(data_type))


def _names(entries: Any) -> str:
    return "[" + ", ".join(entry.name for entry in entries) + "]"


def _config_file(model: ModelReport) -> str:
    path = Path(model.path) / CONFIG_FILENAME
    return str(path) if path.is_file() else ""
