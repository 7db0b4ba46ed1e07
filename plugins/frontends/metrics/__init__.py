"""Hook module of the Prometheus metrics frontend (``GET /metrics`` on ``--metrics-port``):
registers it and tritonserver's metrics flags (``--allow-metrics``, ``--metrics-port``,
``--metrics-address``, ``--allow-gpu-metrics``,
``--allow-cpu-metrics``, ``--metrics-interval-ms``, ``--metrics-config``; read by
``inferd.kernel.sdk.metrics_config``), and imports nothing else."""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import FrontendRegistry, FrontendSpec, ListenFlags, add_boolean, hookimpl

LISTEN = ListenFlags("metrics", 8002)


@hookimpl
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    registry.add(FrontendSpec(
        name="metrics",
        entry="inferd.plugins.frontends.metrics.frontend:MetricsFrontend",
        enabled_option="allow_metrics",
    ))


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics")
    add_boolean(group, "--allow-metrics", True, "serve Prometheus metrics on --metrics-port")
    LISTEN.add_to(group)
    add_boolean(group, "--allow-gpu-metrics", True,
                "GPU metrics through NVML (the gpu extra) where there is a GPU; ignored unless "
                "--allow-metrics is true")
    add_boolean(group, "--allow-cpu-metrics", True,
                "the machine's CPU and memory metrics; ignored unless --allow-metrics is true")
    group.add_argument("--metrics-interval-ms", type=float, default=2000.0, metavar="MS",
                       help="how often the CPU and GPU metrics are read (default 2000)")
    group.add_argument("--metrics-config", action="append", default=[],
                       metavar="SETTING=VALUE",
                       help="counter_latencies=true|false, summary_latencies=true|false, "
                            "summary_quantiles=Q:E,Q:E,... (repeatable)")
