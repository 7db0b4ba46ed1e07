"""The three log layouts: Triton's two keep their shape and name the process; json is one
object per line with the fields, the log context's names, extra fields and a traceback."""

from __future__ import annotations

import json
import logging
import os
import re
import sys

from inferd.kernel.observability.log_format import formatter
from inferd.kernel.sdk import log_context


def record(message: str = "hello %s", args: tuple[object, ...] = ("world",),
           level: int = logging.INFO,
           extra: dict[str, object] | None = None, error: bool = False) -> logging.LogRecord:
    exc_info = None
    if error:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    made = logging.getLogger("inferd.test").makeRecord(
        "inferd.test", level, __file__, 1, message, args, exc_info, extra=extra)
    return made


def test_default_and_iso8601_name_the_process() -> None:
    line = formatter("default", "executor/cpu0").format(record())
    assert re.fullmatch(r"\d\d:\d\d:\d\d I \[executor/cpu0\] inferd.test: hello world", line)
    line = formatter("ISO8601", "main").format(record(level=logging.DEBUG))
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z D \[main\] inferd.test: hello world", line)


def test_json_has_the_fields() -> None:
    line = formatter("json", "executor/cpu0").format(record(level=logging.DEBUG))
    document = json.loads(line)
    assert document.pop("time").endswith("Z")
    assert document == {"level": "VERBOSE", "process": "executor/cpu0", "pid": os.getpid(),
                        "logger": "inferd.test", "message": "hello world"}


def test_json_time_is_utc_with_microseconds() -> None:
    made = record()
    made.created = 0.25
    assert json.loads(formatter("json", "main").format(made))["time"] == (
        "1970-01-01T00:00:00.250000Z")


def test_json_names_the_context_and_extra_fields() -> None:
    json_format = formatter("json", "main")
    with log_context.request_context("HTTP", "POST infer"):
        log_context.note("simple", "2", "r-7")
        document = json.loads(json_format.format(record(extra={"status": "400"})))
    assert (document["model"], document["version"], document["request_id"]) == (
        "simple", "2", "r-7")
    assert document["status"] == "400"
    with log_context.bound("speaker", 1):
        document = json.loads(json_format.format(record(extra={"model": "other"})))
    assert (document["model"], document["version"]) == ("other", "1")  # extra= wins
    assert "model" not in json.loads(json_format.format(record()))  # the context is gone


def test_json_is_one_line_with_the_traceback() -> None:
    line = formatter("json", "main").format(record("two\nlines", (), level=logging.ERROR,
                                                   error=True))
    assert "\n" not in line
    document = json.loads(line)
    assert document["message"] == "two\nlines"
    assert document["level"] == "ERROR"
    assert document["traceback"].startswith("Traceback (most recent call last):")
    assert document["traceback"].endswith("ValueError: boom")
