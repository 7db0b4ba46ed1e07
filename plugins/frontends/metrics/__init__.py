"""Hook module of the Prometheus metrics frontend (``GET /metrics`` on ``--metrics-port``):
registers it and its ``--allow-metrics`` option, and imports nothing else."""

from __future__ import annotations

import argparse

from inferd.kernel.frontend import FrontendRegistry, FrontendSpec
from inferd.kernel.hookspecs import hookimpl
from inferd.kernel.options import add_boolean


@hookimpl
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    registry.add(FrontendSpec(
        name="metrics",
        entry="inferd.plugins.frontends.metrics.frontend:MetricsFrontend",
        enabled_option="allow_metrics",
    ))


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    add_boolean(parser, "--allow-metrics", True, "serve Prometheus metrics on --metrics-port")
