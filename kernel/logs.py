"""Logging set-up shared by the main process and executor processes: one line per record,
prefixed with the process's role so interleaved output stays readable.

``LogSettings`` holds tritonserver's logging flags (``--log-verbose``, ``--log-info``,
``--log-warning``, ``--log-error``: each severity on or off, ``--log-format`` ``default`` or
``ISO8601``); the main process hands them to its executor processes (``as_arguments``), so
every line of the server follows them. ``--log-file`` is the main process's: it points the
standard error every process shares at the file.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass

from inferd.kernel.options import add_boolean

LOG_FORMATS = ("default", "ISO8601")


@dataclass(frozen=True, slots=True)
class LogSettings:
    verbose: int = 0
    info: bool = True
    warning: bool = True
    error: bool = True
    format: str = "default"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        parser.add_argument("--log-verbose", type=int, default=0)
        add_boolean(parser, "--log-info", True, "log informational messages")
        add_boolean(parser, "--log-warning", True, "log warnings")
        add_boolean(parser, "--log-error", True, "log errors")
        parser.add_argument("--log-format", choices=LOG_FORMATS, default="default",
                            help="ISO8601: a full UTC timestamp on every line")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> LogSettings:
        return cls(args.log_verbose, args.log_info, args.log_warning, args.log_error,
                   args.log_format)

    def as_arguments(self) -> list[str]:
        """The flags that give an executor process these settings."""
        return ["--log-verbose", str(self.verbose), "--log-info", _flag(self.info),
                "--log-warning", _flag(self.warning), "--log-error", _flag(self.error),
                "--log-format", self.format]


def _flag(value: bool) -> str:
    return "true" if value else "false"


class _Severities(logging.Filter):
    """Drops the records of the severities switched off (``--log-info=false``, ...)."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self._settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        settings = self._settings
        if record.levelno >= logging.ERROR:
            return settings.error
        if record.levelno >= logging.WARNING:
            return settings.warning
        return settings.info


def configure_logging(settings: LogSettings, *, process: str = "main") -> None:
    verbose = settings.verbose
    level = logging.DEBUG if verbose >= 2 else logging.INFO if verbose >= 0 else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    if settings.format == "ISO8601":
        formatter = logging.Formatter(
            f"%(asctime)s.%(msecs)03dZ %(levelname).1s [{process}] %(name)s: %(message)s",
            datefmt="%Y-%m-%dT%H:%M:%S")
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter(
            f"%(asctime)s %(levelname).1s [{process}] %(name)s: %(message)s", datefmt="%H:%M:%S")
    handler.setFormatter(formatter)
    handler.addFilter(_Severities(settings))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party chatter is only useful when debugging inferd itself.
    for noisy in ("asyncio", "grpc", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
