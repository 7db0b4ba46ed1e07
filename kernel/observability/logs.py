"""Logging set-up shared by the main process and executor processes: one line per record,
naming the process that wrote it (``main``, ``executor/cpu0``, ``executor/model/<model>``, ...)
so interleaved output stays readable.

``LogSettings`` holds tritonserver's logging flags (``--log-verbose``, ``--log-info``,
``--log-warning``, ``--log-error``: each severity on or off, ``--log-format`` ``default``,
``ISO8601`` or inferd's ``json`` (the layouts: ``inferd.kernel.observability.log_format``),
``--log-file``); the main process hands them to its executor processes (``as_arguments`` at start,
``ApplyLogSettings`` when the logging extension changes them at run time), so every line of
the server follows them. ``configure_logging`` applies them to this
process and may be called again at any time: a log file is this process's standard error
pointed at the file (appended), and an empty one points it back at the console it started with,
which is also what executor processes are started with (``console_descriptor``), so each one
opens the file itself and follows a change of file too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from inferd.kernel.observability.log_format import formatter
from inferd.kernel.sdk.flags import add_boolean
from inferd.protocols.logging_api import LOG_FORMATS
from inferd.protocols.messages import ApplyLogSettings, LogSettingsReply

# The logging extension's setting names -> LogSettings' fields.
_FIELDS = {"log_file": "file", "log_info": "info", "log_warning": "warning",
           "log_error": "error", "log_verbose_level": "verbose", "log_format": "format"}


@dataclass(frozen=True, slots=True)
class LogSettings:
    verbose: int = 0
    info: bool = True
    warning: bool = True
    error: bool = True
    format: str = "default"
    file: str = ""  # "" is the console (the standard error the server started with)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        parser.add_argument("--log-verbose", type=int, default=0,
                            help="1 and up: verbose (debug) lines too; -1: warnings and errors "
                            "only")
        add_boolean(parser, "--log-info", True, "log informational messages")
        add_boolean(parser, "--log-warning", True, "log warnings")
        add_boolean(parser, "--log-error", True, "log errors")
        parser.add_argument("--log-format", choices=LOG_FORMATS, default="default",
                            help="ISO8601: a full UTC timestamp on every line; json: one JSON "
                            "object per line (time, level, process, pid, logger, message, and "
                            "model, version, request_id where known)")
        parser.add_argument("--log-file", default="", metavar="PATH",
                            help="write every process's log to PATH (appended) instead of "
                            "standard error")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> LogSettings:
        return cls(args.log_verbose, args.log_info, args.log_warning, args.log_error,
                   args.log_format, args.log_file)

    def as_arguments(self) -> list[str]:
        """The flags that give an executor process these settings."""
        return ["--log-verbose", str(self.verbose), "--log-info", _flag(self.info),
                "--log-warning", _flag(self.warning), "--log-error", _flag(self.error),
                "--log-format", self.format, "--log-file", self.file]

    def as_message(self) -> ApplyLogSettings:
        return ApplyLogSettings(self.verbose, self.info, self.warning, self.error, self.format,
                                self.file)

    @classmethod
    def from_message(cls, message: ApplyLogSettings) -> LogSettings:
        return cls(message.verbose, message.info, message.warning, message.error,
                   message.format, message.file)


def updated(settings: LogSettings, updates: Mapping[str, bool | int | str]) -> LogSettings:
    """``settings`` with the logging extension's checked ``updates`` applied."""
    # Each value was checked against its setting's type by inferd.protocols.logging_api.
    changes: dict[str, Any] = {_FIELDS[name]: value for name, value in updates.items()}
    return replace(settings, **changes)


def as_reply(settings: LogSettings) -> LogSettingsReply:
    """The logging extension's view: verbosity -1 (inferd's "warnings only") reads as 0."""
    return LogSettingsReply(settings.file, settings.info, settings.warning, settings.error,
                            max(0, settings.verbose), settings.format)


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


# The console this process started with, kept open once standard error points at a log file.
_console: int | None = None
_file = ""


def console_descriptor() -> int:
    """The descriptor of the console this process started with (for child processes)."""
    return sys.stderr.fileno() if _console is None else _console


def open_log_file(path: str) -> int:
    """A descriptor appending to ``path`` (created if need be); ``OSError`` if it cannot."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def _point_standard_error_at(path: str) -> None:
    """Standard error (every handler's stream) to ``path``, or back to the console for ""."""
    global _console, _file
    if path == _file:
        return
    sys.stderr.flush()
    if _console is None:
        _console = os.dup(sys.stderr.fileno())
        os.set_inheritable(_console, False)
    if path:
        descriptor = open_log_file(path)
        os.dup2(descriptor, sys.stderr.fileno())
        os.close(descriptor)
    else:
        os.dup2(_console, sys.stderr.fileno())
    _file = path


def configure_logging(settings: LogSettings, *, process: str = "main") -> None:
    """Apply ``settings`` to this process; ``OSError`` (nothing changed) if its log file cannot
    be opened."""
    _point_standard_error_at(settings.file)
    verbose = settings.verbose
    # Triton's verbose lines (LOG_VERBOSE(1), a python model's Logger.log_verbose) are debug.
    level = logging.DEBUG if verbose >= 1 else logging.INFO if verbose >= 0 else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(settings.format, process))
    handler.addFilter(_Severities(settings))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Python warnings become log lines too, so even they keep the format (json: one object).
    logging.captureWarnings(True)
    # Third-party chatter is only useful when debugging inferd itself.
    for noisy in ("asyncio", "grpc", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
