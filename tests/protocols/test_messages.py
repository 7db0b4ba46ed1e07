"""Tests of the inferd.protocols.messages package: its ``__init__`` is the one list of kinds, so
every kind a submodule defines must be imported there (else ``MESSAGE_KINDS``, the wire codec's
registry, would not know it and it could not travel)."""

from __future__ import annotations

import importlib
import pkgutil

import inferd.protocols.messages as messages
from inferd.protocols.messages import MESSAGE_KINDS, Message


def test_every_kind_of_every_submodule_is_listed() -> None:
    defined = {
        name: value
        for module_info in pkgutil.iter_modules(messages.__path__)
        for name, value in vars(
            importlib.import_module(f"{messages.__name__}.{module_info.name}")
        ).items()
        if isinstance(value, type) and issubclass(value, Message) and value is not Message
    }
    assert defined == MESSAGE_KINDS
    assert set(messages.__all__) >= set(MESSAGE_KINDS)
