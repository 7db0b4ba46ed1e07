"""File overrides of a load (SPEC 3.2): ``file:<version>/<path>`` contents written to a private
temporary model folder that replaces the repository folder for that load.

Owns the folder's creation and the rule that nothing leaves it. Every path is checked before
anything touches the disk (no absolute paths, no empty, ``.`` or ``..`` components, no
backslash, NUL or other control character, no component longer than a file name may be, no
file that is also another file's folder); the folder is a fresh ``mkdtemp`` (mode 0700) under
the server's run folder; each target is resolved and must stay inside it. A write that fails
anyway removes the folder before the error is raised, so a refused load leaves nothing
behind. The caller checks the model name first (``inferd.protocols.names``) and removes the
folder at unload.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.names import MAX_NAME_BYTES, quoted

PREFIX = "inferd-override-"
# The longest override path, in bytes (PATH_MAX less room for the folder it is written in).
MAX_PATH_BYTES = 2048


def _path_problem(relative: str) -> str:
    if not relative:
        return "it is empty"
    if not relative.isprintable():
        return "it contains a control or other non-printable character"
    if "\\" in relative:
        return "it contains a backslash"
    if relative.startswith("/"):
        return "it is absolute"
    if len(relative.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"it is longer than {MAX_PATH_BYTES} bytes"
    for part in relative.split("/"):
        if not part:
            return "it has an empty component"
        if part in (".", ".."):
            return f"it has a '{part}' component"
        if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            return f"a component is longer than {MAX_NAME_BYTES} bytes"
    return ""


def checked_paths(model: str, files: Mapping[str, bytes]) -> dict[tuple[str, ...], bytes]:
    """``files`` keyed by their paths' components, or ``InvalidArgument`` naming the first
    path that could leave the model folder or cannot be written."""
    checked: dict[tuple[str, ...], bytes] = {}
    for relative, content in files.items():
        problem = _path_problem(relative)
        if problem:
            raise InvalidArgument(
                f"failed to load '{model}': file override path {quoted(relative)} must stay "
                f"inside the model folder, as '<version>/<file>': {problem}"
            )
        checked[tuple(relative.split("/"))] = content
    folders = {parts[:end] for parts in checked for end in range(1, len(parts))}
    for parts in checked:
        if parts in folders:
            raise InvalidArgument(
                f"failed to load '{model}': file override path {quoted('/'.join(parts))} is "
                "both a file and the folder of another override file"
            )
    return checked


def write_override_files(model: str, files: Mapping[str, bytes], under: str | Path) -> str:
    """Write ``files`` (``"<version>/<path>" -> content``) into a new private folder under
    ``under``, laid out like a model folder, and return the model folder's path."""
    checked = checked_paths(model, files)
    Path(under).mkdir(mode=0o700, parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=PREFIX, dir=under)).resolve()
    root = private / model
    try:
        root.mkdir()
        for parts, content in checked.items():
            target = root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.parent.resolve().is_relative_to(root):
                raise InvalidArgument(
                    f"failed to load '{model}': file override path "
                    f"{quoted('/'.join(parts))} leaves the model folder"
                )
            # O_EXCL | O_NOFOLLOW: a name that already exists (or a link) is never written
            # through; the folder is new, so nothing should.
            descriptor = os.open(
                target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
            with os.fdopen(descriptor, "wb") as file:
                file.write(content)
    except InvalidArgument:
        shutil.rmtree(private, ignore_errors=True)
        raise
    except OSError as error:
        shutil.rmtree(private, ignore_errors=True)
        raise InvalidArgument(
            f"failed to load '{model}': file overrides could not be written: {error.strerror}"
        ) from None
    return str(root)


def remove_override_folder(folder: str) -> None:
    """Remove a folder made by ``write_override_files`` (nothing for an empty path)."""
    if folder and Path(folder).parent.name.startswith(PREFIX):
        shutil.rmtree(Path(folder).parent, ignore_errors=True)
