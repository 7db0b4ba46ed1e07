"""A framework's CPU thread pools, which are per process: set once for every model in it.

Frameworks such as torch and TensorFlow size an intra-op pool (threads inside one operator)
and an inter-op pool (operators run at once) per process, and each model config may ask for
a size through ``parameters``. As in Triton, the first model of the process that sets a pool
decides it and later different values are ignored with a warning; the intra-op pool
otherwise takes the server's ``--intra-op-threads``, the inter-op pool the framework's own
default. A framework that accepts a size only before it first runs (its setter raises
``RuntimeError``) has a late value reported, not applied. The framework is reached through
``Pools``, so this module imports none and unit tests hand it fakes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

__all__ = ["Pools", "ProcessThreads", "thread_parameter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Pools:
    """How to size one framework's pools in this process, and read their sizes back. A
    setter raises ``RuntimeError`` when the framework no longer accepts a size."""

    set_intra: Callable[[int], None]
    set_inter: Callable[[int], None]
    intra: Callable[[], int]
    inter: Callable[[], int]


@dataclass(frozen=True, slots=True)
class _Choice:
    threads: int
    chosen_by: str  # "model 'm'" that set it, or the framework when it was too late


def thread_parameter(config: ModelConfig, key: str, minimum: int = 1) -> int | None:
    """A thread-count parameter's value (``None`` when unset), an integer of at least
    ``minimum``."""
    parameter = config.parameters.get(key)
    if parameter is None:
        return None
    text = parameter.string_value.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        kind = "positive" if minimum >= 1 else "non-negative"
        raise InvalidArgument(
            f"model '{config.name}': parameter {key} must be a {kind} integer, got "
            f"{parameter.string_value!r}"
        )
    return int(text)


class ProcessThreads:
    """What this process's pools of one framework were set to, and by which model.
    ``minimum`` is the smallest count a parameter may give (0 where the framework reads it
    as "choose for me")."""

    def __init__(self, framework: str, intra_parameter: str, inter_parameter: str, *,
                 minimum: int = 1) -> None:
        self._framework = framework
        self._keys = {"intra": intra_parameter, "inter": inter_parameter}
        self._minimum = minimum
        self._lock = threading.Lock()
        self._choices: dict[str, _Choice] = {}
        self._intra_defaulted = False

    def apply_to(self, pools: Pools, config: ModelConfig, options: dict[str, Any]) -> None:
        """Size the pools for ``config`` (read its parameters; raises ``InvalidArgument``
        for a bad value) the first time a model says, or by the server's default."""
        wanted = {pool: thread_parameter(config, key, self._minimum)
                  for pool, key in self._keys.items()}
        with self._lock:
            if wanted["intra"] is None and "intra" not in self._choices:
                self._apply_default_intra(pools, options)
            for pool, threads in wanted.items():
                if threads is not None:
                    self._apply(pools, pool, config.name, threads)

    def _apply_default_intra(self, pools: Pools, options: dict[str, Any]) -> None:
        if self._intra_defaulted:
            return
        self._intra_defaulted = True
        try:
            pools.set_intra(max(1, int(options.get("intra_op_threads", 1))))
        except RuntimeError as error:
            log.debug("%s's intra-op pool keeps its size: %s", self._framework, error)

    def _apply(self, pools: Pools, pool: str, model: str, threads: int) -> None:
        key, chosen = self._keys[pool], self._choices.get(pool)
        if chosen is not None:
            if chosen.threads != threads:
                log.warning(
                    "model '%s': %s %d ignored: %s's thread pools are per process and "
                    "%s already set %d",
                    model, key, threads, self._framework, chosen.chosen_by, chosen.threads,
                )
            return
        setter, current = ((pools.set_intra, pools.intra) if pool == "intra"
                           else (pools.set_inter, pools.inter))
        try:
            setter(threads)
        except RuntimeError as error:
            size = current()
            log.warning(
                "model '%s': %s %d not applied: %s sizes its %s-op pool once per process, "
                "before any parallel work, and it already has %d threads (%s)",
                model, key, threads, self._framework, pool, size, error,
            )
            self._choices[pool] = _Choice(size, self._framework)
            return
        self._choices[pool] = _Choice(threads, f"model '{model}'")
