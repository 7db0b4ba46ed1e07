"""The one way inferd draws a table for people: plain text, each column padded to its widest
cell (right-aligned where it holds numbers), never wrapped, so a pipe into grep or awk sees one
row per line. The server's start-up line of models, ``inferd check`` and the client commands
all print through it; ``rule`` draws a line of ``─`` under the header where the table stands
alone on a terminal.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["format_table"]


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]], *,
                 right: Collection[int] = (), rule: bool = False) -> str:
    """``rows`` under ``header`` as text; the columns whose indexes ``right`` holds are
    right-aligned."""
    table = [[str(cell) for cell in row] for row in (header, *rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
                         ).rstrip()

    lines = [line(row) for row in table]
    if rule:
        lines.insert(1, "  ".join("─" * width for width in widths))
    return "\n".join(lines)
