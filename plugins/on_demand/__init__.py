"""Models on demand and the memory budget (inferd extensions), a built-in plugin: a request
for a model that is not loaded loads it first (``--model-load-on-demand``), and the models
loaded fit a memory budget per device, the least recently used idle ones unloaded to make
room (``--model-memory-budget``). Its flags are declared here; the policy the control actor
calls is in ``policy``, imported only when a flag turns it on.
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import add_boolean, hookimpl, positive_seconds
from inferd.kernel.sdk.control import (
    ControlPolicyRegistry,
    ControlPolicySpec,
    OpenedPolicy,
    PolicySetup,
)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    models = parser.add_argument_group("models on demand and the memory budget")
    add_boolean(models, "--model-load-on-demand", False,
                "inferd: with explicit or poll mode, an inference, metadata or ready request "
                "for a model of the repository that is not loaded loads it first")
    models.add_argument("--model-load-on-demand-timeout-secs", type=positive_seconds,
                        default=60.0, metavar="SECONDS",
                        help="how long a request waits for its model's on-demand load")
    models.add_argument("--model-memory-budget", default="", metavar="DEVICE=SIZE[,...]",
                        help="inferd: the memory the loaded models may hold per device "
                             "(cpu=16GiB,gpu0=70GiB or cpu=50%%); a load that would exceed it "
                             "first unloads the least recently used idle models")


def _open(setup: PolicySetup) -> OpenedPolicy | None:
    from inferd.plugins.on_demand.policy import open_policy

    return open_policy(setup)


@hookimpl
def inferd_register_control_policies(registry: ControlPolicyRegistry) -> None:
    registry.add(ControlPolicySpec("on_demand", _open))
