"""What the kernel asks the repository actor and its replies: a model resolved into a config
ready to load, the models found, their fingerprints for POLL, and their catalog entries and
metadata. Kernel-internal (no frontend sends these). Data shapes only: no I/O, no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.protocols.messages.base import Message


@dataclass(frozen=True, slots=True)
class ResolveModel(Message):
    """Ask the repository actor for a model's parsed, validated config and versions.
    ``config_override`` (JSON) replaces config.pbtxt; ``path_override`` replaces the folder.
    ``cached_ok``: a remote model's cached copy may stand in while its storage cannot be read
    (control's reload after an executor restart)."""

    model: str
    config_override: str = ""
    path_override: str = ""
    cached_ok: bool = False
    # Versions to select besides the policy's (version labels), or with ``exact`` instead
    # of them (a load of single versions); each must have a folder.
    versions: tuple[int, ...] = ()
    exact: bool = False


@dataclass(frozen=True, slots=True)
class ResolvedModel(Message):
    """A model ready to load: ``config`` is a serialized ``ModelConfig``; ``versions`` the
    version numbers the version policy selects; ``path`` the model folder."""

    model: str
    backend: str
    config: bytes
    path: str
    versions: tuple[int, ...]
    # (version, hash of its version folder and of the model folder's files other than the
    # config and the version folders): a READY version whose hash is unchanged may be kept
    version_fingerprints: tuple[tuple[int, str], ...] = ()
    warnings: tuple[str, ...] = ()  # the config's fields inferd ignores (harmless ones)
    policy_versions: tuple[int, ...] = ()  # what the version policy alone selects
    # version_labels.toml (an inferd extension), when the folder has one
    labels_file: bool = False
    labels: dict[str, int] = field(default_factory=dict)
    canary_percent: float = 0.0


@dataclass(frozen=True, slots=True)
class ListModels(Message):
    pass


@dataclass(frozen=True, slots=True)
class FingerprintModels(Message):
    """Ask the repository for a fingerprint of every model folder (for POLL)."""


@dataclass(frozen=True, slots=True)
class Fingerprints(Message):
    """Model name -> a hash that changes whenever anything in its folder changes."""

    fingerprints: dict[str, str]
    # Models that cannot load as they are (found in two roots, ...), with why: a poll
    # neither loads nor unloads them.
    problems: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribeModels(Message):
    """Ask the repository actor for the catalog entries of its models (no state), filtered."""

    labels: tuple[tuple[str, str], ...] = ()
    task: str = ""


@dataclass(frozen=True, slots=True)
class ReadCatalogs(Message):
    """Ask the repository actor for every model's catalog metadata (the index's field)."""


@dataclass(frozen=True, slots=True)
class Catalogs(Message):
    """model -> its ``catalog.toml`` as JSON, for the models that have a valid one."""

    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelList(Message):
    """The models found in the repository roots; ``problems`` maps a name to why it cannot
    be loaded (for instance, found in two roots)."""

    names: tuple[str, ...]
    problems: dict[str, str] = field(default_factory=dict)
