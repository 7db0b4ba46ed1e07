"""``inferd label``: read or move a model's version labels (an inferd extension).

``inferd label m stable=4`` moves ``stable`` to version 4: the server loads and warms it up,
moves the requests that name no version, then unloads the version the label left (unless
another label or the version policy keeps it); the command returns once that is done and
prints the labels as they are then, one row per label with the share of those requests
it gets. ``canary=none`` removes a label; ``--canary-percent`` sets the canary's share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from inferd.kernel.sdk.commands import USAGE
from inferd.plugins.cli import render
from inferd.plugins.cli.commands import ConnectTimeout, Fmt, Format, Url, guarded
from inferd.plugins.cli.connection import DEFAULT_URL, open_connection
from inferd.plugins.cli.render import Column

LABEL_COLUMNS = (Column("label", "LABEL"), Column("version", "VERSION", numeric=True),
                 Column("share", "SHARE OF UNVERSIONED REQUESTS"))
REMOVED = "none"
CANARY_EXAMPLE = f"canary={REMOVED}"


def label(
    model: Annotated[str, typer.Argument(help="the model whose labels to read or move")],
    moves: Annotated[list[str] | None, typer.Argument(
        metavar="[LABEL=VERSION]...",
        help=f"labels to move (stable=4), or to remove ({CANARY_EXAMPLE})")] = None,
    canary_percent: Annotated[float | None, typer.Option(
        "--canary-percent", min=0, max=100,
        help="the share of requests naming no version that go to 'canary'")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.1, help="seconds to wait for the switch (the target's load)")
    ] = 600.0,
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """Show a model's version labels, or move them (the new target is loaded and warmed up
    before requests move, and the version left unloads after)."""
    moved = _parsed(moves or [])
    with guarded(url):
        connection = open_connection(url, timeout, connect_timeout)
        document = connection.labels(model, moved, canary_percent)
        connection.close()
    render.show(fmt.value, LABEL_COLUMNS, label_records(document), document)



def _parsed(moves: list[str]) -> dict[str, int | None]:
    moved: dict[str, int | None] = {}
    for move in moves:
        name, equals, version = move.partition("=")
        if not equals or not name or not (version == REMOVED or version.isdigit()):
            render.error(f"'{move}' is not LABEL=VERSION (a version number, or "
                         f"'{REMOVED}' to remove the label)")
            raise typer.Exit(USAGE)
        moved[name] = None if version == REMOVED else int(version)
    return moved


def label_records(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per label: its version and its share of the requests naming no version."""
    labels: dict[str, int] = dict(document.get("labels", {}))
    percent = float(document.get("canary_percent", 0.0))
    canary = percent if "canary" in labels else 0.0

    def share(name: str) -> str:
        if name == "stable":
            return f"{100 - canary:g} %"
        if name == "canary":
            return f"{canary:g} %"
        return "-"

    return [{"label": name, "version": version, "share": share(name)}
            for name, version in sorted(labels.items())]
