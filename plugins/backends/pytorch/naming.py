"""Binding configured tensor names to a PyTorch program's arguments and results.

Owns the naming rules, kept apart from torch so they are tested without it. TorchScript
(``model.pt``) follows Triton's pytorch backend (``src/pt/model_instance_state.cc``,
``GetNamingConvention`` / ``AddInputToMap`` / ``ValidateOutputs``): inputs bind by forward()
argument name when every configured name is one, else by the ``<name>__<index>`` suffix when
every name has one, else by their order in the configuration (with Triton's warning); outputs
bind by ``<name>__<index>`` or else by configuration order. ``torch.export`` programs
(``model.pt2``) bind by the names their signature gives, by ``INPUT__<i>`` / ``OUTPUT__<i>``
ordinals, or by Triton's forward-based paths (``ARGS[0]``, ``KWARGS[k]``, ``RESULT[key]``,
from its PT2 support). Every failure is an ``InvalidArgument`` naming the model and tensor.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from inferd.protocols.errors import InvalidArgument

DELIMITER = "__"


class NamingConvention(enum.Enum):
    FORWARD_ARGUMENT = "forward argument"
    NAMED_INDEX = "named index"
    STRICT_CONFIG_ORDERING = "strict config ordering"


@dataclass(frozen=True, slots=True)
class Binding:
    """Where each configured tensor goes: ``positions[name]`` is the forward() argument (for
    inputs) or the element of the flattened result (for outputs). ``warning`` is what Triton
    would log about the choice, if anything."""

    convention: NamingConvention
    positions: dict[str, int]
    warning: str | None = None


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` name, or ``None``. Like Triton, the first ``__``
    splits the name; unlike Triton, an empty index is not read as 0."""
    start = name.find(DELIMITER)
    if start < 0:
        return None
    suffix = name[start + len(DELIMITER):]
    return int(suffix) if suffix.isascii() and suffix.isdigit() else None


def _convention_by_index(names: Sequence[str], kind: str, model: str) -> tuple[bool, str | None]:
    """Whether every name follows ``<name>__<index>``, and Triton's warning when a name has
    the delimiter but no integer after it (a name without ``__`` falls back silently)."""
    for name in names:
        if DELIMITER not in name:
            return False, None
        if named_index(name) is None:
            if kind == "input":
                warning = (
                    f"input '{name}' or previous input(s) are neither an input argument to the "
                    f"model '{model}' nor do they follow the <name>__<index> naming convention. "
                    f"Falling back to enforcing strict ordering from model configuration."
                )
            else:
                warning = (
                    f"output '{name}' or previous output(s) of the model '{model}' do not follow "
                    f"the <name>__<index> naming convention. Falling back to enforcing strict "
                    f"ordering from model configuration."
                )
            return False, warning
    return True, None


def bind_script_inputs(model: str, names: Sequence[str], arguments: Sequence[str]) -> Binding:
    """Bind configured input ``names`` to the TorchScript forward() ``arguments`` (without
    ``self``), as Triton does; then check that every argument gets exactly one input."""
    if len(names) != len(arguments):
        # Triton's message, verbatim (ValidateInputs).
        raise InvalidArgument(
            f"unable to load model '{model}', configuration expects {len(names)} inputs, "
            f"model provides {len(arguments)}"
        )
    warning = None
    if all(name in arguments for name in names):
        binding = Binding(
            NamingConvention.FORWARD_ARGUMENT, {name: arguments.index(name) for name in names}
        )
    else:
        by_index, warning = _convention_by_index(names, "input", model)
        if by_index:
            positions = {name: named_index(name) or 0 for name in names}
            binding = Binding(NamingConvention.NAMED_INDEX, positions)
        else:
            positions = {name: index for index, name in enumerate(names)}
            binding = Binding(NamingConvention.STRICT_CONFIG_ORDERING, positions, warning)
    _check_positions(model, "input", binding, len(arguments), "forward() argument", arguments)
    return binding


def bind_script_outputs(model: str, names: Sequence[str], count: int | None) -> Binding:
    """Bind configured output ``names`` to the elements of forward()'s result (``count`` of
    them when its type says so, ``None`` for a list whose length only a run tells)."""
    by_index, warning = _convention_by_index(names, "output", model)
    if by_index:
        binding = Binding(
            NamingConvention.NAMED_INDEX, {name: named_index(name) or 0 for name in names}
        )
    else:
        positions = {name: index for index, name in enumerate(names)}
        binding = Binding(NamingConvention.STRICT_CONFIG_ORDERING, positions, warning)
    _check_positions(model, "output", binding, count, "forward() result element", ())
    return binding


def _check_positions(
    model: str,
    kind: str,
    binding: Binding,
    count: int | None,
    what: str,
    labels: Sequence[str],
) -> None:
    taken: dict[int, str] = {}
    for name, position in binding.positions.items():
        if count is not None and position >= count:
            known = f" ({', '.join(labels)})" if labels else ""
            raise InvalidArgument(
                f"model '{model}': {kind} '{name}' refers to {what} {position} by the "
                f"{binding.convention.value} naming convention, but there are only {count}"
                f"{known}"
            )
        if position in taken:
            raise InvalidArgument(
                f"model '{model}': {kind}s '{taken[position]}' and '{name}' both refer to "
                f"{what} {position} ({binding.convention.value} naming convention)"
            )
        taken[position] = name


# ------------------------------------------------------------------ torch.export programs

KeyPath = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class ProgramTensor:
    """One leaf of an exported program's inputs or outputs. ``name`` is the name
    auto-complete gives it; ``aliases`` are every other name that addresses it."""

    name: str
    position: int
    aliases: tuple[str, ...]


def _path_text(prefix: str, path: KeyPath) -> str:
    return prefix + "".join(f"[{key}]" for key in path)


def program_inputs(placeholders: Sequence[str], paths: Sequence[KeyPath]) -> list[ProgramTensor]:
    """Input leaves from the signature's placeholder names and their paths in the program's
    ``(args, kwargs)`` input tree."""
    tensors = []
    for position, (placeholder, path) in enumerate(zip(placeholders, paths, strict=True)):
        aliases = [f"INPUT{DELIMITER}{position}"]
        if len(path) >= 2 and path[0] == 0:
            aliases.append(_path_text("ARGS", path[1:]))
        elif len(path) >= 2 and path[0] == 1:
            aliases.append(_path_text("KWARGS", path[1:]))
        tensors.append(ProgramTensor(placeholder, position, tuple(aliases)))
    return tensors


def program_outputs(paths: Sequence[KeyPath]) -> list[ProgramTensor]:
    """Output leaves from their paths in the result tree. A flat dict of tensors names its
    outputs by key; anything else by ``OUTPUT__<i>``."""
    flat_dict = bool(paths) and all(len(p) == 1 and isinstance(p[0], str) for p in paths)
    tensors = []
    for position, path in enumerate(paths):
        ordinal = f"OUTPUT{DELIMITER}{position}"
        result = _path_text("RESULT", path)
        if flat_dict:
            tensors.append(ProgramTensor(str(path[0]), position, (ordinal, result)))
        else:
            tensors.append(ProgramTensor(ordinal, position, (result,)))
    return tensors


def bind_program(
    model: str, kind: str, names: Sequence[str], tensors: Sequence[ProgramTensor]
) -> dict[str, int]:
    """Positions of configured ``names`` among an exported program's ``tensors``."""
    lookup: dict[str, int] = {}
    for tensor in tensors:
        for name in (tensor.name, *tensor.aliases):
            lookup.setdefault(name, tensor.position)
    positions: dict[str, int] = {}
    taken: dict[int, str] = {}
    for name in names:
        position = lookup.get(name)
        if position is None:
            known = ", ".join(
                f"{t.name} ({' / '.join(t.aliases)})" if t.aliases else t.name for t in tensors
            )
            raise InvalidArgument(
                f"model '{model}': configuration {kind} '{name}' is not an {kind} of the "
                f"exported program; its {kind}s are {known or 'none'}"
            )
        if position in taken:
            raise InvalidArgument(
                f"model '{model}': {kind}s '{taken[position]}' and '{name}' both name the "
                f"program's {kind} {tensors[position].name}"
            )
        taken[position] = name
        positions[name] = position
    return positions
