"""``inferd check``: what serving a repository would make of each model, found without serving.

Owns the walk over a repository that repeats a load's checks in load order, through the code
the server itself runs: ``ModelRepository.resolve`` (parse, normalize, validate, backend,
version policy), the backend's ``BackendSpec.completion`` in place of the executor's load
(auto-complete and the model-file checks; a backend without one "needs the server"),
``sequence_plan``, ``classification.read_labels`` and ``warmup.warmup_samples`` as control
and the executor apply them, and the ensemble checks of ``inferd.kernel.ensembles.control``
(``validate_ensemble``, ``EnsembleDependencies`` for cycles), plus what only a repository-wide
view can tell before any load: that each selected version holds its model file, and that the
tensors passed between ensemble steps agree in datatype and shape. It also reads each model's
catalog metadata (``inferd.kernel.catalog``). It returns a ``CheckReport``; the CLI prints
it. It never starts a server or an executor and never writes to the repository.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from inferd.kernel.backend import BackendRegistry, ModelContext
from inferd.kernel.catalog import CATALOG_FILENAME, ModelCatalog, read_catalog
from inferd.kernel.classification import read_labels
from inferd.kernel.config_completion import shapes_agree
from inferd.kernel.config_support import check_supported
from inferd.kernel.ensembles.dependencies import EnsembleDependencies, Requirement
from inferd.kernel.modelconfig import (
    ENSEMBLE_PLATFORM,
    ModelConfig,
    backend_can_auto_complete,
    validate,
    validate_ensemble,
)
from inferd.kernel.folder_fingerprints import CONFIG_FILENAME, CUSTOM_CONFIGS
from inferd.kernel.repository import ModelRepository
from inferd.kernel.sequence_plan import SequencePlan, client_config, execution_config
from inferd.kernel.warmup import warmup_samples
from inferd.protocols.errors import InferdError

JSON_FORMAT_VERSION = 1

# Completion states a report gives each model.
COMPLETED = "completed from the model file"
NOT_NEEDED = "not needed"
DISABLED = "disabled"
NEEDS_SERVER = "needs the server"

_LOCATED = re.compile(r"^(?P<file>[^\s:][^:]*\.(?:pbtxt|toml)):(?P<line>\d+):(?P<column>\d+): "
                      r"(?P<problem>.*)$", re.DOTALL)
_FILED = re.compile(r"^(?P<file>[^\s:][^:]*\.(?:pbtxt|toml)): (?P<problem>.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem; ``file`` (a path as given under the repository root), ``line`` and
    ``column`` (1-based) where it has a place, 0 where not."""

    message: str
    file: str = ""
    line: int = 0
    column: int = 0

    def located(self) -> str:
        """``file:line:col: message`` (or less where the place is less precise)."""
        if not self.file:
            return self.message
        if self.line:
            return f"{self.file}:{self.line}:{self.column or 1}: {self.message}"
        return f"{self.file}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "file": self.file or None,
                "line": self.line or None, "column": self.column or None}


@dataclass(slots=True)
class ModelReport:
    """What the checker found for one model folder."""

    name: str
    path: str
    backend: str = ""
    platform: str = ""
    versions_on_disk: tuple[int, ...] = ()
    versions: tuple[int, ...] = ()  # those the version policy loads
    completion: str = NOT_NEEDED
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: ModelConfig | None = None  # the config the server would serve, when known
    catalog: ModelCatalog | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self, *, with_config: bool = False) -> dict[str, Any]:
        document: dict[str, Any] = {
            "name": self.name,
            "path": self.path,
            "state": "ok" if self.ok else "error",
            "backend": self.backend,
            "platform": self.platform,
            "versions_on_disk": list(self.versions_on_disk),
            "versions": list(self.versions),
            "auto_complete": self.completion,
            "errors": [finding.to_json() for finding in self.errors],
            "warnings": [finding.to_json() for finding in self.warnings],
            "notes": list(self.notes),
            "catalog": self.catalog.to_json() if self.catalog is not None else None,
        }
        if with_config:
            document["config"] = config_text(self.config) if self.config is not None else None
        return document


@dataclass(slots=True)
class CheckReport:
    repositories: tuple[str, ...]
    models: list[ModelReport] = field(default_factory=list)
    errors: list[Finding] = field(default_factory=list)  # the repository's own

    @property
    def ok(self) -> bool:
        return not self.errors and all(model.ok for model in self.models)

    def to_json(self, *, with_config: bool = False) -> dict[str, Any]:
        return {
            "format_version": JSON_FORMAT_VERSION,
            "ok": self.ok,
            "repositories": list(self.repositories),
            "error_count": len(self.errors) + sum(len(m.errors) for m in self.models),
            "warning_count": sum(len(m.warnings) for m in self.models),
            "errors": [finding.to_json() for finding in self.errors],
            "models": [model.to_json(with_config=with_config) for model in self.models],
        }


def config_text(config: ModelConfig) -> str:
    """A config in protobuf text format, as a ``config.pbtxt`` would hold it."""
    return str(text_format.MessageToString(config))


def check_repository(
    roots: Sequence[str | Path],
    backends: BackendRegistry,
    *,
    auto_complete: bool = True,
    config_name: str = "",
    options: dict[str, Any] | None = None,
    gpu_ids: Sequence[int] | None = None,
    cache_dir: str | Path | None = None,
) -> CheckReport:
    """Check every model under ``roots`` as ``inferd serve`` with the same settings would
    load it (``options``: the executor's, e.g. ``backend_config``). A remote root's models
    are fetched into ``cache_dir`` as a load would fetch them; a remote root that cannot be
    listed is the repository's own error (nothing under it can be checked)."""
    repository = ModelRepository(roots, backends, auto_complete=auto_complete,
                                 gpu_ids=gpu_ids, config_name=config_name, cache_dir=cache_dir)
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
    _check_ensembles(report, repository, set(names))
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
        model.errors.append(_finding(error.message, model.name, folder, folder / CATALOG_FILENAME))
    try:
        resolved = repository.resolve(model.name, log_warnings=False)
    except InferdError as error:
        model.errors.append(_finding(error.message, model.name, folder, config_file))
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
        model.errors.append(_finding(error.message, model.name, folder, config_file))


def _complete(
    backends: BackendRegistry, model: ModelReport, folder: Path, config: ModelConfig,
    auto_complete: bool, options: dict[str, Any],
) -> ModelConfig | None:
    """The config the executor's load would give, or ``None`` when it cannot be known here
    (or the load would fail: then an error is recorded)."""
    spec = backends.get(config.backend)
    completion = spec.load_completion() if spec is not None else None
    wanted = auto_complete and backend_can_auto_complete(config)
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
        model.errors.append(Finding(f"{type(error).__name__}: {error}", str(folder)))
        return None
    model.completion = COMPLETED if auto_complete else DISABLED
    return client_config(completed, config)


def _check_ensembles(report: CheckReport, repository: ModelRepository, names: set[str]) -> None:
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


def _finding(message: str, name: str, folder: Path, default_file: Path) -> Finding:
    """A message from the server's code as a ``Finding``: its ``<model>/<file>`` label (and
    line:col) become the file's path in the repository."""
    for pattern in (_LOCATED, _FILED):
        match = pattern.match(message)
        if match is not None:
            label = match.group("file")
            relative = label.split("/", 1)[1] if label.startswith(f"{name}/") else label
            line = int(match.group("line")) if "line" in match.groupdict() else 0
            column = int(match.group("column")) if "column" in match.groupdict() else 0
            return Finding(match.group("problem"), str(folder / relative), line, column)
    if not default_file.is_file():
        return Finding(message)
    line, column = _field_line(default_file, message)
    return Finding(message, str(default_file), line, column)


def _field_line(config_file: Path, message: str) -> tuple[int, int]:
    """Where a validation message's field is set: the first config field it quotes
    (``'max_batch_size'``) that exactly one line of the file starts with; (0, 0) when none
    does, rather than a guess."""
    try:
        lines = config_file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0, 0
    for field_name in re.findall(r"'([a-z][a-z0-9_]*)'", message):
        if field_name not in _config_field_names():
            continue
        starts = re.compile(rf"^(\s*){field_name}\s*[:{{\[]")
        found = [(number, match.end(1) + 1) for number, text in enumerate(lines, start=1)
                 if (match := starts.match(text))]
        if len(found) == 1:
            return found[0]
    return 0, 0


def _config_field_names() -> frozenset[str]:
    """Every field name of ``ModelConfig`` and the messages inside it."""
    global _FIELD_NAMES
    if _FIELD_NAMES is None:
        names: set[str] = set()
        pending, seen = [ModelConfig.DESCRIPTOR], set()
        while pending:
            descriptor = pending.pop()
            if descriptor.full_name in seen:
                continue
            seen.add(descriptor.full_name)
            for field_descriptor in descriptor.fields:
                names.add(field_descriptor.name)
                if field_descriptor.message_type is not None:
                    pending.append(field_descriptor.message_type)
        _FIELD_NAMES = frozenset(names)
    return _FIELD_NAMES


_FIELD_NAMES: frozenset[str] | None = None
