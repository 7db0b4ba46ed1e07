"""``inferd serve --metrics-config`` and its neighbours, read into one ``MetricsConfig``.

tritonserver 2.51's settings, each one ``--metrics-config <setting>=<value>`` flag:
``counter_latencies`` (default true: the ``*_duration_us`` counters), ``summary_latencies``
(default false: the ``*_summary_us`` summaries) and ``summary_quantiles``
(``<quantile>:<error>,...``, default ``0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,0.999:0.001``).
``--metrics-interval-ms`` (default 2000) is how often the machine's and the GPUs' metrics are
read; ``--allow-cpu-metrics`` and ``--allow-gpu-metrics`` (default true, ignored unless
``--allow-metrics``) turn those off. Where tritonserver logs and skips a malformed quantile or
an unknown setting, inferd refuses to start with the flag in the message: nothing is silently
ignored. Owns parsing only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.kernel.sdk.flags import boolean_word, split_setting

__all__ = ["MetricsConfig", "metrics_config_from_options"]

Quantiles = tuple[tuple[float, float], ...]
DEFAULT_QUANTILES: Quantiles = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001),
                                (0.999, 0.001))
DEFAULT_INTERVAL_MS = 2000
SETTINGS = ("counter_latencies", "summary_latencies", "summary_quantiles")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: Quantiles = DEFAULT_QUANTILES
    interval_ms: float = DEFAULT_INTERVAL_MS
    cpu_metrics: bool = True
    gpu_metrics: bool = True


def _format_error(text: str) -> ValueError:
    # tritonserver's words (src/command_line_parser.cc)
    return ValueError(f"--metrics-config option format is <setting>=<value>. Got {text}")


def _boolean(text: str, value: str) -> bool:
    word: bool | None = boolean_word(value)
    if word is None:
        raise ValueError(f"--metrics-config {text}: expected true or false, got '{value}'")
    return word


def parse_quantiles(text: str, value: str) -> Quantiles:
    """``0.5:0.05,0.9:0.01`` as ((0.5, 0.05), (0.9, 0.01))."""
    pairs = []
    for item in value.split(","):
        quantile, colon, error = item.strip().partition(":")
        if not colon:
            raise ValueError(f"--metrics-config {text}: Invalid option: [{item}]. No ':' "
                             "delimiter found. Expected format is <quantile>:<error>")
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            raise ValueError(f"--metrics-config {text}: Invalid option: [{item}]. Not a "
                             "number") from None
        if not (0.0 <= pair[0] <= 1.0 and 0.0 <= pair[1] <= 1.0):
            raise ValueError(f"--metrics-config {text}: Invalid option: [{item}]. The "
                             "quantile and the error lie in [0, 1]")
        pairs.append(pair)
    return tuple(pairs)


def parse_metrics_config(items: Sequence[str], *, interval_ms: float = DEFAULT_INTERVAL_MS,
                         cpu_metrics: bool = True, gpu_metrics: bool = True) -> MetricsConfig:
    """Every ``--metrics-config`` flag, in order (a later one wins), as one configuration."""
    if interval_ms <= 0:
        raise ValueError(f"--metrics-interval-ms {interval_ms:g}: expected a positive number "
                         "of milliseconds")
    values: dict[str, Any] = {}
    for text in items:
        group, setting, value = split_setting(text)
        setting, value = setting.strip(), (value or "").strip()
        if group is not None or not setting or not value:  # no group is allowed (Triton's)
            raise _format_error(text)
        if setting not in SETTINGS:
            raise ValueError(f"--metrics-config {text}: unknown setting '{setting}' (inferd "
                             f"reads {', '.join(SETTINGS)})")
        values[setting] = (parse_quantiles(text, value) if setting == "summary_quantiles"
                           else _boolean(text, value))
    return MetricsConfig(**values, interval_ms=interval_ms, cpu_metrics=cpu_metrics,
                         gpu_metrics=gpu_metrics)


def metrics_config_from_options(options: Mapping[str, Any]) -> MetricsConfig:
    """The configuration the metrics frontend's flags put in ``Settings.options`` (the
    defaults when that plugin is not loaded); ``ValueError`` for a bad one."""
    allowed = bool(options.get("allow_metrics", True))
    interval_ms = options.get("metrics_interval_ms")
    return parse_metrics_config(
        options.get("metrics_config") or (),
        interval_ms=DEFAULT_INTERVAL_MS if interval_ms is None else float(interval_ms),
        cpu_metrics=allowed and bool(options.get("allow_cpu_metrics", True)),
        gpu_metrics=allowed and bool(options.get("allow_gpu_metrics", True)),
    )
