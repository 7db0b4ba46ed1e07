"""The ``inferd`` command's typer app: the kernel's own ``check`` and ``serve`` (mounted from
``inferd.kernel.cli.serve``'s argparse parser), and the client commands plugins register
(``inferd_register_commands``; the built-ins are ``inferd.plugins.cli``: models, catalog, load,
unload, infer, stats), mounted when ``run`` is called.

A plugin's command cannot take the name of a kernel command (``check``, ``serve``). Exit
codes are ``inferd.kernel.sdk.commands``': 0 ok, 1 the server said no, 2 usage, 3 cannot
connect.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Annotated

import typer

from inferd.kernel.sdk.commands import EXIT_CODES, OK, CommandRegistry, examples

app = typer.Typer(
    name="inferd",
    help="A Triton-compatible inference server, and a client for it.\n\n" + EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
KERNEL_COMMANDS = ("check", "serve")
_mounted: set[str] = set()


class CheckFormat(str, enum.Enum):
    text = "text"
    json = "json"


@app.command(epilog=examples("inferd check", "inferd check /models --format json",
                             "inferd check model_repository --show-config",
                             "inferd check s3://bucket/models"))
def check(
    repositories: Annotated[list[str] | None, typer.Argument(
        metavar="[REPO]...", help="model repository roots, folders or s3://, gs://, as://, az:// "
                                  "URLs (default ./model_repository)")] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", help="text for people, json for "
                                                              "tools")] = CheckFormat.text,
    show_config: Annotated[bool, typer.Option(
        "--show-config", help="print the config the server would use for each model")] = False,
    disable_auto_complete_config: Annotated[bool, typer.Option(
        "--disable-auto-complete-config",
        help="check as 'serve --disable-auto-complete-config' would load")] = False,
    model_config_name: Annotated[str, typer.Option(
        "--model-config-name", metavar="NAME", help="as serve's flag")] = "",
    backend_config: Annotated[list[str] | None, typer.Option(
        "--backend-config", metavar="[BACKEND,]SETTING=VALUE", help="as serve's flag")] = None,
    completion_timeout_secs: Annotated[float, typer.Option(
        "--completion-timeout-secs",
        help="time a python model's auto_complete_config may take")] = 30.0,
    repository_cache_dir: Annotated[str, typer.Option(
        "--repository-cache-dir", metavar="PATH",
        help="where a remote repository's models are fetched to (as serve's flag)")] = "",
) -> None:
    """Validate model repositories without serving them, with the code serve loads them
    with: configs, model files, ensembles, version policies, catalog metadata. Exit status
    0 no errors (warnings allowed), 1 errors, 2 usage."""
    from inferd.kernel.cli.check.command import run_check
    from inferd.kernel.runtime.plugin_manager import installed

    raise typer.Exit(run_check(
        repositories or [], installed(), output=fmt.value, show_config=show_config,
        auto_complete=not disable_auto_complete_config, config_name=model_config_name,
        backend_config=backend_config or [], completion_timeout_secs=completion_timeout_secs,
        cache_dir=repository_cache_dir or None))


@app.command(
    help="Run the server with tritonserver's flags (`inferd serve --help` lists them).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                      "help_option_names": []},
    add_help_option=False,
)
def serve(ctx: typer.Context) -> None:
    # inferd.kernel.cli.main.main normally dispatches serve before typer is imported; this entry
    # keeps it listed in --help and working when the app is invoked directly.
    from inferd.kernel.cli.serve import serve_main

    raise typer.Exit(serve_main(ctx.args))


def mount(commands: CommandRegistry) -> None:
    """Add every plugin command to the app, in registration order."""
    for spec in commands:
        if spec.name in KERNEL_COMMANDS:
            raise ValueError(f"command '{spec.name}' is the kernel's own: a plugin cannot "
                             "register it")
        if spec.name not in _mounted:
            app.command(name=spec.name, epilog=spec.epilog or None)(spec.load_function())
            _mounted.add(spec.name)


def run(argv: Sequence[str], commands: CommandRegistry | None = None) -> int:
    """Run the app on ``argv`` with the plugins' commands (``commands``, by default the
    installed plugins'); its exit code."""
    if commands is None:
        from inferd.kernel.runtime.plugin_manager import installed

        commands = installed().commands()
    mount(commands)
    try:
        app(args=list(argv), prog_name="inferd")
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return OK
