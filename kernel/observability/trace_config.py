"""``inferd serve --trace-config``: tritonserver's trace flag, read into one ``TraceConfig``.

Each flag is ``<setting>=<value>`` for a global setting (``level``, repeatable, ``rate``,
``count``, ``mode``) or ``<mode>,<setting>=<value>`` for a mode's own, the modes and their
settings being those the trace-sink plugins registered (``inferd.kernel.sdk.tracing``;
the built-in ``triton`` takes ``file=PATH`` and ``log-frequency=N``, ``opentelemetry`` its URL,
resource attributes and batch span processor settings, completed by its plugin). A malformed
or unknown setting is a start-up error (``ValueError`` with the flag in its message). Owns
parsing only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from inferd.kernel.sdk.flags import split_setting
from inferd.kernel.sdk.tracing import DEFAULT_MODE, DEFAULT_RATE, TraceConfig, trace_integer

if TYPE_CHECKING:
    from inferd.kernel.sdk.tracing import TraceSinkRegistry

_GLOBAL = ("level", "rate", "count", "mode")


def _modes_text(modes: Sequence[str]) -> str:
    quoted = [f'"{mode}"' for mode in modes]
    return " and ".join(quoted) if len(quoted) < 3 else ", ".join(quoted[:-1]) + \
        f" and {quoted[-1]}"


def _split(text: str, modes: Sequence[str]) -> tuple[str, str, str]:
    """``[mode,]setting=value`` as (mode or "", setting, value)."""
    group, setting, value = split_setting(text)
    if group == "":
        raise ValueError(f"--trace-config {text}: no trace mode specified; the format is "
                         "<trace mode>,<setting>=<value> or <setting>=<value>")
    if value is None or not setting or not value:
        raise ValueError(f"--trace-config {text}: the format is "
                         "'<trace mode>,<setting>=<value>' or '<setting>=<value>'")
    mode = (group or "").lower()
    if mode and mode not in modes:
        raise ValueError(f"--trace-config {text}: invalid value for trace mode option: {mode}. "
                         f"Available options are {_modes_text(modes)}")
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


def parse_trace_config(items: Sequence[str], sinks: TraceSinkRegistry,
                       environ: Mapping[str, str] | None = None) -> TraceConfig:
    """Every ``--trace-config`` flag, in order, as one configuration of one of the modes of
    ``sinks`` (the server's plugins' trace sinks)."""
    environ = os.environ if environ is None else environ
    modes = sinks.names()
    levels: set[str] = set()
    off = False
    fields: dict[str, int | str] = {}
    mode_settings: dict[str, list[tuple[str, str, str]]] = {mode: [] for mode in modes}
    for text in items:
        mode, setting, value = _split(text, modes)
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
                if value.lower() not in modes:
                    raise ValueError(f"--trace-config {text}: invalid value for trace mode "
                                     f"option: {value}. Available options are "
                                     f"{_modes_text(modes)}")
                fields["mode"] = value.lower()
            elif setting == "rate":
                fields["rate"] = trace_integer(value, flag, 0)
            else:
                fields["count"] = trace_integer(value, flag, -1, 2**31 - 1)
            continue
        own = sinks.require(mode).settings
        if setting not in own:
            raise ValueError(f"--trace-config {text}: unknown {mode} trace setting '{setting}' "
                             f"(its settings are {', '.join(own)})")
        mode_settings[mode].append((setting, value, flag))
    chosen = str(fields.get("mode", DEFAULT_MODE))
    options: list[tuple[str, str]] = []
    file, log_frequency = "", 0
    for setting, value, flag in mode_settings.get(chosen, ()):
        if setting == "file":
            file = value
        elif setting == "log-frequency":
            log_frequency = trace_integer(value, flag, 0)
        else:
            options.append((setting, value))
    spec = sinks.get(chosen)
    if spec is not None and spec.complete is not None:
        options = spec.complete(options, environ)
    traced_levels = () if off else tuple(
        name for name in ("TIMESTAMPS", "TENSORS") if name in levels)
    return TraceConfig(level=traced_levels, rate=int(fields.get("rate", DEFAULT_RATE)),
                       count=int(fields.get("count", -1)), log_frequency=log_frequency,
                       file=file, mode=chosen, options=tuple(options))
