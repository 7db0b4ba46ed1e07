"""The control-state record (``--model-control-state``, an inferd extension), a built-in
plugin: EXPLICIT-mode replicas that share one record of what is loaded. Its flags are
declared here; the policy the control actor calls is in ``record``, opened (``opening``) only
when the flag names a record. The stores of a record are plugins of their own
(``inferd_register_control_state_stores``): ``path`` and ``s3`` beside this module.
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import hookimpl
from inferd.kernel.sdk.control import (
    ControlPolicyRegistry,
    ControlPolicySpec,
    OpenedPolicy,
    PolicySetup,
)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("control-state record")
    group.add_argument("--model-control-state", default="", metavar="PATH-or-URL",
                       help="inferd: with explicit mode, the control-state record replicas "
                            "share (a path or s3://[host:port/]bucket/key): API loads and "
                            "unloads are written to it, and it is applied at start-up and "
                            "followed while running")
    group.add_argument("--model-control-state-poll-secs", type=float, default=5.0,
                       metavar="SECONDS",
                       help="how often a replica re-reads --model-control-state (0: only at "
                            "start-up)")


def _open(setup: PolicySetup) -> OpenedPolicy | None:
    from inferd.plugins.control_state.opening import open_record

    return open_record(setup)


@hookimpl
def inferd_register_control_policies(registry: ControlPolicyRegistry) -> None:
    registry.add(ControlPolicySpec("control_state", _open))
