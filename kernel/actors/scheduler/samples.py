"""A served version's Prometheus samples, as Triton names them (``nv_inference_*``)."""

from __future__ import annotations

from inferd.kernel.actors.scheduler.response_cache import cache_samples
from inferd.kernel.actors.scheduler.version import Version
from inferd.kernel.observability.statistics import COMPUTE_PHASES
from inferd.kernel.sdk.metrics_config import MetricsConfig

Sample = tuple[str, dict[str, str], float]


def version_samples(version: Version, metrics: MetricsConfig, now: float) -> list[Sample]:
    labels = {"model": version.model, "version": str(version.version)}
    stats = version.statistics
    samples: list[Sample] = [
        ("nv_inference_request_success", labels, stats.success.count),
        *(("nv_inference_request_failure", {**labels, "reason": reason}, count)
          for reason, count in stats.failures.items()),
        ("nv_inference_count", labels, stats.inference_count),
        ("nv_inference_exec_count", labels, stats.execution_count),
        ("nv_inference_pending_request_count", labels, version.pending()),
    ]
    if metrics.counter_latencies:
        samples += [
            ("nv_inference_request_duration_us", labels,
             (stats.success.ns + stats.fail.ns) // 1000),
            ("nv_inference_queue_duration_us", labels, stats.queue.ns // 1000),
            *((f"nv_inference_{phase}_duration_us", labels,
               getattr(stats, phase).ns // 1000) for phase in COMPUTE_PHASES),
        ]
    if stats.summaries is not None:
        samples += stats.summaries.samples(labels, now, version.cache is not None)
    if version.cache is not None and metrics.counter_latencies:
        samples += cache_samples(labels, stats)  # Triton's: latency counters
    if version.ensemble is not None:  # max_inflight_requests: its slots, step by step
        for index, limiter in enumerate(version.ensemble.limiters):
            step = {**labels, "step": str(index)}
            samples += [("inferd_ensemble_step_inflight_requests", step, limiter.in_flight),
                        ("inferd_ensemble_step_waiting_requests", step, limiter.waiting)]
    return samples
