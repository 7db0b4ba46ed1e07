"""The repository actor driven through its messages, in one process: a router and the real
``RepositoryActor`` over model folders the test writes under ``tmp_path``, no sockets.

Each test sends the messages control and the frontends send (list, resolve with and without
overrides, fingerprint, describe, read catalogs, metrics) and checks the replies: several
roots, configs read and validated (errors naming file:line), version policies, fingerprints
that follow edits, ``--model-config-name`` and ``--disable-auto-complete-config`` reaching the
reader, and a kind it does not handle answered with an error.
``tests/kernel/actors/repository/test_folders.py`` covers the reading itself in depth; these pin
down what crosses the actor.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.repository.actor import RepositoryActor
from inferd.kernel.runtime.addresses import REPOSITORY
from inferd.kernel.runtime.router import Router
from inferd.kernel.sdk.backends import BackendRegistry
from inferd.plugins.backends.python import PYTHON_BACKEND
from inferd.plugins.backends.testing import TESTING_BACKEND
from inferd.protocols.errors import InvalidArgument, NotFound, Unsupported
from inferd.protocols.messages import (
    Catalog,
    Catalogs,
    DescribeModels,
    FingerprintModels,
    Fingerprints,
    ListModels,
    LoadRequest,
    Message,
    Metrics,
    MetricsRequest,
    ModelList,
    ReadCatalogs,
    ResolvedModel,
    ResolveModel,
)

pytestmark = pytest.mark.anyio

WAIT_SECS = 10.0  # bound of every exchange with the actor; a pass takes milliseconds
TWO_ROOTS = "model appears in two or more repositories"

ECHO = """
name: "{name}"
backend: "inferd_testing"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""


def backends() -> BackendRegistry:
    registry = BackendRegistry()
    registry.add(TESTING_BACKEND)
    registry.add(PYTHON_BACKEND)
    return registry


def add_model(root: Path, name: str, config: str | None = ECHO,
              versions: tuple[int, ...] = (1,)) -> Path:
    """A model folder: ``config`` (``{name}`` filled in) and empty version folders."""
    folder = root / name
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(config.replace("{name}", name))
    for version in versions:
        (folder / str(version)).mkdir()
    return folder


def json_config(**fields: object) -> str:
    """ECHO's inputs and outputs as a JSON config override (the testing backend completes
    nothing), with ``fields`` added."""
    tensor = {"name": "", "data_type": "TYPE_INT32", "dims": [2]}
    return json.dumps({"backend": "inferd_testing", "input": [{**tensor, "name": "IN"}],
                       "output": [{**tensor, "name": "OUT"}], **fields})


def parsed(resolved: ResolvedModel) -> ModelConfig:
    return ModelConfig.FromString(resolved.config)


@asynccontextmanager
async def running(*roots: Path, auto_complete: bool = True,
                  config_name: str = "") -> AsyncIterator[Router]:
    """The repository actor over ``roots`` on a router; every exchange inside bounded."""
    router = Router("main")
    actor = RepositoryActor(router, tuple(map(str, roots)), backends(),
                            auto_complete=auto_complete, config_name=config_name)
    async with anyio.create_task_group() as tasks:
        await tasks.start(actor.run)
        with anyio.fail_after(WAIT_SECS):
            yield router
        tasks.cancel_scope.cancel()


async def ask(router: Router, message: Message) -> Message:
    return await router.ask(REPOSITORY, message)


async def resolve(router: Router, model: str, **overrides: str) -> ResolvedModel:
    reply = await ask(router, ResolveModel(model, **overrides))
    assert isinstance(reply, ResolvedModel)
    return reply


async def fingerprints(router: Router) -> Fingerprints:
    reply = await ask(router, FingerprintModels())
    assert isinstance(reply, Fingerprints)
    return reply


# ---------------------------------------------------------------------------- listing


async def test_the_list_covers_every_root_and_names_a_model_found_in_two(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    add_model(first, "b")
    add_model(first, "shared")
    add_model(second, "a")
    add_model(second, "shared")
    (second / "notes.txt").write_text("not a model")
    async with running(first, second, tmp_path / "missing") as router:
        assert await ask(router, ListModels()) == ModelList(
            ("a", "b", "shared"), {"shared": TWO_ROOTS})
        with pytest.raises(InvalidArgument, match=TWO_ROOTS):
            await resolve(router, "shared")
        assert (await resolve(router, "a")).path == str(second / "a")


# ---------------------------------------------------------------------------- resolving


async def test_a_resolve_answers_the_validated_config_backend_and_folder(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, "echo")
    async with running(tmp_path) as router:
        resolved = await resolve(router, "echo")
        assert (resolved.model, resolved.backend, resolved.path, resolved.versions) == (
            "echo", "inferd_testing", str(tmp_path / "echo"), (1,))
        config = parsed(resolved)
        assert (config.name, config.max_batch_size) == ("echo", 8)
        assert config.instance_group[0].name == "echo_0"  # normalized
        assert [version for version, _ in resolved.version_fingerprints] == [1]


@pytest.mark.parametrize(("policy", "versions"), [
    ("", (7,)),
    ("version_policy { latest { num_versions: 2 } }", (3, 7)),
    ("version_policy { all { } }", (1, 3, 7)),
    ("version_policy { specific { versions: [ 1, 7, 9 ] } }", (1, 7)),
])
async def test_the_version_policy_selects_the_versions(
    tmp_path: Path, policy: str, versions: tuple[int, ...],
) -> None:
    add_model(tmp_path, "m", ECHO + policy, versions=(1, 3, 7))
    async with running(tmp_path) as router:
        assert (await resolve(router, "m")).versions == versions


async def test_a_bad_config_is_refused_naming_its_file_line_and_column(tmp_path: Path) -> None:
    add_model(tmp_path, "typo", 'name: "typo"\nbackend: "inferd_testing"\n  max_bach_size: 8\n')
    add_model(tmp_path, "negative", ECHO.replace("max_batch_size: 8", "max_batch_size: -1"))
    async with running(tmp_path) as router:
        with pytest.raises(InvalidArgument) as caught:
            await resolve(router, "typo")
        assert caught.value.message == 'typo/config.pbtxt:3:3: no field named "max_bach_size"'
        with pytest.raises(InvalidArgument, match=r"^model 'negative': 'max_batch_size' must"):
            await resolve(router, "negative")
        assert (await ask(router, ListModels())) == ModelList(("negative", "typo"))


async def test_an_unknown_model_is_not_found_and_a_path_is_no_model_name(tmp_path: Path) -> None:
    add_model(tmp_path, "echo")
    async with running(tmp_path) as router:
        with pytest.raises(NotFound, match="model 'ghost' is not in the model repository"):
            await resolve(router, "ghost")
        with pytest.raises(InvalidArgument, match="is not a valid model name"):
            await resolve(router, "../echo")
        assert (await resolve(router, "echo")).model == "echo"  # the actor serves on


async def test_a_config_override_replaces_config_pbtxt_for_that_resolve_only(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, "echo", versions=(1, 2))
    override = json_config(max_batch_size=2, version_policy={"all": {}})
    async with running(tmp_path) as router:
        overridden = await resolve(router, "echo", config_override=override)
        assert (parsed(overridden).max_batch_size, overridden.versions) == (2, (1, 2))
        plain = await resolve(router, "echo")
        assert (parsed(plain).max_batch_size, plain.versions) == (8, (2,))
        with pytest.raises(InvalidArgument, match=r"^model 'echo': config override"):
            await resolve(router, "echo", config_override='{"max_bach_size": 1}')


async def test_a_path_override_resolves_a_folder_outside_the_roots(tmp_path: Path) -> None:
    staged = add_model(tmp_path / "staging", "upload", config=None, versions=(4,))
    async with running(tmp_path / "repository") as router:
        resolved = await resolve(router, "newcomer", path_override=str(staged),
                                 config_override=json_config())
        assert (resolved.model, resolved.path, resolved.versions) == (
            "newcomer", str(staged), (4,))
        assert await ask(router, ListModels()) == ModelList(())  # nothing added to the roots


async def test_the_model_config_name_picks_a_config_from_configs(tmp_path: Path) -> None:
    custom = add_model(tmp_path, "custom")
    (custom / "configs").mkdir()
    (custom / "configs" / "small.pbtxt").write_text(
        ECHO.replace("{name}", "custom").replace("max_batch_size: 8", "max_batch_size: 1"))
    add_model(tmp_path, "plain")
    async with running(tmp_path, config_name="small") as router:
        assert parsed(await resolve(router, "custom")).max_batch_size == 1
        assert parsed(await resolve(router, "plain")).max_batch_size == 8  # has no small.pbtxt
    async with running(tmp_path) as router:
        assert parsed(await resolve(router, "custom")).max_batch_size == 8


async def test_without_auto_complete_a_config_must_declare_its_tensors(tmp_path: Path) -> None:
    add_model(tmp_path, "bare", 'backend: "python"')  # its model.py may complete them
    async with running(tmp_path) as router:
        assert (await resolve(router, "bare")).backend == "python"
    async with running(tmp_path, auto_complete=False) as router:
        with pytest.raises(InvalidArgument, match="must specify at least one 'input'"):
            await resolve(router, "bare")


# ---------------------------------------------------------------------------- POLL


async def test_a_fingerprint_changes_when_its_folder_is_edited_and_only_then(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    add_model(first, "a")
    edited = add_model(first, "b")
    add_model(first, "shared")
    add_model(second, "shared")
    async with running(first, second) as router:
        before = await fingerprints(router)
        assert set(before.fingerprints) == {"a", "b"}
        assert before.problems == {"shared": TWO_ROOTS}
        assert await fingerprints(router) == before  # nothing changed: the same hashes
        (edited / "config.pbtxt").write_text(
            ECHO.replace("{name}", "b").replace("max_batch_size: 8", "max_batch_size: 4"))
        after = await fingerprints(router)
        assert after.fingerprints["a"] == before.fingerprints["a"]
        assert after.fingerprints["b"] != before.fingerprints["b"]
        (edited / "2").mkdir()  # a new version folder
        assert (await fingerprints(router)).fingerprints["b"] != after.fingerprints["b"]
        add_model(first, "c")
        assert set((await fingerprints(router)).fingerprints) == {"a", "b", "c"}


# ---------------------------------------------------------------------------- catalog


async def test_the_catalog_describes_models_by_label_and_reads_their_metadata(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, "labelled")
    (tmp_path / "labelled" / "catalog.toml").write_text(
        'description = "echoes"\ntask = "echo"\n[labels]\nstage = "prod"\n')
    add_model(tmp_path, "plain", versions=(1, 2))
    add_model(tmp_path, "broken", 'name: "broken"\n  max_bach_size: 8\n')
    async with running(tmp_path) as router:
        reply = await ask(router, DescribeModels(labels=(("stage", "prod"),)))
        assert isinstance(reply, Catalog)
        (entry,) = reply.entries
        assert (entry.name, entry.backend, entry.versions, entry.loadable) == (
            "labelled", "inferd_testing", ("1",), ("1",))
        assert [spec.name for spec in entry.inputs] == ["IN"]
        assert entry.metadata["task"] == "echo"

        everything = await ask(router, DescribeModels())
        assert isinstance(everything, Catalog)
        by_name = {entry.name: entry for entry in everything.entries}
        assert set(by_name) == {"broken", "labelled", "plain"}
        assert by_name["plain"].versions == ("1", "2") and by_name["plain"].loadable == ("2",)
        assert by_name["broken"].error == 'broken/config.pbtxt:2:3: no field named "max_bach_size"'

        metadata = await ask(router, ReadCatalogs())
        assert isinstance(metadata, Catalogs)
        assert set(metadata.metadata) == {"labelled"}
        assert metadata.metadata["labelled"]["labels"] == {"stage": "prod"}


# ---------------------------------------------------------------------------- the rest


async def test_local_roots_have_no_fetch_metrics_and_no_remote_problems(tmp_path: Path) -> None:
    add_model(tmp_path, "echo")
    router = Router("main")
    actor = RepositoryActor(router, (str(tmp_path),), backends(), auto_complete=True)
    async with anyio.create_task_group() as tasks:
        await tasks.start(actor.run)
        with anyio.fail_after(WAIT_SECS):
            assert await ask(router, MetricsRequest()) == Metrics(())
        assert actor.check_remote_roots() == []
        tasks.cancel_scope.cancel()


async def test_a_kind_it_does_not_handle_is_answered_with_an_error(tmp_path: Path) -> None:
    add_model(tmp_path, "echo")
    async with running(tmp_path) as router:
        with pytest.raises(Unsupported, match="does not handle LoadRequest"):
            await ask(router, LoadRequest("echo"))
        assert await ask(router, ListModels()) == ModelList(("echo",))
