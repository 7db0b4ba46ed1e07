"""Tracing's flags, a built-in plugin (entry point ``tracing``): tritonserver's
``--trace-config`` and its older ``--trace-file``, ``--trace-level``, ``--trace-rate``,
``--trace-count`` and ``--trace-log-frequency``. The trace modes, ``triton`` (JSON trace
files) and ``opentelemetry`` (OTLP/HTTP spans), are each a plugin module registered by its
own entry point; the kernel reads these flags' values by their ``dest`` from
``Settings.options`` into the ``TraceConfig`` the server starts with
(``inferd.kernel.cli.serve``). Disabled, the server has none of these flags and starts with
tracing off.
"""

from __future__ import annotations

import argparse

from inferd.kernel.sdk import hookimpl

# tritonserver's deprecated flags, and the --trace-config setting each stands for.
DEPRECATED_FLAGS = (("file", str, "triton,file"), ("level", str, "level"),
                    ("rate", int, "rate"), ("count", int, "count"),
                    ("log-frequency", int, "triton,log-frequency"))


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    tracing = parser.add_argument_group("tracing")
    tracing.add_argument("--trace-config", action="append", default=[],
                         metavar="[MODE,]SETTING=VALUE",
                         help="tracing, as tritonserver's: level=TIMESTAMPS|TENSORS, rate=N, "
                              "count=N, mode=triton|opentelemetry, triton,file=PATH, "
                              "triton,log-frequency=N, opentelemetry,url=URL, "
                              "opentelemetry,resource=KEY=VALUE (repeatable)")
    for flag, kind, setting in DEPRECATED_FLAGS:
        tracing.add_argument(f"--trace-{flag}", type=kind, default=None,
                             action="append" if flag == "level" else "store",
                             help=f"deprecated by tritonserver: --trace-config {setting}=...")
