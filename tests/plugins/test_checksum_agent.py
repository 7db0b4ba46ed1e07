"""The checksum repository agent (Triton's) and the agents' place in a load: driven through
``ModelRepository.resolve`` on a folder, no server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.runtime.plugin_manager import installed
from inferd.kernel.sdk.agents import AgentRegistry, AgentSpec
from inferd.protocols.errors import InvalidArgument

WEIGHTS = b"weights"
MD5 = hashlib.md5(WEIGHTS).hexdigest()


def model(root: Path, name: str, *parameters: tuple[str, str], agent: str = "checksum") -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "weights.bin").write_bytes(WEIGHTS)
    (folder / "labels.txt").write_text("a\n")
    listed = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in parameters)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}" backend: "inferd_testing" max_batch_size: 0 '
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }] '
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }] '
        f'model_repository_agents {{ agents [{{ name: "{agent}" {listed} }}] }}')


def resolve(root: Path, name: str, agents: AgentRegistry | None = None) -> str:
    """``name`` resolved with ``agents``, by default the installed plugins' (checksum)."""
    plugins = installed()
    repository = ModelRepository([root], plugins.backends(), gpu_ids=(),
                                 agents=plugins.agents() if agents is None else agents)
    return repository.resolve(name).path


def test_matching_digests_load(tmp_path: Path) -> None:
    labels = hashlib.md5(b"a\n").hexdigest()
    model(tmp_path, "m", ("MD5:1/weights.bin", MD5), ("md5:labels.txt", labels))
    assert resolve(tmp_path, "m") == str(tmp_path / "m")


@pytest.mark.parametrize(("parameter", "message"), [
    (("MD5:1/weights.bin", "0" * 32),
     f"Mismatched MD5 hash for file 1/weights.bin, expect: {'0' * 32}, got: {MD5}"),
    (("MD5:1/weights.bin", MD5.upper()), "Mismatched MD5 hash"),  # compared as written
    (("1/weights.bin", MD5), "failed to parse key: 1/weights.bin"),
    (("SHA1:1/weights.bin", MD5), "Unsupported checksum algorithm: SHA1"),
    (("MD5:1/missing.bin", MD5), "failed to open text file for read 1/missing.bin: "),
    (("MD5:../../etc/passwd", MD5), "leads outside the model's folder"),
])
def test_a_wrong_or_unreadable_file_refuses_the_load(
        tmp_path: Path, parameter: tuple[str, str], message: str) -> None:
    model(tmp_path, "m", parameter)
    with pytest.raises(InvalidArgument) as refused:
        resolve(tmp_path, "m")
    assert refused.value.message.startswith("model 'm': repository agent 'checksum': ")
    assert message in refused.value.message


def test_an_agent_no_plugin_gives_is_named_with_those_there_are(tmp_path: Path) -> None:
    model(tmp_path, "m", agent="decrypt")
    with pytest.raises(InvalidArgument, match=r"repository agent 'decrypt' is not installed "
                                              r"\(available: checksum\)"):
        resolve(tmp_path, "m")


def replace_folder(model: object) -> str:
    """An agent that has the model load from a folder of its own."""
    from inferd.kernel.sdk.agents import AgentModel

    assert isinstance(model, AgentModel)
    assert model.versions == (1,) and model.parameters == {"to": "elsewhere"}
    return str(model.folder.parent / model.parameters["to"])


def test_an_agent_may_give_another_folder_to_load(tmp_path: Path) -> None:
    model(tmp_path / "repository", "m", ("to", "elsewhere"), agent="mover")
    (tmp_path / "repository" / "elsewhere").mkdir()
    agents = AgentRegistry()
    agents.add(AgentSpec("mover", f"{__name__}:replace_folder"))
    assert resolve(tmp_path / "repository", "m", agents) == \
        str(tmp_path / "repository" / "elsewhere")
