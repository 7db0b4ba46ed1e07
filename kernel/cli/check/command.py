"""The ``inferd check`` command's work: checking what its arguments name, printing the
``CheckReport``, and its exit code.

The command line itself (``inferd check [REPO ...] [--format text|json] [--show-config]`` and
the serve flags that change what a load does) is declared in ``inferd.kernel.cli.app``. This
module owns the human output (a table of model, versions, state and message, then one
``file:line:col: message`` line per problem), the JSON output, and the exit codes: 0 clean
(warnings allowed), 1 errors, 2 usage. The checking itself is ``inferd.kernel.cli.check.walk``, the
report it prints ``inferd.kernel.cli.check.report``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from inferd.kernel.actors.repository.remote_storage import check_url, is_remote_url
from inferd.kernel.cli.check.report import CheckReport, ModelReport, config_text
from inferd.kernel.cli.check.walk import check_repository
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.flags import backend_setting
from inferd.kernel.sdk.table import format_table
from inferd.protocols.errors import InferdError

EXIT_CLEAN, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2
DEFAULT_REPOSITORY = "model_repository"


def run_check(repositories: Sequence[str], plugins: Plugins, *, output: str = "text",
              show_config: bool = False, auto_complete: bool = True, config_name: str = "",
              backend_config: Sequence[str] = (), completion_timeout_secs: float = 30.0,
              cache_dir: str | None = None, out: TextIO | None = None) -> int:
    """Check ``repositories`` (default ``./model_repository``), print the report as ``output``
    (``text`` or ``json``) and return the exit code."""
    out = out if out is not None else sys.stdout
    roots = list(repositories) or [DEFAULT_REPOSITORY]
    for root in roots:
        if is_remote_url(root, plugins.storages()) or ("://" in root
                                                        and not os.path.exists(root)):
            try:
                check_url(root, plugins.storages())  # its form, and the package that reads it
            except InferdError as error:
                print(f"inferd check: {error.message}", file=sys.stderr)
                return EXIT_USAGE
        elif not os.path.isdir(root):
            problem = "is not a directory" if os.path.exists(root) else "does not exist"
            print(f"inferd check: {root}: the model repository {problem}", file=sys.stderr)
            return EXIT_USAGE
    try:
        settings = [backend_setting(text) for text in backend_config]
    except ValueError as error:
        print(f"inferd check: {error}", file=sys.stderr)
        return EXIT_USAGE
    report = check_repository(
        roots, plugins.backends(), auto_complete=auto_complete, config_name=config_name,
        options={"backend_config": tuple(settings),
                 "completion_timeout_secs": completion_timeout_secs},
        cache_dir=cache_dir, agents=plugins.agents(), storages=plugins.storages(),
    )
    if output == "json":
        json.dump(report.to_json(with_config=show_config), out, indent=2)
        out.write("\n")
    else:
        out.write(format_report(report, show_config=show_config))
    return EXIT_CLEAN if report.ok else EXIT_ERRORS


def format_report(report: CheckReport, *, show_config: bool = False) -> str:
    """The human form: the table, the problems with their places, then the configs."""
    rows = [_row(model) for model in report.models]
    lines = [format_table(("MODEL", "VERSIONS", "STATE", "MESSAGE"), rows)] if rows else \
        [f"no models in {', '.join(report.repositories)}"]
    details = []
    for finding in report.errors:
        details.append(f"error: {finding.located()}")
    for model in report.models:
        details += [f"error: {finding.located()}" for finding in model.errors]
        details += [f"warning: {finding.located()}" for finding in model.warnings]
    if details:
        lines += ["", *details]
    errors = len(report.errors) + sum(len(model.errors) for model in report.models)
    warnings = sum(len(model.warnings) for model in report.models)
    lines += ["", f"{len(report.models)} model(s), {errors} error(s), {warnings} warning(s)"]
    if show_config:
        for model in report.models:
            if model.config is None:
                continue
            what = ("the config the server would use" if model.ok
                    else "its normalized config (its load would fail)")
            lines += ["", f"# {model.name}: {what}", config_text(model.config).rstrip()]
    return "\n".join(lines) + "\n"


def _row(model: ModelReport) -> tuple[str, str, str, str]:
    loaded = ",".join(map(str, model.versions)) or "-"
    on_disk = ",".join(map(str, model.versions_on_disk))
    versions = loaded if not on_disk or on_disk == loaded else f"{loaded} (on disk {on_disk})"
    if model.errors:
        message = model.errors[0].message
        if len(model.errors) > 1:
            message += f" (+{len(model.errors) - 1} more)"
    elif model.warnings:
        message = f"{len(model.warnings)} warning(s)"
    else:
        what = model.backend or ("ensemble" if model.config is not None else "")
        message = f"{what}; auto-complete: {model.completion}" if what else ""
    return model.name, versions, "ok" if model.ok else "error", message
