"""The contract of client commands: their registry, and the exit codes every command shares.

Plugins fill the registry of the ``inferd`` command's client commands
(``inferd_register_commands``; the built-ins are ``inferd.plugins.cli``); every command shares
the exit codes and the examples epilog.

A ``CommandSpec`` names a typer command function by import path, so registering imports
neither typer nor the command: ``inferd.kernel.cli.app`` imports them when a client command
runs. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferd.kernel.sdk.registry import Registry, import_entry

__all__ = [
    "CANNOT_CONNECT", "EXIT_CODES", "OK", "REFUSED", "USAGE", "CommandRegistry", "CommandSpec",
    "examples",
]

OK, REFUSED, USAGE, CANNOT_CONNECT = 0, 1, 2, 3
"""A client command's exit status (``raise typer.Exit(code)``): it worked; the server said no
(a load failed or timed out); a usage error; no server answers at ``--url``. Part of this
contract only: scripts match on them, so every command uses these, as ``EXIT_CODES`` says."""

EXIT_CODES = """Exit codes: 0 ok, 1 the server said no (a load failed or timed out), 2 usage
error, 3 no server answers at --url."""


def examples(*lines: str) -> str:
    """A command's epilog: its example command lines, then the exit codes."""
    return ("Examples:\n\n" + "\n\n".join(f"  $ {line}" for line in lines) + "\n\n"
            + EXIT_CODES)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """``inferd <name>``: ``entry`` is ``"package.module:function"``, a typer command
    function; ``epilog`` is shown under its ``--help`` (``examples(...)``)."""

    name: str
    entry: str
    epilog: str = ""

    def load_function(self) -> Callable[..., Any]:
        function: Callable[..., Any] = import_entry(self.entry)
        return function


class CommandRegistry(Registry[CommandSpec]):
    """Filled by ``inferd_register_commands`` hooks, in ``--help``'s order."""

    kind = "command"
