"""``inferd serve --trace-config``: tritonserver's trace flag, read into one ``TraceConfig``.

Each flag is ``<setting>=<value>`` for a global setting (``level``, repeatable, ``rate``,
``count``, ``mode``) or ``<mode>,<setting>=<value>`` for a mode's own (``triton,file=PATH``,
``triton,log-frequency=N``; ``opentelemetry,url=URL``, ``opentelemetry,resource=KEY=VALUE``,
repeatable, and the batch span processor's ``bsp_max_queue_size``, ``bsp_schedule_delay``
and ``bsp_max_export_batch_size``, which default to the ``OTEL_BSP_*`` environment variables
or 2048, 5000 and 512, as in Triton). A malformed or unknown setting is a start-up error
(``ValueError`` with the flag in its message). Owns parsing only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferd.kernel.options import split_setting

MODES = ("triton", "opentelemetry")
DEFAULT_RATE = 1000
DEFAULT_OTLP_URL = "http://localhost:4318/v1/traces"
BSP_DEFAULTS = (("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
                ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", 5000),
                ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
_GLOBAL = ("level", "rate", "count", "mode")
_MODE_SETTINGS = {"triton": ("file", "log-frequency"),
                  "opentelemetry": ("url", "resource", *(name for name, _, _ in BSP_DEFAULTS))}


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """The start-up trace settings; ``level`` empty is OFF. ``options`` are the chosen mode's
    settings other than ``file`` and ``log-frequency``, in the order the settings endpoint
    shows them."""

    level: tuple[str, ...] = ()
    rate: int = DEFAULT_RATE
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = "triton"
    options: tuple[tuple[str, str], ...] = ()

    def option(self, name: str, default: str = "") -> str:
        return next((value for key, value in self.options if key == name), default)

    def resource(self) -> dict[str, str]:
        """``opentelemetry,resource=key=value`` as attributes over Triton's service name."""
        attributes = {"service.name": "triton-inference-server"}
        for key, value in self.options:
            if key == "resource":
                name, _, text = value.partition("=")
                attributes[name] = text
        return attributes


def _split(text: str) -> tuple[str, str, str]:
    """``[mode,]setting=value`` as (mode or "", setting, value)."""
    group, setting, value = split_setting(text)
    if group == "":
        raise ValueError(f"--trace-config {text}: no trace mode specified; the format is "
                         "<trace mode>,<setting>=<value> or <setting>=<value>")
    if value is None or not setting or not value:
        raise ValueError(f"--trace-config {text}: the format is "
                         "'<trace mode>,<setting>=<value>' or '<setting>=<value>'")
    mode = (group or "").lower()
    if mode and mode not in MODES:
        raise ValueError(f"--trace-config {text}: invalid value for trace mode option: {mode}. "
                         'Available options are "triton" and "opentelemetry"')
    return mode, setting, value


def _level(text: str, flag: str) -> str:
    word = text.lower()
    if word in ("false", "off"):
        return "OFF"
    if word in ("true", "on", "min", "max", "timestamps"):
        return "TIMESTAMPS"
    if word == "tensors":
        return "TENSORS"
    raise ValueError(f"--trace-config {flag}: invalid value for trace level option: {text}")


def _integer(text: str, flag: str, low: int, high: int = 2**32 - 1) -> int:
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits.isascii() or not digits.isdigit() or not low <= int(stripped) <= high:
        raise ValueError(f"--trace-config {flag}: expected a whole number from {low} to {high}, "
                         f"got {text!r}")
    return int(stripped)


def parse_trace_config(items: Sequence[str], environ: Mapping[str, str] | None = None
                       ) -> TraceConfig:
    """Every ``--trace-config`` flag, in order, as one configuration."""
    environ = os.environ if environ is None else environ
    levels: set[str] = set()
    off = False
    fields: dict[str, int | str] = {}
    mode_settings: dict[str, list[tuple[str, str, str]]] = {mode: [] for mode in MODES}
    for text in items:
        mode, setting, value = _split(text)
        flag = f"{mode + ',' if mode else ''}{setting}={value}"
        if not mode:
            if setting not in _GLOBAL:
                raise ValueError(f"--trace-config {text}: unknown global trace setting "
                                 f"'{setting}' (the global ones are {', '.join(_GLOBAL)})")
            if setting == "level":
                level = _level(value, flag)
                off = off or level == "OFF"
                levels.add(level)
            elif setting == "mode":
                if value.lower() not in MODES:
                    raise ValueError(f"--trace-config {text}: invalid value for trace mode "
                                     f'option: {value}. Available options are "triton" and '
                                     '"opentelemetry"')
                fields["mode"] = value.lower()
            elif setting == "rate":
                fields["rate"] = _integer(value, flag, 0)
            else:
                fields["count"] = _integer(value, flag, -1, 2**31 - 1)
            continue
        if setting not in _MODE_SETTINGS[mode]:
            raise ValueError(f"--trace-config {text}: unknown {mode} trace setting '{setting}' "
                             f"(its settings are {', '.join(_MODE_SETTINGS[mode])})")
        mode_settings[mode].append((setting, value, flag))
    chosen = str(fields.get("mode", "triton"))
    options: list[tuple[str, str]] = []
    file, log_frequency = "", 0
    for setting, value, flag in mode_settings[chosen]:
        if setting == "file":
            file = value
        elif setting == "log-frequency":
            log_frequency = _integer(value, flag, 0)
        elif setting.startswith("bsp_"):
            options.append((setting, str(_integer(value, flag, 0))))
        elif setting == "resource" and "=" not in value:
            raise ValueError(f"--trace-config {flag}: a resource attribute is key=value")
        else:
            options.append((setting, value))
    if chosen == "opentelemetry":
        if not any(key == "url" for key, _ in options):
            options.insert(0, ("url", DEFAULT_OTLP_URL))
        for setting, variable, default in BSP_DEFAULTS:
            if not any(key == setting for key, _ in options):
                value = environ.get(variable, str(default))
                options.append((setting, str(_integer(value, variable, 0))))
    traced_levels = () if off else tuple(
        name for name in ("TIMESTAMPS", "TENSORS") if name in levels)
    return TraceConfig(level=traced_levels, rate=int(fields.get("rate", DEFAULT_RATE)),
                       count=int(fields.get("count", -1)), log_frequency=log_frequency,
                       file=file, mode=chosen, options=tuple(options))
