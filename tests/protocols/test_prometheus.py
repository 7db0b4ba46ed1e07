"""The Prometheus text rendering."""

from __future__ import annotations

from inferd.protocols.prometheus import render


def test_render_prints_help_type_and_escaped_labels() -> None:
    text = render([
        ("nv_inference_count", {"model": 'odd"name\\', "version": "1"}, 12),
        ("nv_model_load_duration_secs", {"model": "m", "version": "2"}, 0.25),
    ])
    lines = text.splitlines()
    assert "# HELP nv_inference_count Number of inferences performed (batch elements)" in lines
    assert "# TYPE nv_inference_count counter" in lines
    assert 'nv_inference_count{model="odd\\"name\\\\",version="1"} 12' in lines
    assert 'nv_model_load_duration_secs{model="m",version="2"} 0.25' in lines
    assert "# TYPE nv_model_load_duration_secs gauge" in lines
    assert text.endswith("\n")
