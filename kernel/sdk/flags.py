"""Command-line option helpers shared by ``inferd serve`` and plugins' ``inferd_add_options``.

tritonserver's booleans read ``--flag=false``, ``--flag false`` or a bare ``--flag`` (true);
``add_boolean`` gives a plugin's flags the same form; ``byte_count``, ``positive_seconds`` and
``positive_count`` read limits (``--http-max-input-size`` and its kin); ``ListenFlags`` are a
frontend's ``--<protocol>-port`` and ``--<protocol>-address``; ``split_setting`` is the one
reader of tritonserver's ``[group,]setting=value`` form (``--backend-config``,
``--cache-config``, ``--metrics-config``, ``--trace-config``). No state.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "ListenFlags", "add_boolean", "boolean_word", "byte_count", "parse_boolean", "positive_count",
    "positive_seconds",
]

ANY_ADDRESS = "0.0.0.0"
# ``--address``: what every frontend binds unless its ``--<protocol>-address`` says otherwise.
ALL_ADDRESSES_DEST = "address"

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def boolean_word(text: str) -> bool | None:
    """``text`` read as one of tritonserver's boolean words (any case), or None."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def parse_boolean(text: str) -> bool:
    value = boolean_word(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def add_boolean(parser: Any, name: str, default: bool, help: str) -> None:
    """Add ``name`` (e.g. ``--allow-http``) to a parser or argument group."""
    parser.add_argument(name, type=parse_boolean, nargs="?", const=True, default=default,
                        metavar="BOOL", help=f"{help} (default {str(default).lower()})")


def byte_count(largest: int | None = None, *, smallest: int = 1) -> Callable[[str], int]:
    """An argparse ``type`` for a number of bytes from ``smallest`` (1 unless given) up to
    ``largest`` if given."""

    def parse(text: str) -> int:
        value = int(text) if text.strip().isascii() and text.strip().isdigit() else -1
        if value < smallest or (largest is not None and value > largest):
            bound = (f" from {smallest} to {largest}" if largest is not None
                     else f" of at least {smallest}")
            raise argparse.ArgumentTypeError(f"expected a number of bytes{bound}, got {text!r}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def positive_count(text: str) -> int:
    """An argparse ``type`` for a whole number above 0."""
    value = int(text) if text.strip().isascii() and text.strip().isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class ListenFlags:
    """A frontend's socket flags, tritonserver's ``--<protocol>-port`` and
    ``--<protocol>-address``: its ``inferd_add_options`` adds them, the frontend reads them
    back from ``Settings.options``."""

    protocol: str
    port: int

    def add_to(self, parser: Any) -> None:
        """Add both flags to a parser or argument group."""
        name = self.protocol
        parser.add_argument(f"--{name}-port", type=int, default=self.port,
                            help=f"the port the {name} frontend listens on (default {self.port})")
        parser.add_argument(f"--{name}-address", default=None, metavar="ADDRESS",
                            help=f"the address the {name} frontend binds (default: --address, "
                                 f"itself {ANY_ADDRESS} unless given)")

    def read(self, options: Mapping[str, Any]) -> tuple[str, int]:
        """(address, port) as parsed: the protocol's own address, else ``--address``, else
        every interface; the default port for a flag the options lack."""
        address = (options.get(f"{self.protocol}_address") or options.get(ALL_ADDRESSES_DEST)
                   or ANY_ADDRESS)
        return str(address), int(options.get(f"{self.protocol}_port", self.port))


class SettingText(NamedTuple):
    """One ``[group,]setting=value`` in its parts, none stripped: ``group`` is None without a
    comma before the first ``=``, ``value`` None without an ``=``."""

    group: str | None
    setting: str
    value: str | None


def split_setting(text: str) -> SettingText:
    """tritonserver's ``[group,]setting=value`` (``--backend-config``, ``--cache-config``,
    ``--metrics-config``, ``--trace-config``) in its parts. The group is what precedes the
    first comma before the first ``=``, so a value may hold commas and ``=`` of its own
    (``summary_quantiles=0.5:0.05,0.9:0.01``, ``opentelemetry,resource=key=value``). Refuses
    nothing: each flag says in its own words what it cannot take."""
    head, equals, value = text.partition("=")
    group, comma, setting = head.partition(",")
    return SettingText(group if comma else None, setting if comma else head,
                       value if equals else None)


def backend_setting(text: str) -> tuple[str, str, str]:
    """``--backend-config``'s ``[backend,]setting=value`` as (backend or "" for every
    backend, setting, value); ``ValueError`` saying the expected form otherwise."""
    backend, setting, value = split_setting(text)
    if value is None or not setting.strip():
        raise ValueError(f"--backend-config={text}: expected [backend,]setting=value")
    return (backend or "").strip(), setting.strip(), value.strip()
