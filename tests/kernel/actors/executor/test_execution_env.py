"""Which environment a python model asks for, and what is refused
(inferd.kernel.actors.executor.execution_env); serving from one is
tests/e2e/test_execution_env.py's."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from inferd.kernel.actors.executor import execution_env
from inferd.kernel.modelconfig.reading import parse_config_text
from inferd.protocols.errors import InvalidArgument


def config_with(path: str):  # type: ignore[no-untyped-def]
    return parse_config_text(
        f'parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{path}" }} }}', "c")


def fake_environment(folder: Path, version: str) -> Path:
    """A folder whose bin/python says it is Python ``version``."""
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    return folder


def test_the_model_directory_is_expanded_and_relative_paths_are_the_models(
        tmp_path: Path) -> None:
    model = tmp_path / "m"
    assert execution_env.requested(config_with("$$TRITON_MODEL_DIRECTORY/env.tgz"), model) == \
        model / "env.tgz"
    assert execution_env.requested(config_with("envs/e"), model) == model / "envs" / "e"
    assert execution_env.requested(config_with("/opt/e"), model) == Path("/opt/e")
    assert execution_env.requested(parse_config_text("", "c"), model) is None


def test_an_environment_of_another_python_is_refused(tmp_path: Path) -> None:
    other = fake_environment(tmp_path / "old", "3 8")
    with pytest.raises(InvalidArgument, match=r"runs Python 3\.8; this server runs "
                       rf"{sys.version_info.major}\.{sys.version_info.minor}"):
        execution_env.interpreter(other)
    same = fake_environment(tmp_path / "same",
                            f"{sys.version_info.major} {sys.version_info.minor}")
    assert execution_env.interpreter(same) == same / "bin" / "python"
    with pytest.raises(InvalidArgument, match="is neither a folder nor a tarball"):
        execution_env.interpreter(tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgument, match="holds no bin/python"):
        execution_env.interpreter(tmp_path / "empty")


def test_a_tarball_is_unpacked_once_and_a_hostile_one_is_refused(tmp_path: Path) -> None:
    source = fake_environment(tmp_path / "src", f"{sys.version_info.major} "
                              f"{sys.version_info.minor}")
    tarball = tmp_path / "env.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(source, arcname=".")
    cache = tmp_path / "cache"
    first = execution_env.interpreter(tarball, cache)
    assert first.parent.parent.parent == cache
    (first.parent.parent / "marker").touch()
    assert execution_env.interpreter(tarball, cache) == first  # reused, not unpacked again
    assert (first.parent.parent / "marker").exists()

    hostile = tmp_path / "hostile.tar"
    with tarfile.open(hostile, "w") as archive:
        escape = tarfile.TarInfo("../../outside")
        escape.size = 0
        archive.addfile(escape)
    with pytest.raises(InvalidArgument, match="cannot be unpacked"):
        execution_env.interpreter(hostile, cache)
    assert not (tmp_path / "outside").exists()
