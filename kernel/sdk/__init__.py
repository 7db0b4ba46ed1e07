"""The plugin SDK: the contracts every kind of plugin implements, defined here, and the
helpers plugins use. A plugin author reads this one package.

A plugin (built-in under ``inferd.plugins`` or pip-installed) imports the kernel only through
this package; ``tests/plugins/test_sdk_boundary.py`` fails when a module under ``plugins/``
imports any other kernel module, and when a module of this package imports the kernel outside
it (the SDK imports ``inferd.protocols``, the standard library and third-party packages).
The kernel imports its contracts from here. What a plugin may use besides:
``inferd.protocols`` (messages, errors, codecs), the standard library, and third-party
packages. The hooks themselves are documented in
``inferd.kernel.sdk.hooks``, the plugin author's manual.

One module per plugin kind, each defining its contract and its registry:

- ``hooks``: every hook (the hookspecs) and ``hookimpl``; ``registry``: the ``Registry`` type
  every registry below is.
- ``backends``: ``Backend``/``Model``/``Instance``, ``ModelContext``, ``BackendSpec``, with the
  messages, errors and tensor helpers every backend handles; beside it the backend's helpers,
  ``batching`` (one execute over a batch), ``process_threads``, ``modelconfig`` (completion,
  the fork parameter; ``config_text``: config JSON and text), ``devices`` and ``cuda_memory``
  (clients' CUDA regions, outputs written in place).
- ``frontends``: ``Frontend``, ``FrontendSpec``, ``StartupFailed`` and the protocols of what a
  frontend is given (``DataPlane``, ``Settings``); beside it ``tls``, ``gpu_metrics``,
  ``process_metrics``, ``metrics_config``, ``request_log``, ``log_context``,
  ``open_file_limit`` and ``loop_socket``.
- ``caches``: ``ResponseCache``; ``tracing``: ``TraceSink`` and the ``Trace`` records;
  ``storage``: repository storage's ``RemoteLocation``; ``agents``: a repository agent's
  ``AgentModel``; ``control_state``: ``ControlStateStore`` and the record's format;
  ``control``: a control policy; ``commands``: ``inferd <name>`` client commands, with
  ``flags`` (option types) and ``table``; ``memory_meter``: what a process holds;
  ``shared_memory``: client shared memory, the KServe extension a plugin provides.
- ``testing``: a real server for a plugin's own tests.

This module re-exports the names a hook module needs (``hookimpl``, every registry and
spec, the contracts), so ``from inferd.kernel.sdk import ...`` stays enough for most plugins.
"""

from __future__ import annotations

from inferd.kernel.sdk.agents import AgentModel, AgentRefused, AgentRegistry, AgentSpec
from inferd.kernel.sdk.backends import (
    Backend,
    BackendRegistry,
    BackendSpec,
    CancelledRequests,
    Emit,
    Instance,
    Model,
    ModelContext,
)
from inferd.kernel.sdk.caches import (
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
from inferd.kernel.sdk.commands import (
    CommandRegistry,
    CommandSpec,
    examples,
)
from inferd.kernel.sdk.control_state import (
    ControlStateStore,
    ControlStateStoreRegistry,
    ControlStateStoreSpec,
)
from inferd.kernel.sdk.flags import (
    ListenFlags,
    add_boolean,
    boolean_word,
    byte_count,
    parse_boolean,
    positive_count,
    positive_seconds,
)
from inferd.kernel.sdk.frontends import Frontend, FrontendRegistry, FrontendSpec, StartupFailed
from inferd.kernel.sdk.hooks import hookimpl
from inferd.kernel.sdk.memory_meter import MemoryMeter, folder_bytes
from inferd.kernel.sdk.storage import (
    READ_TIMEOUT_SECS,
    RemoteLocation,
    RemoteStorageError,
    StorageRegistry,
    StorageSpec,
)
from inferd.kernel.sdk.table import format_table
from inferd.kernel.sdk.tracing import (
    CLOSE_TIMEOUT_SECS,
    CURRENT,
    SinkWorker,
    Trace,
    TraceConfig,
    TraceSetting,
    TraceSink,
    TraceSinkRegistry,
    TraceSinkSpec,
    trace_integer,
    traced,
)

__all__ = [
    "format_table",
    "CLOSE_TIMEOUT_SECS", "CURRENT", "READ_TIMEOUT_SECS",
    "AgentModel", "AgentRefused", "AgentRegistry", "AgentSpec",
    "Backend", "BackendRegistry", "BackendSpec", "CancelledRequests", "Emit", "Instance", "Model",
    "ModelContext",
    "CacheConfigError", "CacheCounters", "CacheRegistry", "CacheSpec", "CacheUnavailable",
    "ResponseCache", "Sample", "boolean", "port_number", "text", "whole_number",
    "CommandRegistry", "CommandSpec", "examples",
    "ControlStateStore", "ControlStateStoreRegistry", "ControlStateStoreSpec",
    "Frontend", "FrontendRegistry", "FrontendSpec", "StartupFailed",
    "hookimpl",
    "MemoryMeter", "folder_bytes",
    "ListenFlags", "add_boolean", "boolean_word", "byte_count", "parse_boolean", "positive_count",
    "positive_seconds",
    "RemoteLocation", "RemoteStorageError", "StorageRegistry", "StorageSpec",
    "SinkWorker", "Trace", "TraceConfig", "TraceSetting", "TraceSink", "TraceSinkRegistry",
    "TraceSinkSpec", "trace_integer", "traced",
]
