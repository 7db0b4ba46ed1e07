"""The memory budget's rules (``--model-memory-budget``, an inferd extension), pure: sizes
and budgets as the command line writes them (``cpu=16GiB,gpu0=70%``), the device a model's
config counts against, its ``INFERD_MEMORY_BYTES`` and ``INFERD_PIN`` parameters, sizes as
messages word them, and the choice of what to unload: the least recently used candidates,
only as many as make room. No I/O; ``inferd.plugins.on_demand.budget`` applies them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

MEMORY_PARAMETER = "INFERD_MEMORY_BYTES"
PIN_PARAMETER = "INFERD_PIN"

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DEVICE = re.compile(r"^(cpu|gpu\d+)$")


def parse_size(text: str) -> int:
    """``16GiB``, ``500MB``, ``1048576``: a number of bytes (``ValueError`` otherwise)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"expected a size such as 16GiB, 500MB or 1048576, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_budget(text: str, device_total: Callable[[str], int | None]
                 ) -> tuple[tuple[str, int], ...]:
    """``cpu=16GiB,gpu0=70%``: each device's budget in bytes; a percentage is of the
    device's total memory (``device_total``). ``ValueError`` says what is wrong."""
    budgets: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        device, equals, amount = part.partition("=")
        device = device.strip().lower()
        if not equals or not _DEVICE.match(device):
            raise ValueError(f"expected DEVICE=SIZE or DEVICE=PERCENT% with DEVICE cpu or gpuN, "
                             f"got {part!r}")
        if device in budgets:
            raise ValueError(f"device {device} is given twice")
        amount = amount.strip()
        if amount.endswith("%"):
            try:
                share = float(amount[:-1])
            except ValueError:
                share = -1.0
            if not 0 < share <= 100:
                raise ValueError(f"{part}: a percentage above 0 and at most 100")
            total = device_total(device)
            if total is None:
                raise ValueError(f"{part}: the total memory of {device} is not known here")
            budgets[device] = int(total * share / 100)
        else:
            budgets[device] = parse_size(amount)
        if budgets[device] <= 0:
            raise ValueError(f"{part}: a budget above 0 bytes")
    if not budgets:
        raise ValueError("expected at least one DEVICE=SIZE")
    return tuple(sorted(budgets.items()))


def format_bytes(count: float) -> str:
    """``16 GiB``, ``1.5 MiB``, ``512 B``: for messages and the index."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(count) >= size:
            return f"{count / size:.3g} {unit}"
    return f"{int(count)} B"


def _parameter(config: ModelConfig, key: str) -> str:
    return config.parameters[key].string_value.strip() if key in config.parameters else ""


def device_of(config: ModelConfig) -> str:
    """The device whose budget a model's instances count against: its first GPU for a
    config whose instance groups ask for KIND_GPU, else the CPU."""
    for group in config.instance_group:
        if group.kind == group.KIND_GPU:
            return f"gpu{group.gpus[0] if group.gpus else 0}"
    return "cpu"


def declared_bytes(config: ModelConfig) -> int | None:
    """``INFERD_MEMORY_BYTES`` of the config, or None (a bad value is the load's error)."""
    text = _parameter(config, MEMORY_PARAMETER)
    return parse_size(text) if text else None


def is_pinned(config: ModelConfig) -> bool:
    """Config parameter ``INFERD_PIN: "true"``: never unloaded to make room."""
    return _parameter(config, PIN_PARAMETER).lower() in ("true", "1", "yes")


@dataclass(slots=True)
class Candidate:
    """A model that may be unloaded to make room: what it holds, when it was last used,
    and the idle ensembles that go with it."""

    model: str
    held: int
    last_used_ms: int
    ensembles: tuple[str, ...] = ()


def choose_evictions(need: int, budget: int, used: int,
                     candidates: list[Candidate]) -> list[Candidate] | None:
    """The least recently used candidates whose unloading lets ``need`` more bytes fit
    (``[]`` when it fits already), or None when even all of them are not enough."""
    chosen: list[Candidate] = []
    for candidate in sorted(candidates, key=lambda c: (c.last_used_ms, c.model)):
        if used + need <= budget:
            break
        chosen.append(candidate)
        used -= candidate.held
    return chosen if used + need <= budget else None
