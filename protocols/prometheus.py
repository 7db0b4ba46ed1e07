"""Prometheus text exposition (format 0.0.4) of inferd's metrics, with Triton's metric names.

``render`` turns (name, labels, value) samples into the text a scraper reads: a ``# HELP`` and
``# TYPE`` line per metric, then one line per labelled sample, label values escaped. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# name -> (type, help), in the order they are printed.
METRICS: dict[str, tuple[str, str]] = {
    "nv_inference_request_success": ("counter", "Number of successful inference requests"),
    "nv_inference_request_failure": ("counter", "Number of failed inference requests"),
    "nv_inference_count": ("counter", "Number of inferences performed (batch elements)"),
    "nv_inference_exec_count": ("counter", "Number of model executions (batches run)"),
    "nv_inference_request_duration_us": (
        "counter", "Cumulative inference request duration in microseconds"),
    "nv_inference_queue_duration_us": (
        "counter", "Cumulative inference queuing duration in microseconds"),
    "nv_inference_compute_input_duration_us": (
        "counter", "Cumulative compute input duration in microseconds"),
    "nv_inference_compute_infer_duration_us": (
        "counter", "Cumulative compute inference duration in microseconds"),
    "nv_inference_compute_output_duration_us": (
        "counter", "Cumulative inference compute output duration in microseconds"),
    "nv_inference_pending_request_count": (
        "gauge", "Instantaneous number of pending requests awaiting execution"),
    "nv_model_load_duration_secs": ("gauge", "Model load time in seconds"),
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
}
ONLY_WHEN_SAMPLED = frozenset(name for name in METRICS if name.startswith("nv_cache_"))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(samples: Iterable[tuple[str, dict[str, str], float]]) -> str:
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    lines: list[str] = []
    for name in [*METRICS, *sorted(set(by_name) - set(METRICS))]:
        if name in ONLY_WHEN_SAMPLED and name not in by_name:
            continue
        kind, help_text = METRICS.get(name, ("untyped", name))
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in by_name.get(name, []):
            label_text = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
            braces = f"{{{label_text}}}" if labels else ""
            lines.append(f"{name}{braces} {_number(value)}")
    return "\n".join(lines) + "\n"
