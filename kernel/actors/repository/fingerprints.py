"""Fingerprints of local model folders: how the repository tells that a model, or one of its
versions, changed on disk.

Owns what a fingerprint hashes: each entry below a model folder by relative path, size and
mtime, leaving out hidden entries (editor swap files) and ``__pycache__`` folders, which are
not the model's content. A model's fingerprint (POLL's "did it change") covers its whole
folder; a version's (a reload's "may this version be kept") covers its own version folder
and the model folder's other files, the config files and the other version folders left out,
as Triton's per-version timestamps do. Reads folders; writes nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

CONFIG_FILENAME = "config.pbtxt"
CUSTOM_CONFIGS = "configs"  # --model-config-name's folder in a model folder


def folders_fingerprint(folders: Sequence[Path]) -> str:
    """A hash of the entries of ``folders``, which changes when a file or version folder is
    added, removed or rewritten."""
    digest = hashlib.sha256()
    for folder in folders:
        digest.update(os.fsencode(folder) + b"\0")
        for relative, info in sorted(_walk(folder)):
            digest.update(_line(relative, info).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def version_fingerprints(model_dir: Path, versions: Sequence[int]) -> dict[int, str]:
    """version -> a hash of what loading that version reads besides the config: its own
    version folder and the model folder's other entries."""
    shared: list[str] = []
    own: dict[str, list[str]] = {str(version): [] for version in versions}
    for relative, info in sorted(_walk(model_dir)):
        top = relative.split("/", 1)[0]
        line = _line(relative, info)
        if top.isdigit():
            if top in own:
                own[top].append(line)
        elif top not in (CONFIG_FILENAME, CUSTOM_CONFIGS):
            shared.append(line)
    found = {}
    for version in versions:
        digest = hashlib.sha256()
        for line in (*shared, "\0", *own[str(version)]):
            digest.update(line.encode("utf-8", "surrogateescape"))
        found[version] = digest.hexdigest()
    return found


def _line(relative: str, info: os.stat_result) -> str:
    """What is hashed of one entry (a folder by its name alone)."""
    if stat.S_ISDIR(info.st_mode):
        return f"{relative}\0dir\0{0}\n"
    return f"{relative}\0{info.st_size}\0{info.st_mtime_ns}\n"


def _walk(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(posix path relative to ``folder``, stat) of every entry below it but hidden ones and
    ``__pycache__`` folders, following symbolic links but visiting each real directory
    once."""
    visited: set[tuple[int, int]] = set()
    pending = [(folder, "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            info = directory.stat()
            entries = list(os.scandir(directory))
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in visited:
            continue
        visited.add((info.st_dev, info.st_ino))
        for entry in entries:
            # Hidden entries (editor swap files) and Python's bytecode caches (which loading a
            # python model writes next to its model.py) are not the model's content.
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            try:
                entry_info = entry.stat()
            except OSError:
                continue
            relative = prefix + entry.name
            yield relative, entry_info
            if stat.S_ISDIR(entry_info.st_mode):
                pending.append((Path(entry.path), relative + "/"))
