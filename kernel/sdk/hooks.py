"""Every hook an inferd plugin can implement: this module is the plugin author's manual.

A plugin is a module named by an entry point in the ``inferd`` group::

    [project.entry-points.inferd]
    mybackend = "mypackage.inferd_plugin"

whose functions are decorated with ``inferd.kernel.sdk.hookimpl`` (the same marker as
``inferd.kernel.sdk.hooks.hookimpl``). A plugin imports from the kernel only what
``inferd.kernel.sdk`` exports (the contracts, the registries and their specs, the helpers);
every other kernel module may change without notice. Hooks are for discovery and
configuration at start-up only; nothing here runs per request. A hook module must import no
framework or client library (onnxruntime, torch, redis, boto3, ...): a spec names classes by
import path, or its callables import what they need when they are called.

Every registering hook receives a registry and calls ``registry.add(Spec(...))``; a name
registered twice with different specs is an error, and a name nobody registered is an error
listing the names that are (``INFERD_PLUGINS`` / ``INFERD_DISABLE_PLUGINS`` choose plugins by
entry-point name, so every built-in one can be removed and replaced by a pip-installed one).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from inferd.kernel.sdk.agents import AgentRegistry
    from inferd.kernel.sdk.backends import BackendRegistry
    from inferd.kernel.sdk.caches import CacheRegistry
    from inferd.kernel.sdk.commands import CommandRegistry
    from inferd.kernel.sdk.control import ControlPolicyRegistry
    from inferd.kernel.sdk.control_state import ControlStateStoreRegistry
    from inferd.kernel.sdk.frontends import FrontendRegistry
    from inferd.kernel.sdk.shared_memory import SharedMemoryProviders
    from inferd.kernel.sdk.storage import StorageRegistry
    from inferd.kernel.sdk.tracing import TraceSinkRegistry

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "inferd"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def inferd_register_backends(registry: BackendRegistry) -> None:
    """Register backends with ``registry.add(BackendSpec(...))``.

    Called in the main process (to map configs to backends and default file names) and in
    every executor process (to find the class to import when a model needs it).
    """


@hookspec
def inferd_register_frontends(registry: FrontendRegistry) -> None:
    """Register frontends with ``registry.add(FrontendSpec(...))``.

    Called once in the main process. Every registered frontend is started, in registration
    order, once the models of the start-up set have been handled.
    """


@hookspec
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    """Add the command-line options a plugin reads to ``inferd serve``: a frontend declares
    its port and address here (``inferd.kernel.sdk.flags.ListenFlags``), and its limits.

    Parsed values reach the plugin through ``Settings.options`` keyed by the option's
    ``dest``; the kernel's own flags are ``Settings`` fields. Choose names that cannot clash
    with other plugins (prefix them with the plugin's name).
    """


@hookspec
def inferd_register_caches(registry: CacheRegistry) -> None:
    """Register response caches with ``registry.add(CacheSpec(name, settings, configure,
    open))``, by the name ``--cache-config=<name>,<setting>=<value>`` gives (Triton's cache
    names: the built-ins are ``local`` and ``redis``).

    ``settings`` maps each setting to its reader (``whole_number(1)``, ``port_number``,
    ``boolean``, ``text``); ``configure(values, environ)`` builds the cache's settings object
    before the server starts (``CacheConfigError`` for what is missing); ``open(settings)`` is
    awaited once at start-up in the main event loop and returns a ``ResponseCache`` (or raises
    ``CacheUnavailable``, which fails the start). The cache's ``lookup`` and ``insert`` run
    in the event loop for every request of a model with ``response_cache { enable: true }``:
    they must not block, and a failure they raise is served as a miss.
    """


@hookspec
def inferd_register_trace_sinks(registry: TraceSinkRegistry) -> None:
    """Register trace sinks with ``registry.add(TraceSinkSpec(mode, settings, open))``, by
    the mode ``--trace-config mode=<mode>`` chooses (Triton's: ``triton``, JSON files, and
    ``opentelemetry``, OTLP spans).

    ``settings`` are the mode's own ``--trace-config <mode>,<setting>=<value>`` names
    (``file`` and ``log-frequency`` keep Triton's meaning for any mode that lists them);
    ``complete(options, environ)``, if given, checks them and adds defaults (``ValueError``
    with the flag for a bad one); ``writes_file``, ``captures_tensors`` and
    ``follows_traceparent`` say what the tracer does differently for the mode (the triton
    mode sets the first two, opentelemetry the last). ``open(config)`` makes the
    ``TraceSink`` at start-up; a
    missing package is a ``ValueError`` saying what to install. A sink's ``write`` is called
    in the event loop with each ended trace and must only hand it to a thread of its own
    (``SinkWorker``).
    """


@hookspec
def inferd_register_repository_storage(registry: StorageRegistry) -> None:
    """Register object storage for model repositories with ``registry.add(StorageSpec(name,
    schemes, ...))``: ``--model-repository=<scheme>://...`` roots of those URL schemes are
    read through it (the built-in ``fsspec`` plugin: ``s3``, ``gs``, ``as``, ``az``).

    ``parse(url, env, timeout)`` reads a URL into a ``RemoteLocation`` (``InvalidArgument``
    for a malformed one) without I/O; ``check(location)`` raises when its client library is
    missing (a start-up check); ``open(location)`` returns an fsspec-compatible filesystem
    (``ls``, ``find``, ``get_file``), called from worker threads; ``describe_error(url,
    error)`` turns a failed call into one sentence for clients, naming no secret.
    """


@hookspec
def inferd_register_control_state_stores(registry: ControlStateStoreRegistry) -> None:
    """Register stores of ``--model-control-state``'s control-state record with
    ``registry.add(ControlStateStoreSpec(name, scheme, described, open))``: a record named by a URL
    of ``scheme`` (``""`` for a plain path) is kept in the store ``open(where)`` returns (the
    built-ins: ``path``, a local or shared POSIX file under a lock, and ``s3``, conditional
    writes). A ``ControlStateStore``'s calls block and run in worker threads; ``update``
    must be atomic against every other replica writing the same record.
    """


@hookspec
def inferd_register_commands(registry: CommandRegistry) -> None:
    """Register client commands of the ``inferd`` command with ``registry.add(CommandSpec(
    name, entry, epilog))``: ``entry`` is ``"package.module:function"``, a typer command
    function (its parameters are the command's options, its docstring its help), imported
    only when ``inferd`` runs a client command, never by ``inferd serve``. ``serve`` and
    ``check`` are the kernel's own and cannot be replaced.
    """


@hookspec
def inferd_register_repository_agents(registry: AgentRegistry) -> None:
    """Register repository agents (Triton's ``model_repository_agents``) with
    ``registry.add(AgentSpec(name, entry))``: a model whose config lists
    ``model_repository_agents { agents [{ name: "<name>" parameters {...} }] }`` has each agent
    run, in order, before it loads. ``entry`` is ``"package.module:function"``, a
    ``function(model: AgentModel) -> Path | None`` that sees the model's folder (local, after
    a remote model's files were fetched), its selected versions, its config and the agent's
    parameters. It returns None to load the folder as it is, or another folder to load
    instead (the files it changed); it raises ``AgentRefused`` to refuse the load, its
    message becoming the model's reason in the repository index. It runs in a worker thread
    of the main process on every load and reload, and when ``inferd check`` or the catalog
    reads the model (the catalog once per change of the folder): it must not change the
    repository's own files, only give another folder.
    """


@hookspec
def inferd_register_control_policies(registry: ControlPolicyRegistry) -> None:
    """Register control policies with ``registry.add(ControlPolicySpec(name, open))``: an
    optional feature that takes part in the model lifecycle (the built-ins: models on demand
    and the memory budget, the control-state record). ``open(setup)`` is called once at
    start-up, in a worker thread, with the parsed options (``PolicySetup``) and returns
    None when the policy's flags leave it off, else an
    ``OpenedPolicy``: a factory of the ``ControlPolicy`` the control actor calls (around each
    load, once a model holds nothing, when a request names a model not served, when the index
    and the metrics are read) and, if it has one, the data plane's part (``UnservedModels``).
    A ``ValueError`` from ``open`` fails the start with its message.
    """


@hookspec
def inferd_register_shared_memory(registry: SharedMemoryProviders) -> None:
    """Register the provider of client shared memory (the KServe extension's system and CUDA
    regions) with ``registry.add(SharedMemorySpec(name, open))``; a server takes at most one
    (the built-in: ``inferd.plugins.shared_memory``). ``open(setup)`` is called once at
    start-up with the parsed options (``SharedMemorySetup``) and returns the ``SharedMemory``
    the data plane then calls directly for the extension's requests and for each request that
    names regions (in the event loop: it must not block). Without one, the extension's
    endpoints answer as Triton does with client shared memory off, and a request naming a
    region is refused.
    """
