"""``--metrics-config`` and its neighbours, as tritonserver 2.51 reads them (unknown settings
and malformed quantiles refused, where tritonserver logs and skips them)."""

from __future__ import annotations

import pytest

from inferd.kernel.sdk.metrics_config import (
    DEFAULT_QUANTILES,
    MetricsConfig,
    metrics_config_from_options,
    parse_metrics_config,
)


def test_defaults_are_tritons() -> None:
    config = parse_metrics_config([])
    assert config == MetricsConfig()
    assert config.counter_latencies and not config.summary_latencies
    assert config.summary_quantiles == ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001),
                                        (0.99, 0.001), (0.999, 0.001)) == DEFAULT_QUANTILES
    assert config.interval_ms == 2000


def test_settings_are_read_and_a_later_flag_wins() -> None:
    config = parse_metrics_config(["summary_latencies=true", "counter_latencies=false",
                                   "summary_quantiles=0.5:0.05,0.9:0.01",
                                   "summary_latencies=TRUE"], interval_ms=500)
    assert config.summary_latencies and not config.counter_latencies
    assert config.summary_quantiles == ((0.5, 0.05), (0.9, 0.01))
    assert config.interval_ms == 500


@pytest.mark.parametrize(("flag", "message"), [
    ("summary_latencies", "--metrics-config option format is <setting>=<value>. Got "
                          "summary_latencies"),
    ("=true", "format is <setting>=<value>"),
    ("summary_latencies=", "format is <setting>=<value>"),
    ("model,summary_latencies=true", "format is <setting>=<value>"),
    ("histogram_latencies=true", "unknown setting 'histogram_latencies'"),
    ("summary_latencies=maybe", "expected true or false, got 'maybe'"),
    ("summary_quantiles=0.5", "Invalid option: [0.5]. No ':' delimiter found"),
    ("summary_quantiles=0.5:x", "Invalid option: [0.5:x]. Not a number"),
    ("summary_quantiles=1.5:0.01", "lie in [0, 1]"),
])
def test_a_bad_setting_is_refused_with_the_flag(flag: str, message: str) -> None:
    with pytest.raises(ValueError, match="--metrics-config") as raised:
        parse_metrics_config([flag])
    assert message in str(raised.value)


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="--metrics-interval-ms 0: expected a positive"):
        metrics_config_from_options({"metrics_interval_ms": 0.0})


def test_cpu_and_gpu_metrics_follow_allow_metrics() -> None:
    assert metrics_config_from_options({}) == MetricsConfig()  # the plugin is not loaded
    config = metrics_config_from_options({"allow_metrics": False, "allow_cpu_metrics": True})
    assert not config.cpu_metrics and not config.gpu_metrics
    config = metrics_config_from_options({"allow_gpu_metrics": False})
    assert config.cpu_metrics and not config.gpu_metrics
