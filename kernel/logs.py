"""Logging set-up shared by the main process and executor processes: one line per record,
prefixed with the process's role so interleaved output stays readable."""

from __future__ import annotations

import logging
import sys


def configure_logging(verbose: int, *, process: str = "main") -> None:
    level = logging.DEBUG if verbose >= 2 else logging.INFO if verbose >= 0 else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname).1s [{process}] %(name)s: %(message)s",
                          datefmt="%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party chatter is only useful when debugging inferd itself.
    for noisy in ("asyncio", "grpc", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
