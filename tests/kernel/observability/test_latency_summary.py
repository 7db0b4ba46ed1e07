"""The sliding-window latency summaries and the failure reasons of ``VersionStatistics``."""

from __future__ import annotations

import math

from inferd.kernel.observability.latency_summary import (
    FAMILIES,
    MAX_AGE_SECS,
    MAX_OBSERVATIONS,
    LatencySummaries,
    SlidingSummary,
)
from inferd.kernel.observability.statistics import VersionStatistics

QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.99, 0.001))


def test_quantiles_count_and_sum() -> None:
    summary = SlidingSummary()
    for value in range(1, 101):
        summary.observe(float(value), now=10.0)
    assert summary.count == 100 and summary.total == 5050
    assert summary.quantiles(QUANTILES, now=10.0) == [(0.5, 50.0), (0.9, 90.0), (0.99, 99.0)]


def test_the_window_forgets_old_values_but_not_the_count() -> None:
    summary = SlidingSummary()
    summary.observe(1000.0, now=0.0)
    summary.observe(5.0, now=MAX_AGE_SECS)
    assert summary.quantiles(((0.5, 0.05),), now=MAX_AGE_SECS + 1) == [(0.5, 5.0)]
    assert summary.count == 2 and summary.total == 1005.0
    [(_, empty)] = summary.quantiles(((0.5, 0.05),), now=10 * MAX_AGE_SECS)
    assert math.isnan(empty)


def test_the_window_is_bounded() -> None:
    summary = SlidingSummary()
    for value in range(MAX_OBSERVATIONS + 100):
        summary.observe(float(value), now=1.0)
    assert len(summary.window) == MAX_OBSERVATIONS
    assert summary.count == MAX_OBSERVATIONS + 100


def test_statistics_feed_the_summaries_in_microseconds() -> None:
    statistics = VersionStatistics(summaries=LatencySummaries(QUANTILES))
    statistics.record_batch(3, 2, (1000, 2000, 3000))  # two requests in one batch
    statistics.record_request(True, 10_000, 4000)
    statistics.record_request(False, 7000, 0, "BACKEND")  # failures are not observed
    assert statistics.summaries is not None
    samples = {(name, tuple(sorted(labels.items()))): value
               for name, labels, value in statistics.summaries.samples({"model": "m"}, 0.0)}
    model = (("model", "m"),)
    assert samples[("nv_inference_request_summary_us_count", model)] == 1
    assert samples[("nv_inference_request_summary_us_sum", model)] == 10.0
    assert samples[("nv_inference_queue_summary_us", (*model, ("quantile", "0.5")))] == 4.0
    assert samples[("nv_inference_compute_infer_summary_us_count", model)] == 2
    assert samples[("nv_inference_compute_output_summary_us_sum", model)] == 6.0
    shown = {"request", "queue", "compute_input", "compute_infer", "compute_output"}
    assert {name for name, _ in samples} == {
        f"{FAMILIES[phase]}{suffix}" for phase in shown for suffix in ("", "_count", "_sum")}


def test_a_cached_model_has_cache_summaries_and_no_request_summary() -> None:
    statistics = VersionStatistics(summaries=LatencySummaries(QUANTILES))
    statistics.record_cache_hit(9000, 1000, 2000)
    statistics.record_request(True, 20_000, 0)
    statistics.record_cache_miss(3000, 4000)
    assert statistics.summaries is not None
    samples = {name: value for name, labels, value in
               statistics.summaries.samples({"model": "m"}, 0.0, cached=True)
               if "quantile" not in labels}
    assert "nv_inference_request_summary_us_count" not in samples
    assert samples["nv_cache_hit_summary_per_model_count"] == 1
    assert samples["nv_cache_hit_summary_per_model_sum"] == 2.0
    assert samples["nv_cache_miss_summary_per_model_sum"] == 7.0
    assert samples["nv_inference_queue_summary_us_count"] == 2


def test_failures_are_counted_by_reason() -> None:
    statistics = VersionStatistics()
    assert statistics.failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}
    statistics.record_request(False, 1, 0, "REJECTED")
    statistics.record_request(False, 1, 0, "BACKEND")
    statistics.record_request(False, 1, 0)
    statistics.record_request(False, 1, 0, "no such reason")
    assert statistics.failures == {"REJECTED": 1, "CANCELED": 0, "BACKEND": 1, "OTHER": 2}
    assert statistics.fail.count == 4
