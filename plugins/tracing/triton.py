"""The ``triton`` trace mode plugin: Triton's JSON trace files.

``TritonFileSink`` keeps Triton's file rules: a setting's traces collect until
``log_frequency`` of them (then ``<file>.<n>``, n counting up from 0 per file), until its
``trace_count`` is used up (also an indexed file), or until the setting is replaced or the
server stops (then ``<file>`` itself, or an indexed file when log_frequency is set). Unlike
Triton's, ``<file>`` is a complete JSON array after every write (the closing bracket is
rewritten), so it can be read while the server runs, and without a frequency or a count each
trace is appended to it as it ends rather than held in memory until exit. Files are written on
the sink's own thread.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.kernel.sdk import (
    SinkWorker,
    TraceConfig,
    TraceSink,
    TraceSinkRegistry,
    TraceSinkSpec,
    hookimpl,
)

if TYPE_CHECKING:
    from inferd.kernel.sdk import Trace, TraceSetting
    from inferd.protocols.messages import Tensor

log = logging.getLogger(__name__)
MODE = "triton"


def _values(tensor: Tensor) -> Iterator[str]:
    data = np.asarray(tensor.data).reshape(-1)
    if tensor.datatype == "BYTES":
        for item in data:
            text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            yield f'"{text}"'
    elif tensor.datatype == "BOOL":
        yield from ("1" if item else "0" for item in data)
    elif tensor.datatype == "BF16":
        yield from (format(float(v), "g") for v in
                    (data.astype(np.uint32) << 16).view(np.float32))
    elif data.dtype.kind == "f":
        yield from (format(float(item), "g") for item in data)
    else:
        yield from (str(int(item)) for item in data)


def trace_entries(trace: Trace) -> list[dict[str, Any]]:
    """The entries of a root trace and its children in Triton's JSON layout."""
    entries: list[dict[str, Any]] = []
    for each in (trace, *trace.children):
        head: dict[str, Any] = {"id": each.id, "model_name": each.model,
                                "model_version": each.version}
        if each.request_id:
            head["request_id"] = each.request_id
        if each.parent_id:
            head["parent_id"] = each.parent_id
        entries.append(head)
        entries += [{"id": each.id, "timestamps": [{"name": name, "ns": ns}]}
                    for name, ns in each.stamps]
        entries += [{"id": each.id, "activity": activity, "tensor": {
            "name": tensor.name, "data": ",".join(_values(tensor)),
            "shape": ",".join(str(d) for d in tensor.shape), "dtype": tensor.datatype}}
            for activity, tensor in each.tensors]
    return entries


class _TraceFile:
    """``<path>`` (a JSON array, extended in place) and its indexed files ``<path>.<n>``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.index = 0
        self.started = False

    def save(self, parts: list[str], indexed: bool) -> None:
        text = ",".join(parts)
        try:
            if indexed:
                name = f"{self.path}.{self.index}"
                self.index += 1
                with open(name, "w", encoding="utf-8") as file:
                    file.write(f"[{text}]")
            elif not self.started:
                with open(self.path, "w", encoding="utf-8") as file:
                    file.write(f"[{text}]")
                self.started = True
            else:
                with open(self.path, "r+b") as file:
                    file.seek(-1, os.SEEK_END)  # over the closing bracket
                    file.write(f",{text}]".encode())
        except OSError as error:
            log.error("failed creating trace file: %s", error)


class TritonFileSink:
    def __init__(self) -> None:
        self._files: dict[str, _TraceFile] = {}
        self._worker = SinkWorker("inferd-trace-files")

    def write(self, trace: Trace) -> None:
        self._worker.submit(lambda: self._collect(trace))

    def retire(self, setting: TraceSetting) -> None:
        self._worker.submit(lambda: self._retired(setting))

    def close(self) -> None:
        self._worker.close()

    def _file(self, path: str) -> _TraceFile:
        found = self._files.get(path)
        if found is None:
            found = self._files[path] = _TraceFile(path)
        return found

    def _collect(self, trace: Trace) -> None:
        setting = trace.setting
        setting.stream.append(",".join(json.dumps(entry, separators=(",", ":"))
                                       for entry in trace_entries(trace)))
        setting.collected += 1
        exhausted = setting.count == 0 and setting.collected >= setting.created
        if exhausted or (setting.log_frequency and
                         len(setting.stream) >= setting.log_frequency):
            self._flush(setting, True)
        elif setting.retired:
            self._flush(setting, setting.log_frequency != 0)
        elif not setting.log_frequency and setting.count < 0:
            # Unlimited traces, no frequency: Triton holds them all in memory until exit;
            # appended at once they end up in <file> the same, without piling up.
            self._flush(setting, False)

    def _retired(self, setting: TraceSetting) -> None:
        # Set here, in order: traces that ended before the setting was replaced still
        # collect as it said; those that end later are written at once.
        setting.retired = True
        self._flush(setting, setting.log_frequency != 0)

    def _flush(self, setting: TraceSetting, indexed: bool) -> None:
        if setting.stream and setting.file:
            parts, setting.stream = setting.stream, []
            self._file(setting.file).save(parts, indexed)


def open_sink(config: TraceConfig) -> TraceSink:
    return TritonFileSink()


@hookimpl
def inferd_register_trace_sinks(registry: TraceSinkRegistry) -> None:
    registry.add(TraceSinkSpec(MODE, ("file", "log-frequency"), open_sink, writes_file=True,
                               captures_tensors=True))
