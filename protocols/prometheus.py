"""Prometheus exposition of inferd's metrics through ``prometheus-client``, with Triton's names.

inferd's actors report samples as ``(sample name, labels, value)`` triples (``Metrics``); this
module owns what each metric family is (its type and HELP text: Triton's, for Triton's names)
and turns the triples into ``prometheus_client`` metric families, rendered by its
``generate_latest`` in text format 0.0.4. A summary's samples are its family name (with a
``quantile`` label), ``<family>_count`` and ``<family>_sum``. Pure: no I/O, no state.

One adjustment: ``generate_latest`` names a counter family ``<name>_total`` in its HELP and
TYPE lines (an OpenMetrics rule), while Triton's counters (``nv_inference_request_success``)
have no such suffix. The two header lines of each counter are renamed back to the family's own
name, so the header matches the samples and a scraper keeps the counter type.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

Sample = tuple[str, dict[str, str], float]

# The failure reasons of nv_inference_request_failure, as Triton's (metric_model_reporter.cc).
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

# name -> (type, help), in the order they are printed. Triton's help texts (src/metrics.cc).
METRICS: dict[str, tuple[str, str]] = {
    "nv_inference_request_success": (
        "counter", "Number of successful inference requests, all batch sizes"),
    "nv_inference_request_failure": (
        "counter", "Number of failed inference requests, all batch sizes"),
    "nv_inference_count": (
        "counter", "Number of inferences performed (does not include cached requests)"),
    "nv_inference_exec_count": (
        "counter", "Number of model executions performed (does not include cached requests)"),
    "nv_inference_request_duration_us": (
        "counter",
        "Cumulative inference request duration in microseconds (includes cached requests)"),
    "nv_inference_queue_duration_us": (
        "counter",
        "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    "nv_inference_compute_input_duration_us": (
        "counter",
        "Cumulative compute input duration in microseconds (does not include cached requests)"),
    "nv_inference_compute_infer_duration_us": (
        "counter", "Cumulative compute inference duration in microseconds (does not include "
                   "cached requests)"),
    "nv_inference_compute_output_duration_us": (
        "counter", "Cumulative inference compute output duration in microseconds (does not "
                   "include cached requests)"),
    "nv_inference_pending_request_count": (
        "gauge", "Instantaneous number of pending requests awaiting execution per-model."),
    "nv_model_load_duration_secs": ("gauge", "Model load time in seconds"),
    # --metrics-config summary_latencies=true
    "nv_inference_request_summary_us": (
        "summary",
        "Summary of inference request duration in microseconds (includes cached requests)"),
    "nv_inference_queue_summary_us": (
        "summary",
        "Summary of inference queuing duration in microseconds (includes cached requests)"),
    "nv_inference_compute_input_summary_us": (
        "summary",
        "Cumulative compute input duration in microseconds (does not include cached requests)"),
    "nv_inference_compute_infer_summary_us": (
        "summary", "Cumulative compute inference duration in microseconds (does not include "
                   "cached requests)"),
    "nv_inference_compute_output_summary_us": (
        "summary", "Cumulative inference compute output duration in microseconds (does not "
                   "include cached requests)"),
    "nv_cache_hit_summary_per_model": (
        "summary", "Summary of cache hit counts/durations per model, in microseconds."),
    "nv_cache_miss_summary_per_model": (
        "summary", "Summary of cache miss counts/durations per model, in microseconds."),
    # The response cache's, printed only when a cache or a cached model has them.
    "nv_cache_num_hits_per_model": ("counter", "Number of cache hits per model"),
    "nv_cache_num_misses_per_model": ("counter", "Number of cache misses per model"),
    "nv_cache_hit_duration_per_model": (
        "counter", "Total cache hit duration per model, in microseconds"),
    "nv_cache_miss_duration_per_model": (
        "counter", "Total cache miss (insert+lookup) duration per model, in microseconds"),
    "nv_cache_num_entries": ("gauge", "Number of responses stored in response cache"),
    "nv_cache_util": ("gauge", "Cache utilization [0.0 - 1.0]"),
    "nv_cache_num_evictions": ("gauge", "Number of cache evictions in response cache"),
    "nv_cache_num_lookups": ("gauge", "Number of cache lookups in response cache"),
    "nv_cache_num_hits": ("gauge", "Number of cache hits in response cache"),
    "nv_cache_num_misses": ("gauge", "Number of cache misses in response cache"),
    "nv_cache_lookup_duration": (
        "gauge", "Total cache lookup duration (hit and miss), in microseconds"),
    "nv_cache_insertion_duration": ("gauge", "Total cache insertion duration, in microseconds"),
    # GPUs, through NVML (--allow-gpu-metrics), labelled gpu_uuid.
    "nv_gpu_utilization": ("gauge", "GPU utilization rate [0.0 - 1.0)"),
    "nv_gpu_memory_total_bytes": ("gauge", "GPU total memory, in bytes"),
    "nv_gpu_memory_used_bytes": ("gauge", "GPU used memory, in bytes"),
    "nv_gpu_power_usage": ("gauge", "GPU power usage in watts"),
    "nv_gpu_power_limit": ("gauge", "GPU power management limit in watts"),
    "nv_energy_consumption": (
        "counter", "GPU energy consumption in joules since the Triton Server started"),
    # The machine (--allow-cpu-metrics), from /proc as Triton's.
    "nv_cpu_utilization": ("gauge", "CPU utilization rate [0.0 - 1.0]"),
    "nv_cpu_memory_total_bytes": ("gauge", "CPU total memory (RAM), in bytes"),
    "nv_cpu_memory_used_bytes": ("gauge", "CPU used memory (RAM), in bytes"),
    # inferd's own: its executor processes (label executor) and its shared memory.
    "inferd_executor_cpu_seconds_total": (
        "counter", "CPU time (user and system) of the executor process, in seconds; it starts "
                   "again from 0 when the process is restarted"),
    "inferd_executor_resident_memory_bytes": (
        "gauge", "Resident memory of the executor process, in bytes"),
    "inferd_executor_restarts_total": (
        "counter", "Number of times the executor process died and was started again"),
    "inferd_repository_fetched_files_total": (
        "counter", "Number of files fetched from the remote model repository into the local "
                   "cache (files unchanged since the last fetch are not counted)"),
    "inferd_repository_fetched_bytes_total": (
        "counter", "Bytes of the files fetched from the remote model repository into the "
                   "local cache"),
    "inferd_system_shared_memory_bytes": (
        "gauge", "Bytes of client system shared-memory regions mapped by the server "
                 "(the KServe system shared-memory extension)"),
    "inferd_system_shared_memory_regions": (
        "gauge", "Number of client system shared-memory regions registered"),
    "inferd_link_shared_memory_bytes": (
        "gauge", "Bytes of the shared-memory segments the server's processes hold to pass "
                 "large tensors between them"),
    "inferd_link_shared_memory_segments": (
        "gauge", "Number of the shared-memory segments the server's processes hold to pass "
                 "large tensors between them"),
    # --model-load-on-demand and --model-memory-budget (labels model, outcome, device).
    "inferd_model_on_demand_loads_total": (
        "counter", "Number of loads a request started (--model-load-on-demand), by outcome: "
                   "success, failure, unavailable (no room in the budget) or not_found"),
    "inferd_model_load_waits_total": (
        "counter", "Number of requests that waited for their model's on-demand load"),
    "inferd_model_load_wait_seconds_total": (
        "counter", "Seconds requests spent waiting for their model's on-demand load"),
    "inferd_model_memory_budget_bytes": (
        "gauge", "The device's memory budget for loaded models (--model-memory-budget), in "
                 "bytes"),
    "inferd_model_memory_used_bytes": (
        "gauge", "Bytes of the device's memory budget the loaded models hold"),
    "inferd_model_memory_bytes": (
        "gauge", "Bytes the loaded model holds on the device: measured after its load, or "
                 "declared by INFERD_MEMORY_BYTES (label measured)"),
    # What each version's last unload gave back (labels model, version, memory: resident
    # or device), and what its load took.
    "inferd_model_unload_returned_bytes": (
        "gauge", "Bytes the version's last unload gave back to the system: the fall of its "
                 "executor process's resident memory (memory=resident) or GPU memory "
                 "(memory=device), all it held when the process ended with it"),
    "inferd_model_unload_footprint_bytes": (
        "gauge", "Bytes the load of the version last unloaded took: the growth of its "
                 "executor process's resident memory (memory=resident) or GPU memory "
                 "(memory=device)"),
    "inferd_model_evictions_total": (
        "counter", "Number of models unloaded to make room in the device's memory budget"),
    "inferd_model_budget_refusals_total": (
        "counter", "Number of loads refused because the device's memory budget had no room "
                   "and nothing could be unloaded"),
    # An ensemble's max_inflight_requests (labels model, version, step).
    "inferd_ensemble_step_inflight_requests": (
        "gauge", "Requests of the ensemble step sent to its composing model and not yet "
                 "answered (at most the ensemble's max_inflight_requests)"),
    "inferd_ensemble_step_waiting_requests": (
        "gauge", "Requests of the ensemble waiting for a free slot of the step "
                 "(max_inflight_requests reached)"),
}
# Printed (with no sample) even before any model is served, as Triton prints its families.
ALWAYS_PRINTED = (
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count", "nv_model_load_duration_secs",
)
_SUMMARY_SUFFIXES = ("_count", "_sum")


def family_of(sample_name: str) -> str:
    """The family a sample belongs to: a summary's ``_count``/``_sum`` go to the summary."""
    for suffix in _SUMMARY_SUFFIXES:
        base = sample_name.removesuffix(suffix)
        if base != sample_name and METRICS.get(base, ("",))[0] == "summary":
            return base
    return sample_name


def families(samples: Iterable[Sample]) -> list[Metric]:
    """The metric families of ``samples``: the known ones in ``METRICS`` order, then any other
    (untyped) by name."""
    by_family: dict[str, list[Sample]] = {}
    for sample in samples:
        by_family.setdefault(family_of(sample[0]), []).append(sample)
    names = [name for name in METRICS if name in by_family or name in ALWAYS_PRINTED]
    names += sorted(set(by_family) - set(METRICS))
    result = []
    for name in names:
        kind, help_text = METRICS.get(name, ("unknown", name))
        family = Metric(name, help_text, kind)
        for sample_name, labels, value in by_family.get(name, []):
            family.add_sample(sample_name, dict(labels), float(value))
        result.append(family)
    return result


class _Collector(Collector):
    """A one-scrape collector over fixed families (``generate_latest`` calls ``collect``)."""

    def __init__(self, metric_families: list[Metric]) -> None:
        self._families = metric_families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def render(samples: Iterable[Sample]) -> str:
    """The text a scraper reads for ``samples``."""
    metric_families = families(samples)
    text = generate_latest(_Collector(metric_families))
    counters = {f.name for f in metric_families if f.type == "counter"}
    lines = text.split(b"\n")
    for index, line in enumerate(lines):
        if line.startswith((b"# HELP ", b"# TYPE ")):
            parts = line.split(b" ", 3)
            head, name = parts[1], parts[2].decode()
            rest = parts[3] if len(parts) > 3 else b""
            own = name.removesuffix("_total")
            if own != name and own in counters:
                lines[index] = b" ".join((b"#", head, own.encode(), rest))
    return b"\n".join(lines).decode()
