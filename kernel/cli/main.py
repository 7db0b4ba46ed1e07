"""The ``inferd`` command's entry point: ``serve`` goes to ``inferd.kernel.cli.serve``
(tritonserver's flags, argparse), every other command to the typer app of
``inferd.kernel.cli.app`` (``check``, and the client commands plugins register: models, load,
unload, infer, stats, ...).

It imports neither on its own: the server process (and the executor processes that re-import
the main module) never load typer or rich, and a client command never loads the server.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["serve"]:
        # Straight to argparse, so serve's flags, messages and exit codes stay exactly
        # tritonserver's (the app's own `serve` entry only lists it in --help).
        from inferd.kernel.cli.serve import serve_main

        served: int = serve_main(arguments[1:])
        return served
    from inferd.kernel.cli.app import run

    code: int = run(arguments)
    return code


if __name__ == "__main__":
    sys.exit(main())
