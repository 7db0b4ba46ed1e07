"""docs/architecture.md's "The source tree" section, generated from the tree itself.

Every Python package under ``kernel/``, ``plugins/``, ``protocols/`` and ``bench/`` (a folder
with ``__init__.py``): first an overview (each package and its modules), then one table per
package giving each module's first docstring line and the package's own docstring paragraph.
``make architecture`` rewrites the section; tests/test_docs.py fails while it is stale, so a
module added, moved or re-described shows in the page with the change that made it.

Run as ``python docs/source_tree.py`` (rewrite) or ``python docs/source_tree.py --check``.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
HEADING = "## The source tree"
TOPS = ("kernel", "plugins", "protocols", "bench")
NAME_COLUMN = 26  # where the overview's module names start
WIDTH = 100
LONGEST_LINE = 110  # a module's line in a table, cut at a word with " …" beyond it

INTRODUCTION = """\
`kernel/` is the runtime core (`runtime/`: actors, router, process links, the plugin manager),
one package per actor holding the helpers only that actor uses, and the cross-cutting packages:
model-config reading and rules (`modelconfig/`), metrics, statistics, logs and tracing
(`observability/`), the protocol-agnostic data plane (`dataplane/`), the command line (`cli/`) and the plugin SDK (`sdk/`, the one package a
plugin imports). Every feature that can be swapped, and every optional feature (models on demand and the
memory budget, the control-state record, client shared memory, the response cache, tracing),
is a plugin under `plugins/`; `protocols/` holds what every process shares without the kernel
(messages, codecs, errors), one subpackage per wire: `http2/`, `kserve_http/`, `kserve_grpc/`
and `wire/` (the kernel's own between processes);
`bench/` the measurements. A one-off script made the kernel's layout from a flat one (83
entries at the top of `kernel/`, then 14) and rewrote every reference: it was added in
2054dd9, ran in 9eddbf6 and again in 86cf126, and was removed once done.

This section is generated (`make architecture`, `docs/source_tree.py`); each module's line
below is the first line of its own docstring."""


def packages() -> list[Path]:
    """Every package folder under the tops, in tree order."""
    found = []
    for top in TOPS:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            folder = init.parent
            relative = folder.relative_to(ROOT)
            if any(part.startswith(".") or part in ("build", "__pycache__")
                   for part in relative.parts):
                continue
            found.append(folder)
    return sorted(found, key=lambda folder: folder.relative_to(ROOT).parts)


def modules(package: Path) -> list[Path]:
    return sorted(path for path in package.glob("*.py") if path.name != "__init__.py")


def docstring(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:
        return ""
    return (ast.get_docstring(tree) or "").strip()


def first_line(path: Path) -> str:
    line = docstring(path).split("\n", 1)[0].strip()
    if len(line) <= LONGEST_LINE:
        return line
    return line[:LONGEST_LINE].rsplit(" ", 1)[0] + " …"


def first_paragraph(path: Path) -> str:
    return " ".join(docstring(path).split("\n\n", 1)[0].split())


def overview() -> str:
    lines = []
    for package in packages():
        relative = package.relative_to(ROOT)
        label = "    " * (len(relative.parts) - 1) + f"{relative.parts[-1]}/"
        names = " ".join(path.stem for path in modules(package))
        wrapped = textwrap.wrap(names, WIDTH - NAME_COLUMN) or [""]
        lines.append(f"{label:<{NAME_COLUMN}}{wrapped[0]}".rstrip())
        lines += [" " * NAME_COLUMN + more for more in wrapped[1:]]
    return "\n".join(lines)


def tables() -> str:
    parts = []
    for package in packages():
        relative = package.relative_to(ROOT).as_posix()
        parts.append(f"### `{relative}/`")
        about = first_paragraph(package / "__init__.py")
        if about:
            parts.append(about)
        rows = [f"| `{path.stem}` | {first_line(path).replace('|', '∣')} |"
                for path in modules(package)]
        if rows:
            parts.append("\n".join(["| module | what it holds |", "|---|---|", *rows]))
    return "\n\n".join(parts)


def section() -> str:
    return f"{HEADING}\n\n{INTRODUCTION}\n\n```\n{overview()}\n```\n\n{tables()}\n"


def page_with_section(page: str) -> str:
    """``page`` with its source-tree section (up to the next ``## `` heading or the end)
    replaced by the generated one."""
    start = page.index(HEADING)
    end = page.find("\n## ", start + len(HEADING))
    rest = "" if end < 0 else page[end:]
    return page[:start] + section() + rest


def main(argv: list[str]) -> int:
    current = PAGE.read_text(encoding="utf-8")
    wanted = page_with_section(current)
    if "--check" in argv:
        if current != wanted:
            print("docs/architecture.md's source tree is stale: run make architecture")
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
