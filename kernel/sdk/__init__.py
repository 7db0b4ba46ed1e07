"""The plugin SDK: everything a plugin may import from the kernel, and nothing else.

A plugin (built-in under ``inferd.plugins`` or pip-installed) imports the kernel only through
this package; ``tests/plugins/test_sdk_boundary.py`` fails when a module under ``plugins/``
imports any other kernel module. What it may use besides: ``inferd.protocols`` (messages,
errors, codecs), the standard library, and third-party packages. The hooks themselves are
documented in ``inferd.kernel.hookspecs``, the plugin author's manual.

Four modules, so that a hook module stays light (the server and every executor process
import every plugin's hook module at start-up):

- ``inferd.kernel.sdk`` (this one): ``hookimpl``, every registry and spec a hook fills, the
  contracts a plugin implements (``Backend``/``Model``/``Instance``, ``Frontend``,
  ``ResponseCache``, ``TraceSink``, ``ControlStateStore``, a repository storage's
  ``RemoteLocation``, a repository agent's ``AgentModel``) and the small helpers they need
  (option types, setting readers, trace records, the control-state record's format, the
  memory meter). Imports nothing heavy.
- ``inferd.kernel.sdk.control``: the contract of a control policy (an optional feature that
  takes part in the model lifecycle: models on demand and the memory budget).
- ``inferd.kernel.sdk.backends``: what backends use inside executors (batched-instance
  helpers, config completion, thread settings, devices, config JSON).
- ``inferd.kernel.sdk.frontends``: what frontends use in the server's event loop (the data
  plane, settings, the start-up error, log context, request logging, TLS, limits, streams,
  the loop socket, metrics).
"""

from __future__ import annotations

from inferd.kernel.actors.repository.agents import (
    AgentModel,
    AgentRefused,
    AgentRegistry,
    AgentSpec,
)
from inferd.kernel.actors.repository.remote_storage import (
    READ_TIMEOUT_SECS,
    RemoteLocation,
    RemoteStorageError,
    StorageRegistry,
    StorageSpec,
)
from inferd.kernel.actors.scheduler.cache_config import (
    CacheConfigError,
    CacheCounters,
    CacheRegistry,
    CacheSpec,
    CacheUnavailable,
    ResponseCache,
    Sample,
    boolean,
    port_number,
    text,
    whole_number,
)
from inferd.kernel.backend import (
    Backend,
    BackendRegistry,
    BackendSpec,
    CancelledRequests,
    Emit,
    Instance,
    Model,
    ModelContext,
)
from inferd.kernel.cli.commands import (
    CANNOT_CONNECT,
    EXIT_CODES,
    OK,
    REFUSED,
    USAGE,
    CommandRegistry,
    CommandSpec,
    examples,
)
from inferd.kernel.cli.flags import (
    ListenFlags,
    add_boolean,
    boolean_word,
    byte_count,
    parse_boolean,
    positive_count,
    positive_seconds,
)
from inferd.kernel.cli.table import format_table
from inferd.kernel.frontend import Frontend, FrontendRegistry, FrontendSpec
from inferd.kernel.hookspecs import hookimpl
from inferd.kernel.observability.memory_meter import MemoryMeter, folder_bytes
from inferd.kernel.sdk.control_state import (
    ControlStateStore,
    ControlStateStoreRegistry,
    ControlStateStoreSpec,
    Entry,
    Record,
    RecordError,
    checked,
    dump,
)
from inferd.kernel.sdk.control_state import digest as record_digest
from inferd.kernel.sdk.control_state import parse as parse_record
from inferd.kernel.observability.trace_config import TraceConfig, trace_integer
from inferd.kernel.observability.trace_sinks import (
    CLOSE_TIMEOUT_SECS,
    SinkWorker,
    TraceSink,
    TraceSinkRegistry,
    TraceSinkSpec,
)
from inferd.kernel.observability.tracing import CURRENT, Trace, TraceSetting, traced

__all__ = [
    "format_table",
    "CANNOT_CONNECT", "CLOSE_TIMEOUT_SECS", "CURRENT", "EXIT_CODES", "OK", "READ_TIMEOUT_SECS",
    "REFUSED", "USAGE",
    "AgentModel", "AgentRefused", "AgentRegistry", "AgentSpec",
    "Backend", "BackendRegistry", "BackendSpec", "CancelledRequests", "Emit", "Instance", "Model",
    "ModelContext",
    "CacheConfigError", "CacheCounters", "CacheRegistry", "CacheSpec", "CacheUnavailable",
    "ResponseCache", "Sample", "boolean", "port_number", "text", "whole_number",
    "CommandRegistry", "CommandSpec", "examples",
    "ControlStateStore", "ControlStateStoreRegistry", "ControlStateStoreSpec", "Entry", "Record",
    "RecordError",
    "checked", "dump", "parse_record", "record_digest",
    "Frontend", "FrontendRegistry", "FrontendSpec",
    "hookimpl",
    "MemoryMeter", "folder_bytes",
    "ListenFlags", "add_boolean", "boolean_word", "byte_count", "parse_boolean", "positive_count",
    "positive_seconds",
    "RemoteLocation", "RemoteStorageError", "StorageRegistry", "StorageSpec",
    "SinkWorker", "Trace", "TraceConfig", "TraceSetting", "TraceSink", "TraceSinkRegistry",
    "TraceSinkSpec", "trace_integer", "traced",
]
