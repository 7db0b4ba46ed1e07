"""Torch's CPU thread pools, which are per process, set once for every model in it.

Owns Triton's ``INTRA_OP_THREAD_COUNT`` / ``INTER_OP_THREAD_COUNT`` parameters. As in
Triton, the first model of the process that sets one decides it and later different values
are ignored with a warning; the intra-op pool otherwise takes the server's
``--intra-op-threads``, the inter-op pool torch's own default. Torch accepts an inter-op
size only before it first runs parallel work, so a late value is reported, not applied.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

from inferd.protocols.errors import InvalidArgument

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger(__name__)

INTRA_OP_PARAMETER = "INTRA_OP_THREAD_COUNT"
INTER_OP_PARAMETER = "INTER_OP_THREAD_COUNT"


def thread_parameter(config: ModelConfig, key: str) -> int | None:
    """A thread-count parameter's value (``None`` when unset); must be a positive integer."""
    parameter = config.parameters.get(key)
    if parameter is None:
        return None
    text = parameter.string_value.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InvalidArgument(
            f"model '{config.name}': parameter {key} must be a positive integer, got "
            f"{parameter.string_value!r}"
        )
    return int(text)


class ThreadSettings:
    """What this process's torch pools were set to, and by which model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._intra: tuple[int, str] | None = None  # (threads, the model that chose it)
        self._inter: tuple[int, str] | None = None
        self._intra_defaulted = False

    def apply(self, torch: ModuleType, config: ModelConfig, options: dict[str, Any]) -> None:
        intra = thread_parameter(config, INTRA_OP_PARAMETER)
        inter = thread_parameter(config, INTER_OP_PARAMETER)
        with self._lock:
            self._apply_intra(torch, config.name, intra, options)
            if inter is not None:
                self._apply_inter(torch, config.name, inter)

    def _apply_intra(
        self, torch: ModuleType, model: str, threads: int | None, options: dict[str, Any]
    ) -> None:
        if threads is None:
            if self._intra is None and not self._intra_defaulted:
                default = max(1, int(options.get("intra_op_threads", 1)))
                torch.set_num_threads(default)
                self._intra_defaulted = True
            return
        if self._intra is None:
            torch.set_num_threads(threads)
            self._intra = (threads, model)
        elif self._intra[0] != threads:
            _ignored(model, INTRA_OP_PARAMETER, threads, self._intra)

    def _apply_inter(self, torch: ModuleType, model: str, threads: int) -> None:
        if self._inter is not None:
            if self._inter[0] != threads:
                _ignored(model, INTER_OP_PARAMETER, threads, self._inter)
            return
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError as error:
            current = torch.get_num_interop_threads()
            log.warning(
                "model '%s': %s %d not applied: torch sizes its inter-op pool once per "
                "process, before any parallel work, and it already has %d threads (%s)",
                model, INTER_OP_PARAMETER, threads, current, error,
            )
            self._inter = (current, "torch")
            return
        self._inter = (threads, model)


def _ignored(model: str, key: str, threads: int, chosen: tuple[int, str]) -> None:
    log.warning(
        "model '%s': %s %d ignored: torch's thread pools are per process and model '%s' "
        "already set %d",
        model, key, threads, chosen[1], chosen[0],
    )


PROCESS_THREADS = ThreadSettings()
"""The one set of settings of this executor process."""
