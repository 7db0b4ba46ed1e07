"""The per-kind tables of the kernel wire codec: for each kind in ``MESSAGE_KINDS``, its field
names in declaration order, a getter of their values, and a check of each decoded value
against the field's type hint (compiled once, at import), so a peer can never hand the kernel
a message of the wrong shape. A kind whose hints name a type that cannot travel fails the
import. ``build_message`` is the one way a decoded kind name and its values become a message.
Pure: knows nothing of frames, tensors' bytes or msgpack.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter
from typing import Any

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import MESSAGE_KINDS, Message, Tensor

_Check = Callable[[Any], bool]


def _field_getter(names: tuple[str, ...]) -> Callable[[Message], tuple[Any, ...]]:
    if not names:
        return lambda message: ()
    if len(names) == 1:
        get_one = attrgetter(names[0])
        return lambda message: (get_one(message),)
    return attrgetter(*names)


def _instance_types(hint: Any) -> tuple[type, ...] | None:
    """The classes ``isinstance`` needs to check ``hint``, when one call is enough."""
    if hint is float:
        return (int, float)
    if hint in (str, bytes, bool, int, Tensor, type(None)) or (
        isinstance(hint, type) and issubclass(hint, Message)
    ):
        return (hint,)
    if hint in (tuple, dict):
        return (hint,)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        classes: list[type] = []
        for alternative in typing.get_args(hint):
            alternative_classes = _instance_types(alternative)
            if alternative_classes is None:
                return None
            classes.extend(alternative_classes)
        return tuple(classes)
    return None


def _compile_check(hint: Any, where: str) -> _Check | None:
    """A predicate for values of type ``hint``; ``None`` when any value is acceptable."""
    if hint is Any:
        return None
    classes = _instance_types(hint)
    if classes is not None:
        return lambda value: isinstance(value, classes)
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        alternatives = [_compile_check(argument, where) for argument in arguments]
        if any(alternative is None for alternative in alternatives):
            return None
        checks = typing.cast("list[_Check]", alternatives)
        return lambda value: any(check(value) for check in checks)
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        item_classes = _instance_types(arguments[0])
        if item_classes is not None:
            # map() keeps the per-item loop in C: these tuples hold a batch's tensors.
            return lambda value: (
                type(value) is tuple and all(map(isinstance, value, repeat(item_classes)))
            )
        item_check = _compile_check(arguments[0], where)
        if item_check is None:
            return lambda value: type(value) is tuple
        return lambda value: type(value) is tuple and all(map(item_check, value))
    if origin is tuple and arguments:
        item_checks = [_compile_check(argument, where) or _accept_any for argument in arguments]
        size = len(item_checks)
        return lambda value: (
            type(value) is tuple
            and len(value) == size
            and all(check(item) for check, item in zip(item_checks, value, strict=True))
        )
    if origin is dict and len(arguments) == 2 and arguments[0] is str:
        value_check = _compile_check(arguments[1], where)
        return lambda value: (
            isinstance(value, dict)
            and all(
                isinstance(key, str) and (value_check is None or value_check(item))
                for key, item in value.items()
            )
        )
    raise TypeError(f"{where}: type {hint!r} cannot travel on the kernel wire")


def _accept_any(value: Any) -> bool:
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class KindCodec:
    """One kind's entry: its class, its field names, the getter of their values (in that
    order) and the checks of the fields whose type says anything (position, name, check)."""

    kind: type[Message]
    field_names: tuple[str, ...]
    values_of: Callable[[Message], tuple[Any, ...]]
    checks: tuple[tuple[int, str, _Check], ...]


def _build_codec(message_class: type[Message]) -> KindCodec:
    # Every message kind is a dataclass; the Message marker base cannot say so to mypy.
    kind_fields = dataclasses.fields(message_class)  # type: ignore[arg-type]
    names = tuple(field.name for field in kind_fields)
    hints = typing.get_type_hints(message_class)
    checks = []
    for position, name in enumerate(names):
        check = _compile_check(hints[name], f"{message_class.__name__}.{name}")
        if check is not None:
            checks.append((position, name, check))
    return KindCodec(message_class, names, _field_getter(names), tuple(checks))


CODECS_BY_NAME: dict[str, KindCodec] = {
    name: _build_codec(message_class) for name, message_class in MESSAGE_KINDS.items()
}
CODECS_BY_CLASS: dict[type, KindCodec] = {codec.kind: codec for codec in CODECS_BY_NAME.values()}


def codec_for_instance(message: Message) -> KindCodec:
    codec = CODECS_BY_CLASS.get(type(message))
    if codec is None:
        raise InvalidArgument(f"{type(message).__name__} is not a registered message kind")
    return codec


def build_message(kind: Any, values: Any) -> Message:
    """The message a decoded kind name and field values stand for; both come from a peer,
    so neither is trusted to have its type."""
    codec = CODECS_BY_NAME.get(kind) if isinstance(kind, str) else None
    if codec is None:
        raise InvalidArgument(f"unknown message kind {kind!r}")
    if type(values) is not tuple or len(values) != len(codec.field_names):
        raise InvalidArgument(
            f"{kind} needs {len(codec.field_names)} field values, got "
            f"{len(values) if type(values) is tuple else type(values).__name__}"
        )
    for position, name, check in codec.checks:
        if not check(values[position]):
            raise InvalidArgument(
                f"{kind}.{name} has a value of the wrong type ({type(values[position]).__name__})"
            )
    return codec.kind(*values)
