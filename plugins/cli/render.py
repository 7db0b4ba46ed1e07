"""How the ``inferd`` client commands print: one ``show`` for every result (a table for
people, drawn by the kernel's one table renderer, or a JSON document for scripts with
``--format json``), error lines on standard error, and abbreviated tensor values.

Tables go to standard output, never wrapped, so that a pipe into grep or awk sees one row per
line; on a terminal a rule stands under the header. Progress lines go through rich's console.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console

from inferd.kernel.sdk import format_table


@dataclass(frozen=True, slots=True)
class Column:
    key: str  # the record's key (and the JSON field)
    header: str
    numeric: bool = False  # right-aligned


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() else 10_000
    return Console(file=stream, width=wide, highlight=False, soft_wrap=False)


def show(fmt: str, columns: Sequence[Column], records: Sequence[Mapping[str, Any]],
         document: Any = None) -> None:
    """Print ``records`` as a table, or with ``fmt == "json"`` print ``document`` (the
    records themselves when none is given) as JSON."""
    if fmt == "json":
        print(json.dumps(records if document is None else document, indent=2,
                         default=_jsonable))
        return
    right = [i for i, column in enumerate(columns) if column.numeric]
    print(format_table([column.header for column in columns],
                       [[_cell(record.get(column.key)) for column in columns]
                        for record in records],
                       right=right, rule=sys.stdout.isatty()))


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()  # BYTES elements come back here one by one, as bytes
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def values(data: np.ndarray, limit: int = 8) -> str:
    """A tensor's values on one line, the middle elided past ``limit`` elements."""
    flat = data.reshape(-1)
    items = [_value(item) for item in flat[:limit].tolist()]
    if flat.size > limit:
        items = [*items[: limit // 2], "…", *[_value(i) for i in flat[-(limit // 2):].tolist()]]
    return "[" + ", ".join(items) + "]"


def _value(item: Any) -> str:
    if isinstance(item, bytes):
        try:
            return repr(item.decode())
        except UnicodeDecodeError:
            return repr(item)
    if isinstance(item, float):
        return f"{item:.6g}"
    return str(item)


def error(message: str) -> None:
    """The one error line a command prints (standard error, plain text)."""
    print(f"error: {message}", file=sys.stderr)
