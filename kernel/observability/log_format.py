"""The three layouts of a log line (``--log-format``), each naming the process that wrote it.

``default``: ``HH:MM:SS L [process] logger: message`` (local time, L the severity's letter, D
for verbose); ``ISO8601``: the same after a UTC timestamp with milliseconds; ``json``
(an inferd extension): one JSON object per line with ``time`` (ISO 8601, UTC, microseconds),
``level``, ``process``, ``pid``, ``logger`` and ``message``, the ``model``, ``version`` and
``request_id`` of the work in hand where known (``inferd.kernel.sdk.log_context``,
overridden by a record's own ``extra=``), every other ``extra=`` field, and an exception as
``traceback``. A message's newlines are escaped in json, so a line is always one record. No I/O.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from inferd.kernel.sdk import log_context

# What every LogRecord has: the rest of a record's attributes came with ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}
# Triton calls its debug lines verbose (LOG_VERBOSE, Logger.log_verbose).
_LEVEL_NAMES = {logging.DEBUG: "VERBOSE"}


def formatter(log_format: str, process: str) -> logging.Formatter:
    """The formatter of ``log_format`` (checked already) for lines of ``process``."""
    if log_format == "json":
        return JsonFormatter(process)
    if log_format == "ISO8601":
        iso = logging.Formatter(
            f"%(asctime)s.%(msecs)03dZ %(levelname).1s [{process}] %(name)s: %(message)s",
            datefmt="%Y-%m-%dT%H:%M:%S")
        iso.converter = time.gmtime
        return iso
    return logging.Formatter(f"%(asctime)s %(levelname).1s [{process}] %(name)s: %(message)s",
                             datefmt="%H:%M:%S")


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        document: dict[str, Any] = {
            "time": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": _LEVEL_NAMES.get(record.levelno, record.levelname),
            "process": self.process,
            "pid": record.process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = log_context.current()
        if context is not None:
            document.update(context.fields())
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                document[name] = value
        if record.exc_info:
            document["traceback"] = self.formatException(record.exc_info)
        elif record.exc_text:
            document["traceback"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, ensure_ascii=False, default=str)
