"""``inferd check``: what serving a repository would make of each model, found without serving.

Owns the walk over a repository that repeats a load's checks in load order, through the code
the server itself runs: ``ModelRepository.resolve`` (parse, normalize, validate, backend,
version policy), the backend's ``BackendSpec.completion`` in place of the executor's load
(auto-complete and the model-file checks; a backend without one "needs the server"),
``sequence_plan``, ``classification.read_labels`` and ``warmup.warmup_samples`` as control
and the executor apply them, and that each selected version holds its model file. It reads
each model's catalog metadata (``inferd.kernel.actors.repository.catalog``), fetches a remote model
as a load would, then hands the ensembles to ``inferd.kernel.cli.check.ensembles``, which needs
every model's report. It returns a ``CheckReport`` (``inferd.kernel.cli.check.report``); the CLI
prints it. It never starts a server or an executor and never writes to the repository.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferd.kernel.actors.executor.warmup import warmup_samples
from inferd.kernel.sdk.agents import AgentRegistry
from inferd.kernel.actors.repository.catalog import CATALOG_FILENAME, read_catalog
from inferd.kernel.actors.repository.fingerprints import CONFIG_FILENAME, CUSTOM_CONFIGS
from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.sdk.storage import StorageRegistry
from inferd.kernel.actors.scheduler.classification import read_labels
from inferd.kernel.cli.check.ensembles import check_ensembles
from inferd.kernel.cli.check.report import (
    CHECKED,
    COMPLETED,
    DISABLED,
    NEEDS_SERVER,
    NOT_NEEDED,
    CheckReport,
    Finding,
    ModelReport,
    located_finding,
)
from inferd.kernel.modelconfig.reading import ModelConfig, backend_can_auto_complete, validate
from inferd.kernel.modelconfig.sequence_plan import SequencePlan, client_config, execution_config
from inferd.kernel.modelconfig.support import check_supported
from inferd.kernel.sdk.backends import BackendRegistry, ModelContext
from inferd.protocols.errors import InferdError


def check_repository(
    roots: Sequence[str | Path],
    backends: BackendRegistry,
    *,
    auto_complete: bool = True,
    config_name: str = "",
    options: dict[str, Any] | None = None,
    gpu_ids: Sequence[int] | None = None,
    cache_dir: str | Path | None = None,
    agents: AgentRegistry | None = None,
    storages: StorageRegistry | None = None,
) -> CheckReport:
    """Check every model under ``roots`` as ``inferd serve`` with the same settings would
    load it (``options``: the executor's, e.g. ``backend_config``). A remote root's models
    are fetched into ``cache_dir`` as a load would fetch them; a remote root that cannot be
    listed is the repository's own error (nothing under it can be checked)."""
    repository = ModelRepository(roots, backends, auto_complete=auto_complete,
                                 gpu_ids=gpu_ids, config_name=config_name, cache_dir=cache_dir,
                                 agents=agents, storages=storages)
    report = CheckReport(tuple(str(root) for root in roots))
    report.errors += [Finding(why) for mirror in repository.remote.mirrors
                      if (why := mirror.check())]
    if report.errors:
        return report
    names, problems = repository.list_models()
    for name in names:
        folder = _fetched_folder(repository, name)
        model = ModelReport(name, str(folder))
        report.models.append(model)
        if name in problems:
            model.errors.append(Finding(problems[name]))
            continue
        _check_model(repository, backends, model, folder, auto_complete, config_name,
                     options or {})
    check_ensembles(report, set(names))
    for model in report.models:
        _show_remote_places(repository, model)
    return report


def _show_remote_places(repository: ModelRepository, model: ModelReport) -> None:
    """A remote model's path and problem places as ``<url>/<model>/...``, not its cache
    folder's (which the reader never wrote)."""
    holders = [] if not repository.remote.has(model.name) else \
        repository.remote.holders(model.name, fresh=False, local=True)
    if len(holders) != 1:
        return
    cache, shown = model.path, f"{holders[0].url}/{model.name}"
    model.path = shown
    for findings in (model.errors, model.warnings):
        findings[:] = [replace(finding, file=shown + finding.file[len(cache):])
                       if finding.file.startswith(cache) else finding for finding in findings]


def _fetched_folder(repository: ModelRepository, name: str) -> Path:
    """The folder to check ``name`` in: a remote model's cache folder, after the fetch a load
    would make (its failure is reported by the model's own check), else the local one."""
    if repository.remote.has(name):
        with contextlib.suppress(InferdError):
            repository.resolve(name, log_warnings=False)
        with contextlib.suppress(InferdError):
            cached: Path = repository.folder(name)
            return cached
    roots: tuple[Path, ...] = repository.roots
    folders = [root / name for root in roots if (root / name).is_dir()]
    if folders:
        return folders[0]
    return (roots[0] if roots else Path()) / name


def _check_model(
    repository: ModelRepository, backends: BackendRegistry, model: ModelReport, folder: Path,
    auto_complete: bool, config_name: str, options: dict[str, Any],
) -> None:
    config_file = folder / CONFIG_FILENAME
    custom = folder / CUSTOM_CONFIGS / f"{config_name}.pbtxt"
    if config_name and custom.is_file():
        config_file = custom
    model.versions_on_disk = tuple(repository.versions(folder))
    try:
        model.catalog = read_catalog(folder, f"{model.name}/{CATALOG_FILENAME}")
    except InferdError as error:
        model.errors.append(located_finding(error.message, model.name, folder,
                                            folder / CATALOG_FILENAME))
    try:
        resolved = repository.resolve(model.name, log_warnings=False)
    except InferdError as error:
        model.errors.append(located_finding(error.message, model.name, folder, config_file))
        return
    config = ModelConfig.FromString(resolved.config)
    model.backend, model.platform = config.backend, config.platform
    model.versions = resolved.versions
    model.config = config
    where = str(config_file) if config_file.is_file() else ""
    model.warnings.extend(Finding(warning, where) for warning in resolved.warnings)
    if not model.backend:  # an ensemble: its graph is checked once every model is known
        return
    for version in resolved.versions:
        filename = config.default_model_filename
        if filename and not (folder / str(version) / filename).exists():
            model.errors.append(Finding(
                f"model '{model.name}': version {version} has no model file "
                f"'{version}/{filename}'", str(folder / str(version))))
    if model.errors:
        return
    completed = _complete(backends, model, folder, config, auto_complete, options)
    if completed is None:
        return
    model.config = completed
    try:
        # What control checks once the executor has loaded the model (_bring_up_version).
        validate(completed, folder_name=model.name, complete=True)
        for warning in check_supported(completed):
            if warning not in resolved.warnings:
                model.warnings.append(Finding(warning, where))
        read_labels(completed, folder)
        if completed.HasField("sequence_batching"):
            SequencePlan.of(completed, folder)
        for version in resolved.versions:
            warmup_samples(completed, version, folder)
    except InferdError as error:
        model.errors.append(located_finding(error.message, model.name, folder, config_file))


def _complete(
    backends: BackendRegistry, model: ModelReport, folder: Path, config: ModelConfig,
    auto_complete: bool, options: dict[str, Any],
) -> ModelConfig | None:
    """The config the executor's load would give, or ``None`` when it cannot be known here
    (or the load would fail: then an error is recorded)."""
    spec = backends.get(config.backend)
    completion = spec.load_completion() if spec is not None else None
    wanted = auto_complete and backend_can_auto_complete(config, backends)
    if completion is None:
        if wanted:
            model.completion = NEEDS_SERVER
            model.notes.append(f"backend '{config.backend}' completes its config only at load: "
                               "inputs and outputs are not checked against the model file")
            return None
        model.completion = DISABLED if not auto_complete else NOT_NEEDED
        return config
    version = max(model.versions)
    context = ModelContext(name=model.name, version=version, model_dir=folder,
                           config=execution_config(config), auto_complete=auto_complete,
                           options=options)
    try:
        completed = completion(context)
    except InferdError as error:
        model.errors.append(Finding(error.message.replace(str(folder), model.name),
                                    str(folder / str(version))))
        return None
    except Exception as error:  # a backend's exception is the load's reason, as in a server
        model.errors.append(_raised_at(f"{type(error).__name__}: {error}", error, folder))
        return None
    checked = client_config(completed, config)
    if not auto_complete:
        model.completion = DISABLED
    else:
        model.completion = COMPLETED if checked != config else CHECKED
    return checked


def _raised_at(message: str, error: BaseException, folder: Path) -> Finding:
    """``message`` placed at the line that raised ``error``: the innermost frame of the
    traceback (a plugin's or the model's own code), the model folder when there is none."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or frames[-1].lineno is None:
        return Finding(message, str(folder))
    return Finding(message, frames[-1].filename, frames[-1].lineno, (frames[-1].colno or 0) + 1)
