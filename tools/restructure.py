"""Move kernel/ into packages that mirror the architecture, and rewrite every reference.

Run from the repository root on a clean tree: ``.venv/bin/python tools/restructure.py``
(``--dry-run`` prints what it would do and changes nothing). It moves each module of
``MOVES`` with ``git mv`` (and each test of ``TEST_MOVES`` beside it under tests/kernel/),
writes an ``__init__.py`` holding only a docstring for every new package, removes an old
package once nothing but its ``__init__.py`` is left, and rewrites the references in every
tracked text file: imports (``from inferd.kernel.x import``, ``import inferd.kernel.x``,
``from inferd.kernel import x``), dotted names in strings (monkeypatch targets, ``-m`` module
names, entry points), paths (``kernel/x.py``, ``tests/kernel/test_x.py``: setup.py's
``COMPILED``, the Makefile, .ci/, the docs), ``tests.kernel.*`` helper modules, a moved
test's ``Path(__file__).parents[n]``, and the kernel's entries of ``[tool.setuptools]
packages`` in pyproject.toml. A Python line the rewrite makes longer than ruff's limit is
wrapped: an import into its parenthesized form, a docstring or comment line by moving words
on to the next line of its paragraph; any other is listed at the end.

It is tolerant, so it can run again after other branches merged: a module of the mapping
that no longer exists is skipped with a line saying so; one already at its new place is left
there; a kernel module the mapping does not name stays where it is and is listed at the end
("not placed"); a reference to a module moved earlier is still rewritten (so a branch merged
after the move is fixed by running it again), except where the old name is now a package and
the reference names something in it. A second run changes nothing.

It prints the tree before and after: the top-level entries of kernel/ and the lines of Python
in kernel/ and in plugins/.

On main, once the branches that change kernel/ are merged: commit or stash everything, run
it, add what it lists as "not placed" to ``MOVES`` (and ``TEST_MOVES``) and run it again, then
``.venv/bin/python -m pip install --no-deps --no-build-isolation -e .`` (the ``inferd`` entry
point moved), ``make setup`` (setup.py's compiled modules moved), ``.ci/typecheck`` and the
tests, and commit the result on its own.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import io
import sys
import textwrap
import tokenize
from collections.abc import Iterable
from pathlib import Path

LINE_LENGTH = 100  # pyproject's [tool.ruff] line-length

# ---------------------------------------------------------------------------------------------
# The mapping: old path -> new path, both relative to kernel/.

MOVES: list[tuple[str, str]] = [
    # The supervisor: builds the actors, starts them in order, shuts them down.
    ("server.py", "supervisor.py"),
    # The runtime core: actors, addresses, routing, the process link and its transports, the
    # run folder, the plugin registry and manager, the GPUs seen, the open-file limit.
    ("actor.py", "runtime/actor.py"),
    ("addresses.py", "runtime/addresses.py"),
    ("router.py", "runtime/router.py"),
    ("process_link.py", "runtime/process_link.py"),
    ("loop_socket.py", "runtime/loop_socket.py"),
    ("link_memory.py", "runtime/link_memory.py"),
    ("run_folder.py", "runtime/run_folder.py"),
    ("registry.py", "runtime/registry.py"),
    ("plugins.py", "runtime/plugin_manager.py"),
    ("devices.py", "runtime/devices.py"),
    ("limits.py", "runtime/open_file_limit.py"),
    # The repository actor and what it reads: folders, fingerprints, remote roots, catalog.
    ("actors/repository.py", "actors/repository/actor.py"),
    ("repository.py", "actors/repository/folders.py"),
    ("folder_fingerprints.py", "actors/repository/fingerprints.py"),
    ("repository_mirror.py", "actors/repository/mirror.py"),
    ("remote_roots.py", "actors/repository/remote_roots.py"),
    ("remote_objects.py", "actors/repository/remote_objects.py"),
    ("remote_storage.py", "actors/repository/remote_storage.py"),
    ("catalog.py", "actors/repository/catalog.py"),
    ("catalog_listing.py", "actors/repository/catalog_listing.py"),
    ("repository_agents.py", "actors/repository/agents.py"),  # the plugins branch's
    # The control actor and its helpers. "State" says one thing per name: a model's status
    # (model_status, lifecycle_log) and the desired state of --model-control-state
    # (desired_state: control's part; desired_state_record: the record and its stores).
    ("actors/control.py", "actors/control/actor.py"),
    ("actors/control_desired.py", "actors/control/desired_state.py"),
    ("actors/control_poll.py", "actors/control/poll.py"),
    ("actors/control_recovery.py", "actors/control/recovery.py"),
    ("actors/control_unload.py", "actors/control/unload.py"),
    ("actors/control_versions.py", "actors/control/versions.py"),
    ("actors/control_views.py", "actors/control/views.py"),
    ("actors/control_on_demand.py", "actors/control/on_demand.py"),
    ("actors/control_budget.py", "actors/control/budget.py"),
    ("actors/control_budget_rules.py", "actors/control/budget_rules.py"),
    ("control_state.py", "actors/control/desired_state_record.py"),
    ("control_state_s3.py", "actors/control/desired_state_s3.py"),
    ("model_status.py", "actors/control/model_status.py"),
    ("state_log.py", "actors/control/lifecycle_log.py"),
    ("version_reuse.py", "actors/control/version_reuse.py"),
    ("overrides.py", "actors/control/file_overrides.py"),
    ("ensembles/control.py", "actors/control/ensembles.py"),
    ("ensembles/dependencies.py", "actors/control/ensemble_dependencies.py"),
    # The scheduler actor, its sans-IO queue logic (today's scheduling/), what it checks and
    # caches, and the ensembles it runs.
    ("actors/scheduler.py", "actors/scheduler/actor.py"),
    ("actors/scheduler_dispatch.py", "actors/scheduler/dispatch.py"),
    ("scheduling/batcher.py", "actors/scheduler/batcher.py"),
    ("scheduling/decoupled.py", "actors/scheduler/decoupled.py"),
    ("scheduling/progress.py", "actors/scheduler/progress.py"),
    ("scheduling/queue_policy.py", "actors/scheduler/queue_policy.py"),
    ("scheduling/requests.py", "actors/scheduler/requests.py"),
    ("scheduling/response_order.py", "actors/scheduler/response_order.py"),
    ("scheduling/routing.py", "actors/scheduler/routing.py"),
    ("scheduling/samples.py", "actors/scheduler/samples.py"),
    ("scheduling/sequence_batcher.py", "actors/scheduler/sequence_batcher.py"),
    ("scheduling/version.py", "actors/scheduler/version.py"),
    ("request_validation.py", "actors/scheduler/request_validation.py"),
    ("classification.py", "actors/scheduler/classification.py"),
    ("response_cache.py", "actors/scheduler/response_cache.py"),
    ("cache_key.py", "actors/scheduler/cache_key.py"),
    ("cache_config.py", "actors/scheduler/cache_config.py"),
    ("cuda_windows.py", "actors/scheduler/cuda_windows.py"),
    ("local_cache.py", "actors/scheduler/local_cache.py"),
    ("redis_cache.py", "actors/scheduler/redis_cache.py"),
    ("ensembles/pinning.py", "actors/scheduler/ensembles/pinning.py"),
    ("ensembles/planning.py", "actors/scheduler/ensembles/planning.py"),
    ("ensembles/running.py", "actors/scheduler/ensembles/running.py"),
    ("ensembles/served.py", "actors/scheduler/ensembles/served.py"),
    # The executor actor, its process's entry point, and what runs a model's instances.
    ("actors/executor.py", "actors/executor/actor.py"),
    ("executor_process.py", "actors/executor/main.py"),
    ("instance_slot.py", "actors/executor/instance_slot.py"),
    ("warmup.py", "actors/executor/warmup.py"),
    ("execution_env.py", "actors/executor/execution_env.py"),
    ("batched_instance.py", "actors/executor/batched_instance.py"),
    ("process_threads.py", "actors/executor/process_threads.py"),
    ("load_priority.py", "actors/executor/load_priority.py"),
    ("device_memory.py", "actors/executor/device_memory.py"),
    # The executor pool actor: which executor processes exist and where a load goes.
    ("actors/executor_pool.py", "actors/executor_pool/actor.py"),
    ("executor_processes.py", "actors/executor_pool/processes.py"),
    ("placement.py", "actors/executor_pool/placement.py"),
    # Triton's ModelConfig: reading it, its rules, what inferd supports of it.
    ("modelconfig.py", "modelconfig/reading.py"),
    ("config_validation.py", "modelconfig/validation.py"),
    ("config_completion.py", "modelconfig/completion.py"),
    ("config_support.py", "modelconfig/support.py"),
    ("sequence_plan.py", "modelconfig/sequence_plan.py"),
    # Metrics, statistics, logs and traces.
    ("metrics_config.py", "observability/metrics_config.py"),
    ("statistics.py", "observability/statistics.py"),
    ("latency_summary.py", "observability/latency_summary.py"),
    ("process_metrics.py", "observability/process_metrics.py"),
    ("memory_meter.py", "observability/memory_meter.py"),
    ("gpu_metrics.py", "observability/gpu_metrics.py"),
    ("logs.py", "observability/logs.py"),
    ("log_format.py", "observability/log_format.py"),
    ("log_context.py", "observability/log_context.py"),
    ("request_log.py", "observability/request_log.py"),
    ("tracing.py", "observability/tracing.py"),
    ("trace_config.py", "observability/trace_config.py"),
    ("trace_sinks.py", "observability/trace_sinks.py"),
    # The data plane frontends adapt, and what they share: response streams, the KServe
    # shared-memory extension (system and CUDA; not the process link's link_memory), TLS.
    ("dataplane.py", "dataplane/data_plane.py"),
    ("dataplane_on_demand.py", "dataplane/on_demand.py"),
    ("streams.py", "dataplane/streams.py"),
    ("shared_memory.py", "dataplane/system_shared_memory.py"),
    ("cuda_shared_memory.py", "dataplane/cuda_shared_memory.py"),
    ("tls.py", "dataplane/tls.py"),
    # The inferd command: its entry point, serve and its flags (options.py: the flag types
    # serve and plugins' inferd_add_options share), check, and the client commands.
    ("cli.py", "cli/main.py"),
    ("cli_serve.py", "cli/serve.py"),
    ("options.py", "cli/flags.py"),
    ("cli_app.py", "cli/app.py"),
    ("cli_catalog.py", "cli/catalog.py"),
    ("cli_connection.py", "cli/connection.py"),
    ("cli_inputs.py", "cli/inputs.py"),
    ("cli_load.py", "cli/load.py"),
    ("cli_render.py", "cli/render.py"),
    ("cli_commands.py", "cli/commands.py"),  # the plugins branch's
    ("check.py", "cli/check/walk.py"),
    ("check_command.py", "cli/check/command.py"),
    ("check_ensembles.py", "cli/check/ensembles.py"),
    ("check_report.py", "cli/check/report.py"),
]

# What stays at the top of kernel/ (the plugin contracts, the hooks, the settings) and the
# packages of the new tree (sdk/ is the plugin SDK's, made elsewhere).
TOP_LEVEL = {
    "__init__.py", "py.typed", "backend.py", "frontend.py", "hookspecs.py", "settings.py",
    "supervisor.py", "actors", "cli", "dataplane", "modelconfig", "observability", "runtime",
    "sdk",
}

# Old packages whose modules all moved, and where a reference to the package itself goes.
OLD_PACKAGES = {
    "scheduling": "actors/scheduler",
    "ensembles": "actors/scheduler/ensembles",
}

# Tests, relative to tests/kernel/: each moves beside its module's new place.
TEST_MOVES: list[tuple[str, str]] = [
    ("linked_routers.py", "runtime/linked_routers.py"),
    ("test_router.py", "runtime/test_router.py"),
    ("test_cancel.py", "runtime/test_cancel.py"),
    ("test_link_memory.py", "runtime/test_link_memory.py"),
    ("test_run_folder.py", "runtime/test_run_folder.py"),
    ("test_devices.py", "runtime/test_devices.py"),
    ("test_limits.py", "runtime/test_open_file_limit.py"),
    ("test_repository_actor.py", "actors/repository/test_actor.py"),
    ("test_repository.py", "actors/repository/test_folders.py"),
    ("test_catalog.py", "actors/repository/test_catalog.py"),
    ("test_remote_storage.py", "actors/repository/test_remote_storage.py"),
    ("test_control_actor.py", "actors/control/test_actor.py"),
    ("test_control_on_demand.py", "actors/control/test_on_demand.py"),
    ("test_control_budget.py", "actors/control/test_budget.py"),
    ("test_control_budget_rules.py", "actors/control/test_budget_rules.py"),
    ("test_control_state.py", "actors/control/test_desired_state_record.py"),
    ("test_state_log.py", "actors/control/test_lifecycle_log.py"),
    ("test_version_reuse.py", "actors/control/test_version_reuse.py"),
    ("test_overrides.py", "actors/control/test_file_overrides.py"),
    ("test_ensemble_dependencies.py", "actors/control/test_ensemble_dependencies.py"),
    ("scheduler_stand_ins.py", "actors/scheduler/scheduler_stand_ins.py"),
    ("test_scheduler_actor.py", "actors/scheduler/test_actor.py"),
    ("test_scheduling.py", "actors/scheduler/test_scheduling.py"),
    ("test_batcher.py", "actors/scheduler/test_batcher.py"),
    ("test_queue_policy.py", "actors/scheduler/test_queue_policy.py"),
    ("test_response_order.py", "actors/scheduler/test_response_order.py"),
    ("test_sequence_batcher.py", "actors/scheduler/test_sequence_batcher.py"),
    ("test_request_cancellation.py", "actors/scheduler/test_request_cancellation.py"),
    ("test_request_validation.py", "actors/scheduler/test_request_validation.py"),
    ("test_classification.py", "actors/scheduler/test_classification.py"),
    ("test_response_cache.py", "actors/scheduler/test_response_cache.py"),
    ("test_cache_key.py", "actors/scheduler/test_cache_key.py"),
    ("test_cuda_windows.py", "actors/scheduler/test_cuda_windows.py"),
    ("test_ensemble.py", "actors/scheduler/ensembles/test_planning.py"),
    ("test_ensemble_runner.py", "actors/scheduler/ensembles/test_running.py"),
    ("test_executor_actor.py", "actors/executor/test_actor.py"),
    ("test_instance_slot.py", "actors/executor/test_instance_slot.py"),
    ("test_execution_env.py", "actors/executor/test_execution_env.py"),
    ("test_load_priority.py", "actors/executor/test_load_priority.py"),
    ("test_executor_pool_actor.py", "actors/executor_pool/test_actor.py"),
    ("test_placement.py", "actors/executor_pool/test_placement.py"),
    ("test_modelconfig.py", "modelconfig/test_reading.py"),
    ("test_config_support.py", "modelconfig/test_support.py"),
    ("test_metrics_config.py", "observability/test_metrics_config.py"),
    ("test_statistics.py", "observability/test_statistics.py"),
    ("test_latency_summary.py", "observability/test_latency_summary.py"),
    ("test_process_metrics.py", "observability/test_process_metrics.py"),
    ("test_memory_meter.py", "observability/test_memory_meter.py"),
    ("test_gpu_metrics.py", "observability/test_gpu_metrics.py"),
    ("test_logs.py", "observability/test_logs.py"),
    ("test_log_format.py", "observability/test_log_format.py"),
    ("test_request_log.py", "observability/test_request_log.py"),
    ("test_tracing.py", "observability/test_tracing.py"),
    ("test_shared_memory.py", "dataplane/test_system_shared_memory.py"),
    ("test_cuda_shared_memory.py", "dataplane/test_cuda_shared_memory.py"),
    ("test_cli_inputs.py", "cli/test_inputs.py"),
    ("test_cli_serve.py", "cli/test_serve.py"),
    ("test_options.py", "cli/test_flags.py"),
    ("test_check.py", "cli/check/test_check.py"),
]
# Tests that stay at the top of tests/kernel/ (what they test stays at the top of kernel/).
TESTS_STAYING = {"conftest.py", "test_hookspecs.py", "test_plugin_registries.py"}

# Files the rewrite leaves alone: they name kernel modules as test data, not as references.
LEFT_ALONE = {"tools/restructure.py", "tests/plugins/test_sdk_boundary.py"}

# The docstring of each new package's __init__.py (the package, relative to kernel/).
PACKAGE_DOCS = {
    "runtime": """The runtime core every actor runs on: the actor base class and the actors'
addresses, the router (asks, tells, replies in one process or across them), the process link
and its transports (the loop-driven ZeroMQ socket, link memory for large tensors), the run
folder, the plugin registry and the plugin manager, the GPUs the server sees, and the
open-file limit.""",
    "actors": """The kernel's actors, one package each: repository, control, scheduler,
executor pool and executor; each package holds its actor (``actor.py``) and the helpers only
that actor uses.""",
    "actors/repository": """The repository actor (``actor``) and what it reads: the model
folders and their layout rules (``folders``), their fingerprints, remote roots mirrored into a
local cache (``mirror``, ``remote_roots``, ``remote_objects``, ``remote_storage``), and each
model's catalog metadata (``catalog``, ``catalog_listing``).""",
    "actors/control": """The control actor (``actor``): the model lifecycle, the control modes
and the repository API, with the objects it owns and calls (``versions``, ``unload``,
``poll``, ``recovery``, ``views``, ``ensembles``), the status it keeps of every model
(``model_status``, logged by ``lifecycle_log``), and the desired state of
``--model-control-state`` (``desired_state``: what it means to a replica;
``desired_state_record``: the record and its stores).""",
    "actors/scheduler": """The scheduler actor (``actor``, with its batch I/O in ``dispatch``)
and its sans-IO parts: what it keeps per request, instance and served version, and the queue
logic over them (admission, batch formation, hand-off to instances, in-flight accounting,
results back to requests). Nothing but ``actor`` and ``dispatch`` sends a message or starts a
task: the actor supplies the I/O as callbacks and timers, so unit tests drive the rest
directly, without sockets or an event loop.

- ``requests``: a queued request (``Queued``) and an instance the scheduler may use (``Slot``);
- ``progress``: one wakeup for whoever waits for queues to empty (retire, reload, drain);
- ``version``: one served version: its queue, its batching and its instances (``Version``);
- ``queue_policy``: a version's queue under Triton's queue policies (``QueuePolicy``,
  ``PriorityQueue``): priority levels, timeouts, REJECT and DELAY, size limits;
- ``batcher``: the dynamic batching policy, which queued requests run together and when
  (``DynamicBatcher``);
- ``sequence_batcher``: a stateful model's sequences bound to instance slots, direct or
  oldest (``SequenceBatcher``), over the ``SequencePlan`` read from its config at load
  (``inferd.kernel.modelconfig.sequence_plan``);
- ``response_order``: ``preserve_ordering``, responses leaving in queue order (``ResponseOrder``);
- ``decoupled``: the open streams of decoupled models' requests, by token;
- ``routing``: which version a request goes to (``RoutingTable``);
- ``samples``: a version's Prometheus samples;
- ``request_validation``, ``classification``: a request checked against its model, and an
  output answered as its top classes;
- ``response_cache``, ``cache_key``, ``cache_config``: the response cache;
- ``cuda_windows``: which of a request's CUDA shared memory stays on the device;
- ``ensembles``: what the scheduler keeps of a served ensemble and how it runs one request.""",
    "actors/scheduler/ensembles": """Ensembles (SPEC 4) as the scheduler serves them.

``planning`` turns an ensemble config into the order its steps may run in (pure; control and
``inferd check`` use it too); ``served`` and ``pinning`` are what the scheduler keeps of a
served ensemble and the versions one request runs on; ``running`` runs one request's dataflow
through the composing models. Control's part (loading, serving, unloading an ensemble, and
which ensembles use which models) is ``inferd.kernel.actors.control.ensembles`` and
``inferd.kernel.actors.control.ensemble_dependencies``.""",
    "actors/executor": """The executor actor (``actor``) and its process's entry point
(``main``): a model version's instances (``instance_slot``), warm-up, the python models'
execution environments, the batch skeleton array-based backends share (``batched_instance``),
a framework's per-process thread pools, the low-priority threads loads run on, and the clients'
CUDA regions opened in its process (``device_memory``).""",
    "actors/executor_pool": """The executor pool actor (``actor``): which executor processes
exist (``processes``: starting, watching, restarting and stopping each) and which part of a
load goes to which one (``placement``).""",
    "modelconfig": """Triton's ``ModelConfig``: reading it (``reading``: parse, fill in
defaults, print), its rules (``validation``), completing it from a model file
(``completion``), what inferd honours of it (``support``), and its ``sequence_batching``
section (``sequence_plan``). No actor: what a load, ``inferd check`` and the backends call.""",
    "observability": """What the server tells about itself: metrics and their settings,
per-version statistics and latency summaries, the machine's and the GPUs' figures, logs (the
set-up, the line layouts, the context a line knows, the failed-request line), and request
tracing (its settings and where ended traces go).""",
    "dataplane": """The protocol-agnostic data plane every frontend adapts (``data_plane``),
and what frontends share: the response streams of a request, the KServe shared-memory
extension (``system_shared_memory`` and ``cuda_shared_memory``: client regions, not the
process link's ``link_memory``), and TLS.""",
    "cli": """The ``inferd`` command: its entry point (``main``), ``serve`` and its flag types
(``serve``, ``flags``), ``check``, and the typer app of the client commands (``app``).""",
    "cli/check": """``inferd check``: what serving a repository would make of each model,
found without serving (``walk``), its ensemble checks, its report and the command's output.""",
}

# What a package's docstring says of a module only when that module is in the package (a
# sentence, or a list item where it starts with "- ").
OPTIONAL_DOCS = {
    "actors/repository": [("agents.py", "A load runs the repository agents its config lists "
                                        "(``agents``) on the model's files first.")],
    "cli": [("commands.py", "Plugins add client commands through the registry of ``commands``.")],
}

# Old docstrings of packages that stay, replaced when still as they were.
REPLACED_DOCS = {
    "actors": '"""The kernel\'s actors, one module each: repository, control, scheduler, '
              'executor pool and\nexecutor."""\n',
}

TEXT_SUFFIXES_SKIPPED = {".onnx", ".npy", ".pt", ".pt2", ".so", ".png", ".jpg", ".gz", ".tar",
                         ".tgz", ".whl", ".plan", ".bin", ".pb", ".zip", ".savedmodel"}


# ---------------------------------------------------------------------------------------------


def git(*args: str, capture: bool = False) -> str:
    result = subprocess.run(["git", *args], check=True, text=True,
                            stdout=subprocess.PIPE if capture else None)
    return result.stdout if capture else ""


def dotted(path: str) -> str:
    """``kernel/a/b.py`` (or the folder ``kernel/a/b``) -> ``inferd.kernel.a.b``."""
    return "inferd." + path.removesuffix(".py").replace("/", ".")


def python_lines(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*.py"):
        if "__pycache__" not in path.parts:
            total += len(path.read_text(encoding="utf-8", errors="replace").splitlines())
    return total


def summary(root: Path) -> tuple[list[str], int, int]:
    kernel = root / "kernel"
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in kernel.iterdir()
                     if p.name != "__pycache__" and not p.name.endswith(".so"))
    return entries, python_lines(kernel), python_lines(root / "plugins")


class Plan:
    """What this run moves, and what it knows of the tree to decide each reference."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module_map = {dotted(f"kernel/{old}"): dotted(f"kernel/{new}") for old, new in MOVES}
        self.package_map = {dotted(f"kernel/{old}"): dotted(f"kernel/{new}")
                            for old, new in OLD_PACKAGES.items()}
        self.file_map = {f"kernel/{old}": f"kernel/{new}" for old, new in MOVES}
        self.folder_map = {f"kernel/{old}": f"kernel/{new}" for old, new in OLD_PACKAGES.items()}
        self.test_map = {f"tests/kernel/{old}": f"tests/kernel/{new}" for old, new in TEST_MOVES}
        self.test_module_map = {dotted_test(old): dotted_test(new) for old, new in
                                self.test_map.items()}
        self.moved_now: set[str] = set()  # old dotted names and old paths moved by this run
        by_stem: dict[str, list[str]] = {}
        for old in self.file_map:
            by_stem.setdefault(Path(old).stem, []).append(old)
        self.old_by_stem = {stem: olds[0] for stem, olds in by_stem.items() if len(olds) == 1}
        self.stems: set[str] = set()  # the file names of the tree after the moves
        clash = set(self.module_map.values()) & set(self.module_map)
        if clash:
            sys.exit(f"restructure: a new name is also an old one: {sorted(clash)}")

    # -- where names and paths are in the tree as it is now

    def _module_place(self, name: str) -> tuple[bool, bool]:
        """(is a module file, is a package) for a dotted ``inferd.kernel...`` name."""
        relative = Path(*name.split(".")[1:])
        return ((self.root / relative.with_suffix(".py")).is_file(),
                (self.root / relative / "__init__.py").is_file())

    def _has_child(self, package: str, child: str) -> bool:
        folder = self.root / Path(*package.split(".")[1:])
        return (folder / f"{child}.py").is_file() or (folder / child / "__init__.py").is_file()

    def _rewrites(self, old: str, rest: list[str], is_package: bool) -> bool:
        if old in self.moved_now:
            return True
        module, package = self._module_place(old)
        if is_package:
            return not package
        if module:
            return False  # not moved (its new place was taken): leave references to it
        if package:
            # The old module's name is now a package: a reference to a name that package does
            # not hold is a stale reference to the old module's contents.
            return bool(rest) and not self._has_child(old, rest[0])
        return True

    def rewrite_dotted(self, name: str) -> str:
        parts = name.split(".")
        for cut in range(len(parts), 2, -1):
            old = ".".join(parts[:cut])
            is_package = old in self.package_map and old not in self.module_map
            new = self.module_map.get(old) or self.package_map.get(old)
            if new is None:
                continue
            if self._rewrites(old, parts[cut:], is_package):
                return ".".join([new, *parts[cut:]])
            return name
        return name

    def rewrite_path(self, path: str) -> str:
        trailing = "/" if path.endswith("/") else ""
        bare = path.rstrip("/")
        if bare.startswith("tests/"):
            new = self.test_map.get(bare)
            if new and (bare in self.moved_now or not (self.root / bare).exists()):
                return new + trailing
            return path
        if bare.endswith(".py"):
            new = self.file_map.get(bare)
            if new and (bare in self.moved_now or not (self.root / bare).exists()):
                return new + trailing
            return path
        new = self.folder_map.get(bare)
        if new and not (self.root / bare / "__init__.py").exists():
            return new + trailing
        return path

    def rewrite_bare(self, stem: str, py: bool, where: str) -> str | None:
        """A moved module named by its file name alone: its new name, or None to leave it.
        Only a name no file has any more, that one module of the mapping had, and that reads
        as a module's (it has an underscore, or ``.py``), so a word such as ``repository``
        stays."""
        if not (py or "_" in stem) or stem in self.stems:
            return None
        old = self.old_by_stem.get(stem)
        if old is None:
            return None
        new = self.file_map[old]
        if where.endswith(".py"):
            if Path(where).parent == Path(new).parent:
                return Path(new).name if py else Path(new).stem
            return new if py else dotted(new)
        return new

    def rewrite_test_module(self, name: str) -> str:
        parts = name.split(".")
        for cut in range(len(parts), 2, -1):
            new = self.test_module_map.get(".".join(parts[:cut]))
            if new is not None:
                path = "/".join(parts[:cut]) + ".py"
                if path in self.moved_now or not (self.root / path).exists():
                    return ".".join([new, *parts[cut:]])
                return name
        return name


def stems(root: Path) -> set[str]:
    return {path.stem for top in ("kernel", "plugins", "protocols")
            for path in (root / top).rglob("*.py") if "__pycache__" not in path.parts}


def dotted_test(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


# ---------------------------------------------------------------------------------------------
# Rewriting one file's text.

_FROM_IMPORT = (r"^[ \t]*from[ \t]+(?:inferd|tests)\.kernel(?:\.\w+)*[ \t]+import[ \t]+"
                r"(?:\([^)]*\)|[^\n]*)")
_DOTTED = r"(?<![\w.])inferd\.kernel(?:\.\w+)+"
_TEST_DOTTED = r"(?<![\w.])tests\.kernel(?:\.\w+)+"
_PATH = r"(?<![\w.-])(?:tests/)?kernel(?:/\w+)+(?:\.py)?/?"
# A module named by its file name alone, in backticks: ``control_versions`` or `server.py`.
_BARE = r"(?P<tick>``|`)(?P<stem>[a-z]\w*)(?P<py>\.py)?(?P=tick)"
REFERENCE = re.compile(
    f"(?P<from>{_FROM_IMPORT})|(?P<dotted>{_DOTTED})|(?P<test>{_TEST_DOTTED})|(?P<path>{_PATH})"
    f"|(?P<bare>{_BARE})",
    re.MULTILINE)
_FROM_PARTS = re.compile(
    r"^(?P<indent>[ \t]*)from[ \t]+(?P<module>[\w.]+)[ \t]+import[ \t]+(?P<names>.*)$", re.DOTALL)


def _format_import(indent: str, module: str, names: list[str], multiline: bool,
                   comment: str) -> str:
    """One ``from module import names`` statement: on one line where it fits (and was not
    a multi-line statement of several names), else parenthesized, a name a line."""
    one_line = f"{indent}from {module} import {', '.join(names)}{comment}"
    if len(one_line) <= LINE_LENGTH and not (multiline and len(names) > 1):
        return one_line
    inner = "".join(f"{indent}    {name},\n" for name in names)
    return f"{indent}from {module} import ({comment}\n{inner}{indent})"


def rewrite_from_import(plan: Plan, statement: str) -> str:
    match = _FROM_PARTS.match(statement)
    if match is None:
        return statement
    indent, module, names_text = match["indent"], match["module"], match["names"]
    comment = ""
    parenthesized = names_text.startswith("(")
    if parenthesized:
        body = names_text[1:names_text.rindex(")")]
        if "#" in body or names_text[names_text.rindex(")") + 1:].strip():
            return REFERENCE_DOTTED.sub(lambda m: rewrite_dotted_or_test(plan, m[0]), statement)
    else:
        body, hash_, after = names_text.partition("#")
        if hash_:
            comment = "  #" + after.rstrip("\n")
        if body.rstrip().endswith("\\"):
            return REFERENCE_DOTTED.sub(lambda m: rewrite_dotted_or_test(plan, m[0]), statement)
    rewrite = plan.rewrite_test_module if module.startswith("tests.") else plan.rewrite_dotted
    entries = [entry.split() for entry in body.replace("\n", " ").split(",") if entry.strip()]
    groups: dict[str, list[str]] = {}
    changed = False
    for entry in entries:
        name, alias = entry[0], (entry[2] if len(entry) == 3 and entry[1] == "as" else None)
        full = f"{module}.{name}"
        new = rewrite(full)
        if new == full:
            target, leaf = module, name
        else:
            changed = True
            target, _, leaf = new.rpartition(".")
        # An alias stays, even ``X as X`` (an explicit re-export); a renamed module is bound
        # to its old name, so the code using it does not change.
        bound = alias or name
        plain = leaf == bound and alias != name
        groups.setdefault(target, []).append(leaf if plain else f"{leaf} as {bound}")
    if not changed:
        return statement
    multiline = "\n" in names_text
    lines = [_format_import(indent, target, names, multiline, comment if i == 0 else "")
             for i, (target, names) in enumerate(groups.items())]
    return "\n".join(lines)


REFERENCE_DOTTED = re.compile(f"{_DOTTED}|{_TEST_DOTTED}")


def rewrite_dotted_or_test(plan: Plan, name: str) -> str:
    if name.startswith("tests."):
        return plan.rewrite_test_module(name)
    return plan.rewrite_dotted(name)


def rewrite_text(plan: Plan, text: str, where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match["from"] is not None:
            return rewrite_from_import(plan, match["from"])
        if match["dotted"] is not None:
            return plan.rewrite_dotted(match["dotted"])
        if match["test"] is not None:
            return plan.rewrite_test_module(match["test"])
        if match["path"] is not None:
            return plan.rewrite_path(match["path"])
        new = plan.rewrite_bare(match["stem"], bool(match["py"]), where)
        return match[0] if new is None else f"{match['tick']}{new}{match['tick']}"

    return REFERENCE.sub(replace, text)


def _statement_end(lines: list[str], start: int) -> int:
    """The index after the import statement that starts at ``start``."""
    if lines[start].split("#")[0].rstrip().endswith("("):
        for index in range(start + 1, len(lines)):
            if lines[index].strip().startswith(")"):
                return index + 1
    return start + 1


def sort_imports(text: str) -> str:
    """Each run of consecutive top-level ``from inferd... import`` statements in the order of
    their modules, as the original tree had them (isort's order, by the old names)."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        if not re.match(r"from inferd\.[\w.]+ import ", lines[index]):
            out.append(lines[index])
            index += 1
            continue
        run: list[list[str]] = []
        while index < len(lines) and re.match(r"from inferd\.[\w.]+ import ", lines[index]):
            end = _statement_end(lines, index)
            run.append(lines[index:end])
            index = end
        run.sort(key=lambda statement: statement[0].split()[1].lower())
        for statement in run:
            out.extend(statement)
    return "\n".join(out)


_PARENTS = re.compile(r"(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)(\])")


def deepen(text: str, levels: int) -> str:
    """A test moved ``levels`` folders deeper: its ``Path(__file__).parents[n]`` follow."""
    return _PARENTS.sub(lambda m: f"{m[1]}{int(m[2]) + levels}{m[3]}", text)


# ---------------------------------------------------------------------------------------------
# Long lines the rewrite made: docstrings and comments re-flowed, the rest reported.


def _docstring_lines(text: str) -> dict[int, int]:
    """Line number -> the first line of the docstring it is in, for every docstring."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    lines: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                first, last = body[0].lineno, body[0].end_lineno or body[0].lineno
                lines.update((number, first) for number in range(first, last + 1))
    return lines


# A line that starts a paragraph of its own: a list item, a directive, a closing quote, or
# an indented (literal or continued) line.
_OWN_PARAGRAPH = re.compile(r"^(?:$|[-*] |\d+\. |\.\. |:|\"\"\"| )")
QUOTES = ('"' * 3, "'" * 3)


def _trailing_comments(text: str) -> dict[int, int]:
    """Line number -> the column of the comment that follows code on that line."""
    found: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and token.line[: token.start[1]].strip():
                found[token.start[0]] = token.start[1]
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _wrap_one(lines: list[str], index: int, docstrings: dict[int, int],
              comments: dict[int, int]) -> bool:
    """Break ``lines[index]`` at its last space within the limit, moving the rest on to the
    next line of its paragraph (or a new line); a comment after code goes on a line of its own
    above it. False if it is code alone, a pragma, or cannot break."""
    line = lines[index]
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    number = index + 1
    if stripped.startswith("#"):
        marker = indent + ("# " if stripped.startswith("# ") else "#")
    elif number in docstrings:
        marker = indent
    elif number in comments:
        code, comment = line[: comments[number]].rstrip(), line[comments[number]:]
        if re.match(r"#\s*(type:|noqa|pragma|fmt:)", comment) or len(code) > LINE_LENGTH:
            return False
        lines[index: index + 1] = [indent + comment, code]
        return True
    else:
        return False
    floor = len(marker) + (3 if stripped.startswith(QUOTES) else 0)
    cut = line.rfind(" ", floor + 1, LINE_LENGTH + 1)
    if cut < 0:
        return False
    head, overflow = line[:cut].rstrip(), line[cut:].strip()
    if len(head) <= floor:
        return False
    lines[index] = head
    following = lines[index + 1] if index + 1 < len(lines) else None
    joins = False
    if following is not None and not head.endswith("::") and QUOTES[0] not in overflow:
        rest = following[len(marker):] if following.startswith(marker) else None
        if rest is not None and not _OWN_PARAGRAPH.match(rest):
            if marker.strip():  # a comment: the next line is one too, with the same marker
                joins = following.lstrip().startswith("#")
            else:  # a docstring line: the next one is in the same docstring
                joins = docstrings.get(number + 1) == docstrings.get(number)
    if joins and following is not None:
        lines[index + 1] = marker + overflow + " " + following[len(marker):]
    else:
        lines.insert(index + 1, marker + overflow)
    return True


def reflow(text: str, before: str, where: str, report: list[str]) -> str:
    """Wrap the lines of ``text`` longer than the limit that ``before`` did not have: a
    docstring's or a comment's words move on to the next line of the paragraph; a line of
    code is reported."""
    lines = text.split("\n")
    old_lines = {line for line in before.split("\n") if len(line) > LINE_LENGTH}
    while True:
        index = next((i for i, line in enumerate(lines)
                      if len(line) > LINE_LENGTH and line not in old_lines), None)
        if index is None:
            break
        text = "\n".join(lines)
        if not _wrap_one(lines, index, _docstring_lines(text), _trailing_comments(text)):
            old_lines.add(lines[index])  # left as it is, and reported
            report.append(f"{where}:{index + 1}: {len(lines[index])} > {LINE_LENGTH} characters")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# pyproject.toml and the Makefile.


def kernel_packages(root: Path) -> list[str]:
    found = {dotted(str(init.parent.relative_to(root)))
             for init in (root / "kernel").rglob("__init__.py") if "__pycache__" not in init.parts}
    return sorted(found)


def rewrite_packages(root: Path, text: str) -> str:
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if re.match(r"^packages\s*=\s*\[", line))
        end = next(i for i in range(start, len(lines)) if lines[i].strip() == "]")
    except StopIteration:
        return text
    kernel = [i for i in range(start + 1, end)
              if re.match(r'^\s*"inferd\.kernel(?:\.[\w.]+)?",\s*$', lines[i])]
    if not kernel:
        return text
    indent = re.match(r"^\s*", lines[kernel[0]])[0]  # type: ignore[index]
    wanted = [f'{indent}"{name}",' for name in kernel_packages(root)]
    body = [line for i, line in enumerate(lines[start + 1:end], start + 1) if i not in kernel]
    at = kernel[0] - start - 1
    body[at:at] = wanted
    return "\n".join([*lines[:start + 1], *body, *lines[end:]])


def rewrite_makefile(root: Path, text: str) -> str:
    deep = any(len(p.relative_to(root / "kernel").parts) >= 3
               for p in (root / "kernel").rglob("*.py"))
    if deep and "kernel/*/*.py" in text and "kernel/*/*/*.py" not in text:
        return text.replace("kernel/*/*.py", "kernel/*/*.py kernel/*/*/*.py", 1)
    return text


# ---------------------------------------------------------------------------------------------


def tracked_text_files(root: Path) -> Iterable[Path]:
    for name in git("ls-files", "-z", capture=True).split("\0"):
        if not name:
            continue
        path = root / name
        if path.suffix in TEXT_SUFFIXES_SKIPPED or not path.is_file() or path.is_symlink():
            continue
        if name in LEFT_ALONE:
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        yield path


def package_doc(root: Path, package: str) -> str:
    doc = PACKAGE_DOCS.get(package, f"The ``{package}`` package.")
    for module, text in OPTIONAL_DOCS.get(package, []):
        if (root / "kernel" / package / module).is_file():
            doc = doc.rstrip() + ("\n" if text.startswith("- ") else " ") + text
    return docstring(doc)


def docstring(text: str) -> str:
    """A package's ``__init__.py``: ``text`` as its docstring, each paragraph (and each list
    item) filled to the line limit."""
    quotes = '"' * 3
    blocks = [block.split("\n") for block in text.strip().split("\n\n")]
    filled: list[str] = []
    for number, block in enumerate(blocks):
        items: list[list[str]] = []
        for line in block:
            if line.startswith("- ") or not items or not block[0].startswith("- "):
                if items and not line.startswith("- ") and not block[0].startswith("- "):
                    items[-1].append(line)
                else:
                    items.append([line])
            else:
                items[-1].append(line.strip())
        lines: list[str] = []
        for index, item in enumerate(items):
            words = " ".join(part.strip() for part in item)
            first = number == 0 and index == 0
            last = number == len(blocks) - 1 and index == len(items) - 1
            bullet = words.startswith("- ")
            lines += textwrap.wrap(
                (quotes if first else "") + words + (quotes if last else ""),
                width=LINE_LENGTH, subsequent_indent="  " if bullet else "",
                break_long_words=False, break_on_hyphens=False)
        filled.append("\n".join(lines))
    return "\n\n".join(filled) + "\n"


def remove_build_outputs(old: Path) -> list[str]:
    """Compiled modules of a moved source would shadow nothing but mislead: remove them."""
    removed = []
    for extension in old.parent.glob(old.stem + ".*.so"):
        extension.unlink()
        removed.append(str(extension))
    return removed


def prune(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its parents up to ``stop`` while they hold only caches."""
    while folder != stop and folder.is_dir():
        for cache in folder.glob("__pycache__"):
            shutil.rmtree(cache)
        if any(folder.iterdir()):
            return
        folder.rmdir()
        folder = folder.parent


def tree_lines(root: Path) -> list[str]:
    """kernel/ as a tree: each package with its modules, for the note of the change."""
    lines = []
    for folder in sorted([root / "kernel", *(p.parent for p in (root / "kernel").rglob(
            "__init__.py") if "__pycache__" not in p.parts)]):
        if folder == root / "kernel" and lines:
            continue
        modules = sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
        relative = folder.relative_to(root)
        lines.append(f"  {relative}/: {' '.join(modules)}")
    return sorted(set(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the moves, change nothing")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run on a tree with uncommitted changes to tracked files")
    args = parser.parse_args()

    root = Path.cwd()
    if not (root / "kernel" / "__init__.py").is_file() or not (root / "pyproject.toml").is_file():
        sys.exit("restructure: run it from the repository root (kernel/ and pyproject.toml)")
    if not args.allow_dirty and git("status", "--porcelain", "--untracked-files=no",
                                    capture=True).strip():
        sys.exit("restructure: the tree has uncommitted changes; commit them first "
                 "(or --allow-dirty)")

    before_entries, before_kernel, before_plugins = summary(root)
    plan = Plan(root)
    notes: list[str] = []

    # 1. Which moves this run makes.
    moves: list[tuple[str, str]] = []
    for old, new in [(f"kernel/{o}", f"kernel/{n}") for o, n in MOVES] + list(
            plan.test_map.items()):
        old_exists, new_exists = (root / old).is_file(), (root / new).is_file()
        if old_exists and new_exists:
            notes.append(f"left: {old} stays, {new} already exists")
        elif old_exists:
            moves.append((old, new))
        elif not new_exists:
            notes.append(f"skipped: {old} is not there")

    if args.dry_run:
        for old, new in moves:
            print(f"move {old} -> {new}")
        print("\n".join(notes))
        return 0

    # 2. New packages, then the moves.
    created: list[str] = []
    for old, new in moves:
        target = root / new
        target.parent.mkdir(parents=True, exist_ok=True)
        if new.startswith("kernel/"):
            folder = target.parent
            while folder != root / "kernel":
                init = folder / "__init__.py"
                if not init.exists():
                    package = str(folder.relative_to(root / "kernel"))
                    doc = PACKAGE_DOCS.get(package, f"The ``{package}`` package.")
                    init.write_text(docstring(doc), encoding="utf-8")
                    git("add", str(init.relative_to(root)))
                    created.append(str(init.relative_to(root)))
                folder = folder.parent
        git("mv", old, new)
        plan.moved_now.add(old)
        if old.startswith("kernel/"):
            plan.moved_now.add(dotted(old))
            for removed in remove_build_outputs(root / old):
                notes.append(f"removed the build output {removed} (rebuild: make setup)")
    for init_name in created:  # now that every module is in place
        package = str(Path(init_name).parent.relative_to("kernel"))
        (root / init_name).write_text(package_doc(root, package), encoding="utf-8")
    for package, doc in REPLACED_DOCS.items():
        init = root / "kernel" / package / "__init__.py"
        if init.is_file() and init.read_text(encoding="utf-8") == doc:
            init.write_text(docstring(PACKAGE_DOCS[package]), encoding="utf-8")

    # 3. Old packages with nothing left but their __init__.py.
    for old_package in OLD_PACKAGES:
        folder = root / "kernel" / old_package
        init = folder / "__init__.py"
        if not init.is_file():
            continue
        left = [p for p in folder.iterdir()
                if p.name not in ("__init__.py", "__pycache__") and not p.name.endswith(".so")]
        if not left:
            git("rm", "-q", str(init.relative_to(root)))
            for extension in folder.glob("*.so"):
                extension.unlink()
            plan.moved_now.add(dotted(f"kernel/{old_package}"))
            prune(folder, root / "kernel")
    for old, _ in moves:
        prune((root / old).parent, root)

    # 4. Every reference.
    rewritten: list[str] = []
    long_lines: list[str] = []
    moved_tests = {new: new.count("/") - old.count("/") for old, new in moves
                   if old.startswith("tests/")}
    plan.stems = stems(root)
    for path in tracked_text_files(root):
        relative = str(path.relative_to(root))
        if relative in created:
            continue  # written in the new tree's names already
        text = path.read_text(encoding="utf-8")
        new_text = rewrite_text(plan, text, relative)
        if path.suffix == ".py" and new_text != text:
            new_text = sort_imports(new_text)
        if moved_tests.get(relative):
            new_text = deepen(new_text, moved_tests[relative])
        if relative == "pyproject.toml":
            new_text = rewrite_packages(root, new_text)
        if relative == "Makefile":
            new_text = rewrite_makefile(root, new_text)
        if new_text != text and path.suffix == ".py":
            new_text = reflow(new_text, text, relative, long_lines)
        elif new_text != text and (path.suffix in (".toml", ".sh", ".cfg")
                                   or path.name == "Makefile" or relative.startswith(".ci/")):
            new_text = reflow(new_text, text, relative, [])  # its comments only
        if new_text != text:
            path.write_text(new_text, encoding="utf-8")
            rewritten.append(relative)

    # 5. What the mapping does not place.
    unplaced = []
    placed = ({f"kernel/{new}" for _, new in MOVES}
              | {f"kernel/{package}/__init__.py" for package in PACKAGE_DOCS})
    for path in sorted((root / "kernel").rglob("*")):
        relative = path.relative_to(root / "kernel")
        if "__pycache__" in relative.parts or path.suffix == ".so" or path.is_dir():
            continue
        top = relative.parts[0]
        if len(relative.parts) == 1:
            if top not in TOP_LEVEL:
                unplaced.append(f"kernel/{relative}")
        elif top != "sdk" and f"kernel/{relative}" not in placed:
            unplaced.append(f"kernel/{relative}")
    for path in sorted((root / "tests" / "kernel").glob("*.py")):
        if path.name not in TESTS_STAYING:
            unplaced.append(str(path.relative_to(root)))

    after_entries, after_kernel, after_plugins = summary(root)
    print(f"restructure: {len(moves)} files moved, {len(created)} packages created, "
          f"{len(rewritten)} files rewritten")
    for note in notes:
        print(note)
    for line in long_lines:
        print(f"long line, wrap it by hand: {line}")
    if unplaced:
        print("not placed: " + ", ".join(unplaced))
    print()
    print(f"before: kernel/ has {len(before_entries)} top-level entries; "
          f"{before_kernel} lines of Python in kernel/, {before_plugins} in plugins/")
    print("  " + " ".join(before_entries))
    print(f"after:  kernel/ has {len(after_entries)} top-level entries; "
          f"{after_kernel} lines of Python in kernel/, {after_plugins} in plugins/")
    print("  " + " ".join(after_entries))
    print("the tree:")
    print("\n".join(tree_lines(root)))
    if moves:
        print()
        print("next: .venv/bin/python -m pip install --no-deps --no-build-isolation -e . "
              "(entry points moved), make setup (the compiled modules moved)")
    elif rewritten:
        print("nothing moved: the tree was restructured already; the files above named old "
              "modules and now name their new places")
    else:
        print("nothing to do: the tree is restructured already")
    return 0


if __name__ == "__main__":
    sys.exit(main())
