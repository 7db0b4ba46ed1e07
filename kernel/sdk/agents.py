"""The contract of repository agents: plugins that see a model's files before it loads.

Triton's ``model_repository_agents``: an agent may change or refuse a model's files; agents
are registered by name (``inferd_register_repository_agents``; the built-in ``checksum`` is
``inferd.plugins.agents.checksum``).

An agent is a function of an ``AgentModel`` (the model's folder, versions, config and the
agent's parameters) that returns None, or another folder to load instead, or raises
``AgentRefused``. The kernel runs the agents a config lists, in its order
(``inferd.kernel.actors.repository.agents``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.kernel.sdk.registry import Registry, import_entry
from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

__all__ = ["Agent", "AgentModel", "AgentRefused", "AgentRegistry", "AgentSpec"]


class AgentRefused(InvalidArgument):
    """An agent refuses the load; the message says why (Triton's words where it has them)."""


@dataclass(frozen=True, slots=True)
class AgentModel:
    """What an agent sees of one load: the model's name, its folder (its files, relative to
    which Triton's agents name paths), the versions about to load, its config, and this
    agent's ``parameters`` from the config."""

    name: str
    folder: Path
    versions: tuple[int, ...]
    config: ModelConfig
    parameters: Mapping[str, str]


Agent = Callable[[AgentModel], "Path | str | None"]


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """``name`` is the config's ``agents [{ name: ... }]``; ``entry`` is
    ``"package.module:function"``, an ``Agent``, imported when a config first names it."""

    name: str
    entry: str

    def load_function(self) -> Agent:
        function: Agent = import_entry(self.entry)
        return function


class AgentRegistry(Registry[AgentSpec]):
    """Filled by ``inferd_register_repository_agents`` hooks: ``registry.add(AgentSpec(...))``."""

    kind = "repository agent"
