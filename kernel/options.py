"""Command-line option helpers shared by ``inferd serve`` and plugins' ``inferd_add_options``.

tritonserver's booleans read ``--flag=false``, ``--flag false`` or a bare ``--flag`` (true);
``add_boolean`` gives a plugin's flags the same form. No state, no parsing of its own.
"""

from __future__ import annotations

import argparse
from typing import Any

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_boolean(parser: Any, name: str, default: bool, help: str) -> None:
    """Add ``name`` (e.g. ``--allow-http``) to a parser or argument group."""
    parser.add_argument(name, type=parse_boolean, nargs="?", const=True, default=default,
                        metavar="BOOL", help=f"{help} (default {str(default).lower()})")
