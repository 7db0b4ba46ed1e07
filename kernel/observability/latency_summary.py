"""The latency summaries of one model version (``--metrics-config summary_latencies=true``).

Triton's five summaries (``nv_inference_{request,queue,compute_input,compute_infer,
compute_output}_summary_us``), and for a version whose responses are cached, as in Triton,
``nv_cache_{hit,miss}_summary_per_model`` instead of the request summary: a count and a sum
over the server's life, and quantiles over a sliding window of the last ``MAX_AGE_SECS``
(60 s, prometheus-cpp's default). The window keeps
at most ``MAX_OBSERVATIONS`` of the most recent values per summary, so memory stays bounded
under any load; the quantiles are computed exactly over what it holds when scraped (within any
error a ``summary_quantiles`` pair allows). An empty window reports NaN, as prometheus-cpp.
No I/O; the clock is passed in.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from inferd.kernel.sdk.metrics_config import Quantiles

MAX_AGE_SECS = 60.0
MAX_OBSERVATIONS = 4096
# family -> what it observes, in microseconds.
FAMILIES = {
    "request": "nv_inference_request_summary_us",
    "queue": "nv_inference_queue_summary_us",
    "compute_input": "nv_inference_compute_input_summary_us",
    "compute_infer": "nv_inference_compute_infer_summary_us",
    "compute_output": "nv_inference_compute_output_summary_us",
    "cache_hit": "nv_cache_hit_summary_per_model",
    "cache_miss": "nv_cache_miss_summary_per_model",
}
_CACHED_ONLY = ("cache_hit", "cache_miss")

Sample = tuple[str, dict[str, str], float]


@dataclass(slots=True)
class SlidingSummary:
    count: int = 0
    total: float = 0.0
    window: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=MAX_OBSERVATIONS))

    def observe(self, value: float, now: float) -> None:
        self.count += 1
        self.total += value
        self.window.append((now, value))

    def quantiles(self, quantiles: Quantiles, now: float) -> list[tuple[float, float]]:
        while self.window and now - self.window[0][0] > MAX_AGE_SECS:
            self.window.popleft()
        ordered = sorted(value for _, value in self.window)
        return [(q, _rank(ordered, q)) for q, _ in quantiles]


def _rank(ordered: list[float], quantile: float) -> float:
    if not ordered:
        return math.nan
    index = min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))
    return ordered[index]


def _shown(phase: str, cached: bool) -> bool:
    """Triton's choice: a cached model has the cache summaries and no request summary."""
    if phase in _CACHED_ONLY:
        return cached
    return not (cached and phase == "request")


@dataclass(slots=True)
class LatencySummaries:
    quantiles: Quantiles
    by_phase: dict[str, SlidingSummary] = field(
        default_factory=lambda: {phase: SlidingSummary() for phase in FAMILIES})

    def observe(self, phase: str, ns: int, now: float, times: int = 1) -> None:
        summary = self.by_phase[phase]
        for _ in range(times):
            summary.observe(ns / 1000, now)

    def samples(self, labels: dict[str, str], now: float, cached: bool = False
                ) -> list[Sample]:
        samples: list[Sample] = []
        for phase, family in FAMILIES.items():
            if not _shown(phase, cached):
                continue
            summary = self.by_phase[phase]
            for quantile, value in summary.quantiles(self.quantiles, now):
                samples.append((family, {**labels, "quantile": f"{quantile:g}"}, value))
            samples.append((f"{family}_count", labels, summary.count))
            samples.append((f"{family}_sum", labels, summary.total))
        return samples
