"""Torch's CPU thread pools, which are per process, set once for every model in it.

Owns Triton's ``INTRA_OP_THREAD_COUNT`` / ``INTER_OP_THREAD_COUNT`` parameters and how torch
sizes its pools; the once-per-process rules are ``inferd.kernel.sdk.process_threads``'s.
Torch accepts an intra-op size at any time, an inter-op size only before it first runs parallel
work, so a late inter-op value is reported, not applied.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from inferd.kernel.sdk.process_threads import Pools, ProcessThreads

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

INTRA_OP_PARAMETER = "INTRA_OP_THREAD_COUNT"
INTER_OP_PARAMETER = "INTER_OP_THREAD_COUNT"


class ThreadSettings:
    """What this process's torch pools were set to, and by which model."""

    def __init__(self) -> None:
        self._threads = ProcessThreads("torch", INTRA_OP_PARAMETER, INTER_OP_PARAMETER)

    def apply(self, torch: ModuleType, config: ModelConfig, options: dict[str, Any]) -> None:
        pools = Pools(set_intra=lambda threads: torch.set_num_threads(threads),
                      set_inter=lambda threads: torch.set_num_interop_threads(threads),
                      intra=lambda: torch.get_num_threads(),
                      inter=lambda: torch.get_num_interop_threads())
        self._threads.apply_to(pools, config, options)


PROCESS_THREADS = ThreadSettings()
"""The one set of settings of this executor process."""
