"""The model repository on disk: which models exist, and what loading one means.

Owns the layout rules of SPEC 1 (one folder per model under one or more roots, numeric
version folders, ``config.pbtxt``), turning a model name into a ``ResolvedModel`` (config read,
normalized and validated; versions chosen by the version policy) and fingerprinting model
folders so a poller can tell when one changed. Synchronous and single-threaded: the
repository actor wraps it and decides when to call it. It reads the repository and never
writes to it, loads nothing, and keeps no state beyond its settings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from inferd.kernel.actors.repository.agents import run_agents
from inferd.kernel.actors.repository.fingerprints import (
    CONFIG_FILENAME,
    CUSTOM_CONFIGS,
    folders_fingerprint,
    version_fingerprints,
)
from inferd.kernel.actors.repository.mirror import CachedCopy, ModelFetch, RepositoryMirror
from inferd.kernel.actors.repository.remote_roots import RemoteRoots
from inferd.kernel.actors.repository.remote_storage import is_remote_url
from inferd.kernel.modelconfig.reading import (
    ENSEMBLE_PLATFORM,
    ModelConfig,
    backend_can_auto_complete,
    model_file_candidates,
    normalize,
    parse_config_json,
    parse_config_text,
    validate,
)
from inferd.kernel.modelconfig.support import check_supported
from inferd.kernel.modelconfig.validation import check_gpus
from inferd.kernel.modelconfig.version_labels import (
    LABELS_FILENAME,
    read_labels_file,
    selected_versions,
)
from inferd.kernel.runtime.devices import can_use_gpu
from inferd.kernel.sdk.devices import visible_gpus
from inferd.kernel.sdk.agents import AgentRegistry
from inferd.kernel.sdk.backends import BackendRegistry
from inferd.kernel.sdk.storage import READ_TIMEOUT_SECS, StorageRegistry
from inferd.protocols.errors import InferdError, InvalidArgument, NotFound
from inferd.protocols.messages import ResolvedModel
from inferd.protocols.names import check_model_name, model_name_problem

log = logging.getLogger(__name__)


def read_model_data(model_dir: Path, folder: str, filename: str, what: str) -> bytes:
    """The bytes of ``filename`` in a model's ``folder`` (``warmup/``, ``initial_state/``,
    ``.`` for the model's folder itself); ``what`` names it in errors. A name that leads out
    of that folder is refused."""
    root = (model_dir / folder).resolve()
    path = (root / filename).resolve()
    if root not in path.parents:
        where = "folder" if folder == "." else f"{folder}/ folder"
        raise InvalidArgument(f"{what} '{filename}' is not inside the model's {where}")
    try:
        return path.read_bytes()
    except OSError as error:
        raise InvalidArgument(f"unable to read {what} '{filename}': {error.strerror}") from None

TWO_ROOTS_PROBLEM = "model appears in two or more repositories"
# How a load whose version policy selects no version folder fails (Triton's words).
NO_VERSION_PROBLEM = "at least one version must be available under the version policy of model"
LISTING_REUSE_SECS = 1.0  # a remote root's model list is read again after this long
_MAX_VERSION = 2**63 - 1  # versions are int64 in every protocol


class ModelRepository:
    """The models under ``roots``. ``auto_complete`` False is ``--disable-auto-complete-config``:
    every model then needs a ``config.pbtxt`` that lists its inputs and outputs.
    ``config_name`` is ``--model-config-name``: a model's ``configs/<name>.pbtxt`` is its
    config where it has one. Roots that are remote URLs
    (``inferd.kernel.actors.repository.remote_storage``) are read through ``RemoteRoots``: a remote
    model's folder is its cache folder under ``cache_dir``, which holds what its last load
    fetched."""

    def __init__(
        self,
        roots: Sequence[str | Path],
        backends: BackendRegistry,
        *,
        auto_complete: bool = True,
        gpu_ids: Sequence[int] | None = None,
        config_name: str = "",
        cache_dir: str | Path | None = None,
        remote_timeout: float = READ_TIMEOUT_SECS,
        agents: AgentRegistry | None = None,
        storages: StorageRegistry | None = None,
    ) -> None:
        # the server's storage plugins (remote_storage); None: none, every root is a folder
        storages = storages if storages is not None else StorageRegistry()
        unique: dict[str, Path] = {}
        for root in roots:
            if not is_remote_url(str(root), storages):
                unique.setdefault(os.path.realpath(root), Path(root))
        self.roots: tuple[Path, ...] = tuple(unique.values())
        self.remote = RemoteRoots([str(r) for r in roots if is_remote_url(str(r), storages)],
                                  storages, cache_dir, remote_timeout)
        self._backends = backends
        # the server's repository agents (inferd.kernel.actors.repository.agents); None: none
        self._agents = agents if agents is not None else AgentRegistry()
        self._auto_complete = auto_complete
        self._config_name = config_name
        # The GPUs configs may name: this machine's (inferd.kernel.runtime.devices) unless given.
        self.gpu_ids = tuple(visible_gpus() if gpu_ids is None else gpu_ids)

    def list_models(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """Every model folder name in the roots, sorted, and why some cannot be loaded."""
        seen: dict[str, int] = {}
        for root in self.roots:
            for name in _model_folder_names(root):
                seen[name] = seen.get(name, 0) + 1
        names, unreachable = self.remote.names(max_age=LISTING_REUSE_SECS)
        for name in names:
            seen[name] = seen.get(name, 0) + 1
        problems = {name: TWO_ROOTS_PROBLEM for name, count in seen.items() if count > 1}
        return tuple(sorted(seen)), {**unreachable, **problems}

    def fingerprints(self) -> tuple[dict[str, str], dict[str, str]]:
        """Every loadable model's ``fingerprint`` and the problems of ``list_models``; a
        remote root is fingerprinted from one listing of it."""
        remote, names, problems = self.remote.fingerprints()
        seen: dict[str, int] = {}
        for name in [*names, *(n for root in self.roots for n in _model_folder_names(root))]:
            seen[name] = seen.get(name, 0) + 1
        problems.update({name: TWO_ROOTS_PROBLEM for name, count in seen.items() if count > 1})
        fingerprints = {}
        for name in seen:
            if name in problems:
                continue
            try:
                fingerprints[name] = remote.get(name) or self.fingerprint(name)
            except InferdError:
                continue  # removed while we looked: the next poll sees it gone
        return fingerprints, problems

    def has_model(self, name: str) -> bool:
        """Whether some root holds a folder for ``name`` (for ensemble step checks)."""
        if model_name_problem(name):
            return False
        return bool(self._folders(name)) or self.remote.has(name)

    @staticmethod
    def versions(model_dir: Path) -> list[int]:
        """The version folders of a model: decimal names without leading zeros, sorted."""
        try:
            entries = list(model_dir.iterdir())
        except OSError:
            return []
        found = []
        for entry in entries:
            name = entry.name
            if not (name.isascii() and name.isdigit()) or (name != "0" and name[0] == "0"):
                continue
            if int(name) <= _MAX_VERSION and entry.is_dir():
                found.append(int(name))
        return sorted(found)

    @staticmethod
    def select_versions(policy: Any, available: list[int]) -> list[int]:
        """The versions a ``ModelVersionPolicy`` picks from ``available``, ascending. No policy
        set means ``latest { num_versions: 1 }``."""
        ordered = sorted(available)
        choice = policy.WhichOneof("policy_choice")
        if choice == "all":
            return ordered
        if choice == "specific":
            wanted = set(policy.specific.versions)
            return [version for version in ordered if version in wanted]
        count = policy.latest.num_versions if choice == "latest" else 1
        return ordered[-count:] if count > 0 else []

    def resolve(
        self, name: str, *, config_override: str = "", path_override: str = "",
        log_warnings: bool = True, cached_ok: bool = False,
        versions: Sequence[int] = (), exact: bool = False,
    ) -> ResolvedModel:
        """Everything needed to load ``name``. ``config_override`` (JSON ModelConfig) replaces
        ``config.pbtxt``; ``path_override`` replaces the model folder (a load with files).
        ``log_warnings`` False leaves the config's warnings to the caller (the checker, the
        catalog), which reports them its own way. ``cached_ok``: a remote model's cached copy
        stands in while its storage cannot be read (``RepositoryMirror.fetching``).
        ``versions`` are selected besides the policy's (or, ``exact``, instead of them).
        Raises ``NotFound`` for an unknown model and ``InvalidArgument`` for anything wrong
        with its folder or config."""
        check_model_name(name)
        mirror = None if path_override else self._mirror_of(name, fresh=True)
        if mirror is not None:
            with mirror.fetching(name, cached_ok=cached_ok) as fetch:
                return self._resolve_folder(name, fetch.folder, config_override, log_warnings,
                                            fetch, (tuple(versions), exact))
        model_dir = Path(path_override) if path_override else self._only_folder(name)
        return self._resolve_folder(name, model_dir, config_override, log_warnings, None,
                                    (tuple(versions), exact))

    def _resolve_folder(
        self, name: str, model_dir: Path, config_override: str, log_warnings: bool,
        fetch: ModelFetch | CachedCopy | None,
        wanted: tuple[tuple[int, ...], bool] = ((), False),
    ) -> ResolvedModel:
        if not model_dir.is_dir():
            raise InvalidArgument(f"model '{name}': folder {model_dir} does not exist")
        available = self.versions(model_dir)
        config, has_config = self._read_config(name, model_dir, config_override)
        if not available:
            # Checked before the backend: with no version folder, nothing can be inferred.
            _no_version_available(name)

        def present(filename: str) -> bool:
            return any((model_dir / str(version) / filename).exists() for version in available)

        config = normalize(
            config, folder_name=name, backends=self._backends, default_filename_present=present,
            gpu_ids=self.gpu_ids,
            backend_uses_gpu=lambda backend: can_use_gpu(self._backends.get(backend)),
        )
        check_gpus(config, self.gpu_ids)
        completes_later = (self._auto_complete
                           and backend_can_auto_complete(config, self._backends))
        if not has_config:
            self._check_config_may_be_missing(name, model_dir, config, completes_later)
        validate(config, folder_name=name, complete=not completes_later)
        warnings = check_supported(config)
        for warning in warnings if log_warnings else ():
            log.warning("%s", warning)
        if config.backend and self._backends.get(config.backend) is None:
            installed = ", ".join(self._backends.names()) or "none"
            raise InvalidArgument(
                f"model '{name}' needs backend '{config.backend}', which is not installed "
                f"(installed backends: {installed})"
            )
        by_policy = self.select_versions(config.version_policy, available)
        labels = read_labels_file(model_dir, f"{name}/{LABELS_FILENAME}", available)
        selected = selected_versions(name, by_policy, available, *wanted)
        if not selected:
            _no_version_available(name)
        if fetch is not None:
            fetch.versions(selected)  # only now: a refused config downloads no model file
        # The config's repository agents see the files last: they may refuse or replace them.
        model_dir = run_agents(name, model_dir, selected, config, self._agents)
        return ResolvedModel(
            model=name,
            backend=config.backend,
            config=config.SerializeToString(),
            path=str(model_dir),
            versions=tuple(selected),
            version_fingerprints=tuple(version_fingerprints(model_dir, selected).items()),
            warnings=tuple(warnings),
            policy_versions=tuple(by_policy),
            labels_file=labels is not None,
            labels=labels.labels if labels is not None else {},
            canary_percent=labels.canary_percent if labels is not None else 0.0,
        )

    def fingerprint(self, name: str) -> str:
        """A hash of the model folder's entries (relative path, size, mtime), which changes
        when a file or version folder is added, removed or rewritten. Hidden entries (editor
        swap files) and ``__pycache__`` folders are left out. Raises ``NotFound`` when no root
        holds the model."""
        folders = [] if model_name_problem(name) else self._folders(name)
        if not folders:
            mirror = None if model_name_problem(name) else self._mirror_of(name)
            if mirror is not None:
                return str(mirror.fingerprint(name))
            raise NotFound(f"model '{name}' is not in the model repository")
        fingerprint: str = folders_fingerprint(folders)
        return fingerprint

    def folder(self, name: str) -> Path:
        """The folder of ``name`` (a remote model's cache folder, which holds what its last
        load fetched); ``NotFound``, or ``InvalidArgument`` when in two roots."""
        mirror = self._mirror_of(name)
        return mirror.models / name if mirror is not None else self._only_folder(name)

    def _mirror_of(self, name: str, *, fresh: bool = False) -> RepositoryMirror | None:
        """The remote root holding ``name``, None when none does; two roots'
        ``InvalidArgument`` when a local or another remote root holds it too. ``fresh``: a
        name not listed yet is looked up again (a load must see a model just uploaded)."""
        local = bool(self._folders(name))
        holders = self.remote.holders(name, fresh=fresh, local=local)
        if not holders:
            return None
        if len(holders) > 1 or local:
            log.error("model '%s' is in more than one repository", name)
            raise InvalidArgument(TWO_ROOTS_PROBLEM)
        return holders[0]

    def _folders(self, name: str) -> list[Path]:
        return [root / name for root in self.roots if (root / name).is_dir()]

    def _only_folder(self, name: str) -> Path:
        folders = self._folders(name)
        if not folders:
            # Clients see this message: it names the model, not the server's folders.
            raise NotFound(f"model '{name}' is not in the model repository")
        if len(folders) > 1:
            # Triton's words (the index has them too); the folders go to the log only.
            log.error("model '%s' is in more than one repository: %s", name,
                      ", ".join(str(folder) for folder in folders))
            raise InvalidArgument(TWO_ROOTS_PROBLEM)
        return folders[0]

    def _read_config(
        self, name: str, model_dir: Path, config_override: str
    ) -> tuple[ModelConfig, bool]:
        if config_override:
            try:
                return parse_config_json(config_override), True
            except InvalidArgument as error:
                raise InvalidArgument(f"model '{name}': {error.message}") from None
        path = model_dir / CONFIG_FILENAME
        custom = model_dir / CUSTOM_CONFIGS / f"{self._config_name}.pbtxt"
        if self._config_name and custom.is_file():
            path = custom
        if not path.is_file():
            return ModelConfig(), False
        label = f"{name}/{path.relative_to(model_dir)}"
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(f"{label}: the file is not UTF-8 text") from None
        except OSError as error:
            raise InvalidArgument(f"{label}: cannot be read ({error.strerror})") from None
        return parse_config_text(text, label), True

    def _check_config_may_be_missing(
        self, name: str, model_dir: Path, config: ModelConfig, completes_later: bool
    ) -> None:
        # Clients read this (the index): it names the model, never the server's folders.
        missing = f"model '{name}' has no {CONFIG_FILENAME}"
        if not config.backend and config.platform != ENSEMBLE_PLATFORM:
            candidates = model_file_candidates(self._backends)
            looked_for = ", ".join(filename for filename, _ in candidates)
            raise InvalidArgument(
                f"{missing}, and no model file to infer its backend from was found in a version "
                f"folder (looked for {looked_for})"
            )
        if not self._auto_complete:
            raise InvalidArgument(f"{missing}, and auto-complete is disabled")
        if not completes_later:
            raise InvalidArgument(
                f"{missing}, and backend '{config.backend}' cannot auto-complete a config"
            )


def _no_version_available(name: str) -> NoReturn:
    raise InvalidArgument(f"{NO_VERSION_PROBLEM} '{name}'")


def _model_folder_names(root: Path) -> Iterator[str]:
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and not model_name_problem(entry.name):
            # A folder whose name could not be a model (hidden, a control character in it)
            # is not one: it never reaches the index or a log line.
            yield entry.name
