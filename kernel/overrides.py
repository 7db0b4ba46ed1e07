"""File overrides of a load (SPEC 3.2): ``file:<version>/<path>`` contents written to a private
temporary model folder that replaces the repository folder for that load.

Owns the folder's creation and the rule that no path escapes it (absolute paths, ``..``
components, and symlink tricks are refused before anything is written). Removing the folder
at unload is the caller's job.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from inferd.protocols.errors import InvalidArgument

PREFIX = "inferd-override-"


def _checked_relative(model: str, relative: str) -> PurePosixPath:
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or ".." in path.parts or "\\" in relative:
        raise InvalidArgument(
            f"failed to load '{model}': file override path '{relative}' must stay inside the"
            " model folder"
        )
    return path


def write_override_files(model: str, files: Mapping[str, bytes]) -> str:
    """Write ``files`` (``"<version>/<path>" -> content``) into a new folder laid out like a
    model folder, and return the folder's path."""
    checked = {_checked_relative(model, name): content for name, content in files.items()}
    root = Path(tempfile.mkdtemp(prefix=PREFIX)) / model
    root.mkdir()
    for relative, content in checked.items():
        target = root.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return str(root)


def remove_override_folder(folder: str) -> None:
    """Remove a folder made by ``write_override_files`` (nothing for an empty path)."""
    if folder and Path(folder).parent.name.startswith(PREFIX):
        shutil.rmtree(Path(folder).parent, ignore_errors=True)
