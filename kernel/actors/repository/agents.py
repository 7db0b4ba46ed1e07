"""Repository agents (Triton's ``model_repository_agents``): plugins that see a model's files
before it loads and may change or refuse them, found by name in the registry plugins fill
(``inferd_register_repository_agents``; the built-in ``checksum`` is
``inferd.plugins.agents.checksum``).

``run_agents`` runs the agents a config lists, in its order, on the model's local folder (a
remote model's after its files were fetched): each may return another folder to load instead,
or raise ``AgentRefused``; the load then fails with ``model '<name>': repository agent
'<agent>': <its message>``, which the repository index shows as the model's reason. An agent
no plugin registered fails the load the same way, naming the agents there are. Owns the
order; the contract is the SDK's (``inferd.kernel.sdk.agents``), the agents own their I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.kernel.sdk.agents import AgentModel, AgentRefused, AgentRegistry
from inferd.kernel.sdk.registry import available
from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def run_agents(name: str, folder: Path, versions: Sequence[int], config: ModelConfig,
               agents: AgentRegistry) -> Path:
    """The folder to load ``name`` from once every agent its config lists, one of the
    server's ``agents``, has run; ``InvalidArgument`` when one refuses, fails or is not
    installed."""
    listed = config.model_repository_agents.agents
    if not listed:
        return folder
    for agent in listed:
        spec = agents.get(agent.name)
        if spec is None:
            raise InvalidArgument(f"model '{name}': repository agent '{agent.name}' is not "
                                  f"installed ({available(agents)})")
        model = AgentModel(name, folder, tuple(versions), config, dict(agent.parameters))
        try:
            changed = spec.load_function()(model)
        except AgentRefused as refusal:
            raise InvalidArgument(f"model '{name}': repository agent '{agent.name}': "
                                  f"{refusal.message}") from None
        except Exception as error:  # noqa: BLE001 - a broken agent fails its load only
            raise InvalidArgument(f"model '{name}': repository agent '{agent.name}' failed: "
                                  f"{type(error).__name__}: {error}") from None
        if changed is not None:
            folder = Path(changed)
    return folder
