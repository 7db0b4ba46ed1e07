"""The model repository on disk: listing, version folders, version policies, resolve."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from inferd.kernel.actors.repository.fingerprints import version_fingerprints
from inferd.kernel.actors.repository.folders import ModelRepository
from inferd.kernel.sdk.backends import BackendRegistry, BackendSpec
from inferd.protocols.errors import InvalidArgument, NotFound

SIMPLE = """
name: "simple"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def registry() -> BackendRegistry:
    """Stand-ins for the built-in backends, declaring what their plugins declare."""
    backends = BackendRegistry()
    backends.add(BackendSpec(name="onnxruntime", entry="x:y", platforms=("onnxruntime_onnx",),
                             default_filename="model.onnx", auto_completes=True))
    backends.add(BackendSpec(name="python", entry="x:y", default_filename="model.py",
                             auto_completes=True))
    backends.add(BackendSpec(name="tensorrt", entry="x:y", platforms=("tensorrt_plan",),
                             default_filename="model.plan", auto_completes=True))
    backends.add(BackendSpec(name="pytorch", entry="x:y", platforms=("pytorch_libtorch",),
                             default_filename="model.pt", auto_completes=True,
                             auto_completes_only=("model.pt2",)))
    return backends


def make_model(root: Path, name: str, config: str | None = SIMPLE,
               versions: dict[str, str] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(config.replace('"simple"', f'"{name}"'))
    for version, filename in (versions if versions is not None else {"1": "model.onnx"}).items():
        (folder / version).mkdir()
        if filename:
            (folder / version / filename).write_bytes(b"model")
    return folder


def policy(text: str) -> model_config_pb2.ModelVersionPolicy:
    from google.protobuf import text_format

    return text_format.Parse(text, model_config_pb2.ModelVersionPolicy())


# ------------------------------------------------------------------------------- listing


def test_list_models_sorted_dirs_only_hidden_skipped(tmp_path: Path) -> None:
    for name in ("zeta", "alpha", ".hidden"):
        make_model(tmp_path, name)
    (tmp_path / "README.md").write_text("not a model")
    names, problems = ModelRepository([tmp_path], registry()).list_models()
    assert names == ("alpha", "zeta")
    assert problems == {}


def test_model_in_two_roots_is_listed_with_its_problem(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_model(first, "shared")
    make_model(first, "only_a")
    make_model(second, "shared")
    repository = ModelRepository([first, second], registry())
    names, problems = repository.list_models()
    assert names == ("only_a", "shared")
    assert problems == {"shared": "model appears in two or more repositories"}
    with pytest.raises(InvalidArgument, match="model appears in two or more repositories"):
        repository.resolve("shared")


def test_a_version_fingerprint_follows_its_folder_and_the_shared_files_only(
    tmp_path: Path,
) -> None:
    folder = make_model(tmp_path, "m", versions={"1": "model.onnx", "2": "model.onnx"})
    before = version_fingerprints(folder, [1, 2])
    assert before[1] != before[2]
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + "# a comment\n")  # configs are compared
    (folder / "2" / "__pycache__").mkdir()  # written by the server itself
    (folder / "2" / "__pycache__" / "model.pyc").write_bytes(b"x")
    assert version_fingerprints(folder, [1, 2]) == before
    (folder / "2" / "model.onnx").write_bytes(b"new weights")
    (folder / "3").mkdir()  # another version folder
    after = version_fingerprints(folder, [1, 2])
    assert after[1] == before[1] and after[2] != before[2]
    (folder / "labels.txt").write_text("cat\n")  # outside the version folders: every one
    shared = version_fingerprints(folder, [1, 2])
    assert shared[1] != after[1] and shared[2] != after[2]
    resolved = ModelRepository([tmp_path], registry()).resolve("m")  # latest: version 3
    assert dict(resolved.version_fingerprints) == version_fingerprints(folder, [3])


def test_the_same_root_twice_is_one_root(tmp_path: Path) -> None:
    make_model(tmp_path, "simple")
    repository = ModelRepository([tmp_path, str(tmp_path)], registry())
    assert repository.list_models() == (("simple",), {})


def test_missing_root_lists_nothing(tmp_path: Path) -> None:
    assert ModelRepository([tmp_path / "nope"], registry()).list_models() == ((), {})


# ------------------------------------------------------------------------------ versions


def test_version_folders_are_plain_decimal_numbers(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    for name in ("1", "0", "10", "2", "01", "007", "v3", "1.5", "-1", "²"):
        (folder / name).mkdir(parents=True)
    (folder / "5").write_text("a file, not a version folder")
    assert ModelRepository.versions(folder) == [0, 1, 2, 10]


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("", [7]),
        ("latest { num_versions: 1 }", [7]),
        ("latest { num_versions: 2 }", [3, 7]),
        ("latest { num_versions: 10 }", [1, 3, 7]),
        ("all { }", [1, 3, 7]),
        ("specific { versions: [ 3, 4, 1 ] }", [1, 3]),
        ("specific { versions: [ 4 ] }", []),
    ],
)
def test_select_versions(text: str, selected: list[int]) -> None:
    assert ModelRepository.select_versions(policy(text), [7, 1, 3]) == selected


# ------------------------------------------------------------------------------- resolve


def test_resolve_returns_normalized_config_and_versions(tmp_path: Path) -> None:
    make_model(tmp_path, "simple", versions={"1": "model.onnx", "2": "model.onnx", "x": ""})
    resolved = ModelRepository([tmp_path], registry()).resolve("simple")
    assert (resolved.model, resolved.backend, resolved.versions) == ("simple", "onnxruntime", (2,))
    assert resolved.path == str(tmp_path / "simple")
    config = model_config_pb2.ModelConfig.FromString(resolved.config)
    assert config.platform == "onnxruntime_onnx"
    assert config.instance_group[0].name == "simple_0"


def test_resolve_unknown_model_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="model 'ghost' is not in the model repository"):
        ModelRepository([tmp_path], registry()).resolve("ghost")


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ""])
def test_resolve_refuses_names_that_are_not_one_folder(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidArgument, match="is not a valid model name"):
        ModelRepository([tmp_path / "root"], registry()).resolve(name)


def test_parse_error_names_the_model_folder_file_line_and_column(tmp_path: Path) -> None:
    make_model(tmp_path, "bad", config='name: "bad"\n\n    max_bach_size: 8\n')
    with pytest.raises(InvalidArgument) as caught:
        ModelRepository([tmp_path], registry()).resolve("bad")
    assert caught.value.message == 'bad/config.pbtxt:3:5: no field named "max_bach_size"'


def test_validation_error_names_the_model(tmp_path: Path) -> None:
    make_model(tmp_path, "neg", config=SIMPLE.replace("max_batch_size: 8", "max_batch_size: -3"))
    with pytest.raises(InvalidArgument, match=r"^model 'neg': 'max_batch_size' must be >= 0"):
        ModelRepository([tmp_path], registry()).resolve("neg")


def test_no_version_folder_under_the_policy(tmp_path: Path) -> None:
    make_model(tmp_path, "empty", versions={})
    make_model(tmp_path, "picky", config=SIMPLE + "version_policy { specific { versions: 9 } }")
    repository = ModelRepository([tmp_path], registry())
    for name in ("empty", "picky"):
        with pytest.raises(InvalidArgument) as caught:
            repository.resolve(name)
        assert caught.value.message == (
            f"at least one version must be available under the version policy of model '{name}'")


def test_missing_config_is_auto_completed_for_onnx(tmp_path: Path) -> None:
    make_model(tmp_path, "bare", config=None)
    resolved = ModelRepository([tmp_path], registry()).resolve("bare")
    config = model_config_pb2.ModelConfig.FromString(resolved.config)
    assert (config.name, config.backend, len(config.input)) == ("bare", "onnxruntime", 0)


def test_missing_config_is_an_error_without_auto_complete(tmp_path: Path) -> None:
    make_model(tmp_path, "bare", config=None)
    with pytest.raises(InvalidArgument, match=r"has no config.pbtxt, and auto-complete is disabled"):
        ModelRepository([tmp_path], registry(), auto_complete=False).resolve("bare")


def test_missing_config_for_a_backend_that_cannot_complete(tmp_path: Path) -> None:
    # TorchScript files do not say their inputs and outputs (torch.export programs do).
    make_model(tmp_path, "scripted", config=None, versions={"1": "model.pt"})
    with pytest.raises(InvalidArgument, match=r"^model 'scripted' has no config.pbtxt, and "
                       "backend 'pytorch' cannot auto-complete a config$"):
        ModelRepository([tmp_path], registry()).resolve("scripted")


def test_missing_config_and_no_model_file(tmp_path: Path) -> None:
    make_model(tmp_path, "mystery", config=None, versions={"1": "weights.bin"})
    with pytest.raises(InvalidArgument, match=r"no model file .* \(looked for model.savedmodel, "
                       r"model.graphdef, model.plan, "):
        ModelRepository([tmp_path], registry()).resolve("mystery")


def test_auto_complete_off_requires_inputs_and_outputs(tmp_path: Path) -> None:
    make_model(tmp_path, "noio", config='backend: "onnxruntime"')
    ModelRepository([tmp_path], registry()).resolve("noio")
    with pytest.raises(InvalidArgument, match="must specify at least one 'input'"):
        ModelRepository([tmp_path], registry(), auto_complete=False).resolve("noio")


def test_backend_that_is_not_installed(tmp_path: Path) -> None:
    make_model(tmp_path, "tf", config=SIMPLE + 'backend: "tensorflow"')
    with pytest.raises(InvalidArgument, match="needs backend 'tensorflow', which is not installed"):
        ModelRepository([tmp_path], registry()).resolve("tf")


def test_config_override_replaces_config_pbtxt(tmp_path: Path) -> None:
    make_model(tmp_path, "simple", versions={"1": "model.onnx", "2": "model.onnx"})
    override = '{"backend": "onnxruntime", "maxBatchSize": 2, "version_policy": {"all": {}}}'
    resolved = ModelRepository([tmp_path], registry()).resolve("simple", config_override=override)
    config = model_config_pb2.ModelConfig.FromString(resolved.config)
    assert (config.max_batch_size, resolved.versions) == (2, (1, 2))


def test_bad_config_override_names_the_model(tmp_path: Path) -> None:
    make_model(tmp_path, "simple")
    with pytest.raises(InvalidArgument, match=r"^model 'simple': config override .*max_bach_size"):
        ModelRepository([tmp_path], registry()).resolve(
            "simple", config_override='{"max_bach_size": 1}')


def test_path_override_works_for_a_model_with_no_folder(tmp_path: Path) -> None:
    staged = make_model(tmp_path / "staging", "anything", config=None)
    resolved = ModelRepository([tmp_path / "repo"], registry()).resolve(
        "newcomer", config_override='{"backend": "onnxruntime"}', path_override=str(staged))
    assert (resolved.model, resolved.path, resolved.versions) == ("newcomer", str(staged), (1,))


def test_ensemble_resolves_with_an_empty_version_folder(tmp_path: Path) -> None:
    make_model(tmp_path, "pipe", versions={"1": ""}, config="""
        platform: "ensemble"
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "B" data_type: TYPE_FP32 dims: [ 1 ] } ]
        ensemble_scheduling { step [ { model_name: "simple" model_version: -1
            input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "B" } } ] }
    """)
    repository = ModelRepository([tmp_path], registry())
    resolved = repository.resolve("pipe")
    assert (resolved.backend, resolved.versions) == ("", (1,))
    assert not repository.has_model("simple")


# --------------------------------------------------------------------------- fingerprint


def test_fingerprint_is_stable_and_sees_changes(tmp_path: Path) -> None:
    folder = make_model(tmp_path, "simple")
    repository = ModelRepository([tmp_path], registry())
    first = repository.fingerprint("simple")
    assert repository.fingerprint("simple") == first

    (folder / ".config.pbtxt.swp").write_text("editor noise")
    assert repository.fingerprint("simple") == first

    (folder / "2").mkdir()
    with_version = repository.fingerprint("simple")
    assert with_version != first

    model_file = folder / "1" / "model.onnx"
    stat = model_file.stat()
    os.utime(model_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert repository.fingerprint("simple") != with_version


def test_fingerprint_unknown_model(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        ModelRepository([tmp_path], registry()).fingerprint("ghost")
