"""The README and docs/ stay what they promise: the README short, opening with the two
commands CI and people run; every relative link resolving to a file and a heading, both as
GitHub shows the Markdown and as MkDocs builds it; no table cell grown into a paragraph;
every page in the site's navigation; every hook of ``kernel/sdk/hooks.py`` on the
extending page. ``make docs`` (``mkdocs build --strict``) checks the site itself."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
README = ROOT / "README.md"
LONGEST_CELL = 120
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(path: Path) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def cells(row: str) -> list[str]:
    """A table row's cells: split at each ``|`` that is neither escaped nor in a code span."""
    found, cell, in_code, previous = [], "", False, ""
    for char in row.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code and previous != "\\":
            found.append(cell.strip())
            cell = ""
        else:
            cell += char
        previous = char
    return [*found, cell.strip()]


def headings(path: Path) -> list[str]:
    """The text of every heading, Markdown markup (code spans, links, emphasis) removed."""
    texts, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
            texts.append(text.replace("`", "").replace("*", ""))
    return texts


def mkdocs_slug(text: str) -> str:
    """Python-Markdown's toc slug, which MkDocs uses for heading ids."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    ascii_text = re.sub(r"[^\w\s-]", "", ascii_text).strip().lower()
    return re.sub(r"[-\s]+", "-", ascii_text)


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path, slug: Callable[[str], str]) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for text in headings(path):
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    links = []
    for line in path.read_text(encoding="utf-8").splitlines():
        links += [target for target in LINK.findall(line)
                  if not re.match(r"[a-z][a-z0-9+.-]*:", target)]
    return links


def test_the_readme_opens_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# inferd"
    assert lines[2] == "```sh"
    assert lines[3].startswith("make serve   # ")
    assert lines[4].startswith("make test    # ")
    assert lines[5] == "```"


def test_the_readme_stays_short() -> None:
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count < 300, f"README.md has {count} lines: move reference into docs/"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_every_relative_link_resolves_to_a_file_and_a_heading(path: Path) -> None:
    for link in relative_links(path):
        file_part, _, anchor = link.partition("#")
        target = (path.parent / file_part).resolve() if file_part else path
        assert target.exists(), f"{path.name}: {link} names no file"
        if path.parent == DOCS:
            assert target.is_relative_to(DOCS), (
                f"{path.name}: {link} leaves docs/, which the site cannot follow")
        if anchor:
            assert target.suffix == ".md", f"{path.name}: {link}: an anchor into a non-page"
            assert anchor in anchors(target, mkdocs_slug), (
                f"{path.name}: {link}: no such heading in the site")
            assert anchor in anchors(target, github_slug), (
                f"{path.name}: {link}: no such heading on GitHub")


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_no_table_cell_is_a_paragraph(path: Path) -> None:
    for line in prose(path):
        if not line.lstrip().startswith("|"):
            continue
        for cell in cells(line):
            assert len(cell) <= LONGEST_CELL, (
                f"{path.name}: a table cell of {len(cell)} characters, {cell[:60]!r}...: "
                "write it as a list or a section")


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w-]+\.md)\s*$", config, flags=re.MULTILINE))
    assert listed == {page.name for page in PAGES}


def test_every_hook_is_on_the_extending_page() -> None:
    hookspecs = (ROOT / "kernel" / "sdk" / "hooks.py").read_text(encoding="utf-8")
    hooks = re.findall(r"@hookspec[^\n]*\ndef (\w+)", hookspecs)
    assert hooks
    page = (DOCS / "extending.md").read_text(encoding="utf-8")
    missing = [hook for hook in hooks if f"`{hook}(" not in page]
    assert not missing, f"docs/extending.md does not list the hooks {missing}"


@pytest.mark.parametrize("path", PAGES, ids=lambda path: path.name)
def test_lists_read_the_same_on_github_and_in_the_site(path: Path) -> None:
    """Python-Markdown (MkDocs) nests a list only at four spaces and starts one only after a
    blank line; GitHub is laxer, so a page written for it alone renders flat in the site."""
    item = re.compile(r"\s*([-*]|\d+\.) ")
    lines = prose(path)
    for before, line in zip(["", *lines], lines, strict=False):
        assert not re.match(r" {1,3}([-*]|\d+\.) ", line), (
            f"{path.name}: {line.strip()[:60]!r}: indent a nested list by four spaces")
        if item.match(line) and not line.startswith(" "):
            assert not before.strip() or item.match(before) or before.startswith(" "), (
                f"{path.name}: {line.strip()[:60]!r}: a list starts after a blank line")


def test_the_architecture_pages_source_tree_is_current() -> None:
    """A module added, moved or re-described shows in docs/architecture.md with the change
    that made it: ``make architecture`` regenerates the section."""
    finished = subprocess.run([sys.executable, str(ROOT / "docs" / "source_tree.py"), "--check"],
                              capture_output=True, text=True, timeout=60, check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr


SDK_MODULES = ("inferd.kernel.sdk", *sorted(
    f"inferd.kernel.sdk.{path.stem}" for path in (ROOT / "kernel" / "sdk").glob("*.py")
    if not path.stem.startswith("_")))


@pytest.mark.parametrize("module", SDK_MODULES)
def test_the_sdk_page_names_everything_the_sdk_exports(module: str) -> None:
    """docs/sdk.md lists every name of every SDK module's ``__all__`` in that module's
    section, so a plugin author reads one page (the page is checked, not generated)."""
    page = (ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    heading = f"## `{module}`"
    assert heading in page, heading
    section = page.split(heading, 1)[1].split("\n## ", 1)[0]
    exported = importlib.import_module(module).__all__
    missing = [name for name in exported if f"`{name}`" not in section]
    assert not missing, f"docs/sdk.md's {module} section does not name {missing}"
