"""The Prometheus exposition through prometheus-client: Triton's names, types and HELP lines,
counters without a ``_total`` suffix, summaries, and text a Prometheus parser reads back."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from inferd.protocols.prometheus import ALWAYS_PRINTED, METRICS, render

LABELS = {"model": "m", "version": "1"}


def test_render_prints_help_type_and_escaped_labels() -> None:
    text = render([
        ("nv_inference_count", {"model": 'odd"name\\', "version": "1"}, 12),
        ("nv_model_load_duration_secs", {"model": "m", "version": "2"}, 0.25),
    ])
    lines = text.splitlines()
    assert ("# HELP nv_inference_count Number of inferences performed (does not include "
            "cached requests)") in lines
    assert "# TYPE nv_inference_count counter" in lines
    assert 'nv_inference_count{model="odd\\"name\\\\",version="1"} 12.0' in lines
    assert 'nv_model_load_duration_secs{model="m",version="2"} 0.25' in lines
    assert "# TYPE nv_model_load_duration_secs gauge" in lines
    assert text.endswith("\n")
    assert "_total" not in text  # Triton's counters have no _total suffix


def test_every_family_parses_back_with_its_type_and_samples() -> None:
    text = render([
        ("nv_inference_request_success", LABELS, 3),
        ("nv_inference_request_failure", {**LABELS, "reason": "BACKEND"}, 1),
        ("nv_inference_queue_summary_us", {**LABELS, "quantile": "0.5"}, 7.5),
        ("nv_inference_queue_summary_us_count", LABELS, 3),
        ("nv_inference_queue_summary_us_sum", LABELS, 30),
        ("inferd_executor_cpu_seconds_total", {"executor": "executor/cpu0"}, 1.5),
        ("nv_cpu_utilization", {}, 0.25),
    ])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(ALWAYS_PRINTED) <= set(families)
    for family in families.values():
        assert family.type == METRICS[family.name if family.name in METRICS
                                      else family.name + "_total"][0]
        assert family.documentation
    # The parser names a counter's samples <name>_total (OpenMetrics); the text has none.
    success = families["nv_inference_request_success"]
    assert [(s.name, s.labels, s.value) for s in success.samples] == [
        ("nv_inference_request_success_total", LABELS, 3.0)]
    failure = families["nv_inference_request_failure"].samples[0]
    assert failure.labels == {**LABELS, "reason": "BACKEND"}
    summary = families["nv_inference_queue_summary_us"]
    assert summary.type == "summary"
    assert {s.name for s in summary.samples} == {
        "nv_inference_queue_summary_us", "nv_inference_queue_summary_us_count",
        "nv_inference_queue_summary_us_sum"}
    assert families["inferd_executor_cpu_seconds"].samples[0].value == 1.5
    assert "# TYPE inferd_executor_cpu_seconds_total counter" in text.splitlines()


def test_families_not_sampled_are_left_out_except_tritons_per_model_ones() -> None:
    text = render([])
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names == set(ALWAYS_PRINTED)
    assert "nv_gpu" not in text and "summary" not in text


def test_a_nan_quantile_renders() -> None:
    text = render([("nv_inference_request_summary_us", {**LABELS, "quantile": "0.9"}, math.nan)])
    assert 'nv_inference_request_summary_us{model="m",quantile="0.9",version="1"} NaN' in text
