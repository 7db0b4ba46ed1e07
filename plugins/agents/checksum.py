"""The ``checksum`` repository agent plugin: Triton's checksum agent, which refuses to load a
model whose files do not have the digests its config expects.

Each parameter of the agent is one file: the key is ``<algorithm>:<path>``, the path relative
to the model's folder (``MD5:1/model.onnx``, ``MD5:labels.txt``), the value the expected
digest in lower-case hex::

    model_repository_agents {
      agents [{ name: "checksum", parameters { key: "MD5:1/model.onnx" value: "d41d8c..." } }]
    }

As in Triton: MD5 is the one algorithm (named in any case), the digest is compared exactly,
and the load fails with Triton's messages (``Mismatched MD5 hash for file <path>, expect:
<value>, got: <digest>``; ``failed to parse key``; ``Unsupported checksum algorithm``;
``failed to open text file for read``). Unlike Triton, a path that leads outside the model's
folder is refused. Reads files in chunks; changes nothing.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from inferd.kernel.sdk import AgentModel, AgentRefused, AgentRegistry, AgentSpec, hookimpl

NAME = "checksum"
ALGORITHMS = {"md5": ("MD5", hashlib.md5)}
CHUNK_BYTES = 1 << 20


def _digest(path: Path, algorithm: str) -> str:
    hashed = ALGORITHMS[algorithm][1]()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            hashed.update(chunk)
    return hashed.hexdigest()


def verify(model: AgentModel) -> None:
    """Refuse ``model`` unless every file its parameters name has the digest they give."""
    folder = model.folder.resolve()
    for key, expected in model.parameters.items():
        algorithm, colon, relative = key.partition(":")
        if not colon:
            raise AgentRefused(f"failed to parse key: {key}")
        if algorithm.lower() not in ALGORITHMS:
            raise AgentRefused(f"Unsupported checksum algorithm: {algorithm}")
        path = (folder / relative).resolve()
        if not path.is_relative_to(folder):
            raise AgentRefused(f"failed to open text file for read {relative}: the path leads "
                               f"outside the model's folder")
        try:
            digest = _digest(path, algorithm.lower())
        except OSError as error:
            raise AgentRefused(f"failed to open text file for read {relative}: "
                               f"{error.strerror or os.strerror(error.errno or 0)}") from None
        if digest != expected:
            raise AgentRefused(f"Mismatched {ALGORITHMS[algorithm.lower()][0]} hash for file "
                               f"{relative}, expect: {expected}, got: {digest}")


@hookimpl
def inferd_register_repository_agents(registry: AgentRegistry) -> None:
    registry.add(AgentSpec(NAME, "inferd.plugins.agents.checksum:verify"))
