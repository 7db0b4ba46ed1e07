"""Parsing, validation, normalization and Triton-style JSON printing of ModelConfig."""

from __future__ import annotations

import json

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inferd.kernel.modelconfig.reading import (
    ModelConfig,
    backend_can_auto_complete,
    config_to_json,
    config_to_json_text,
    normalize,
    parse_config_json,
    parse_config_text,
    validate,
    validate_ensemble,
)
from inferd.kernel.modelconfig.validation import MAX_INSTANCES
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.backends import BackendRegistry, BackendSpec
from inferd.protocols.errors import InvalidArgument

SIMPLE = """
name: "simple"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""

ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling {
  step [
    { model_name: "pre" model_version: -1
      input_map { key: "IN" value: "RAW" } output_map { key: "OUT" value: "CLEAN" } },
    { model_name: "net" model_version: -1
      input_map { key: "IN" value: "CLEAN" } output_map { key: "OUT" value: "SCORES" } }
  ]
}
"""


def registry() -> BackendRegistry:
    backends = BackendRegistry()
    backends.add(BackendSpec(name="onnxruntime", entry="x:y", platforms=("onnxruntime_onnx",),
                             default_filename="model.onnx"))
    backends.add(BackendSpec(name="pytorch", entry="x:y", platforms=("pytorch_libtorch",),
                             default_filename="model.pt"))
    backends.add(BackendSpec(name="python", entry="x:y", default_filename="model.py"))
    backends.add(BackendSpec(name="custom", entry="x:y", platforms=("custom_plat",),
                             default_filename="model.custom"))
    return backends


def built_in() -> BackendRegistry:
    """The backends of the installed plugins, as they declare themselves."""
    return Plugins.load().backends()


def normalized(text: str, folder: str = "simple", files: tuple[str, ...] = ()) -> ModelConfig:
    return normalize(parse_config_text(text, f"{folder}/config.pbtxt"), folder_name=folder,
                     backends=registry(), default_filename_present=lambda name: name in files)


def invalid(config: ModelConfig, folder: str = "simple", complete: bool = True) -> str:
    with pytest.raises(InvalidArgument) as caught:
        validate(config, folder_name=folder, complete=complete)
    return caught.value.message


# ------------------------------------------------------------------------------ parsing


def test_misspelled_field_names_file_line_and_column() -> None:
    text = 'name: "simple"\nbackend: "onnxruntime"\n    max_bach_size: 8\n'
    with pytest.raises(InvalidArgument) as caught:
        parse_config_text(text, "config.pbtxt")
    assert caught.value.message == 'config.pbtxt:3:5: no field named "max_bach_size"'


def test_parse_error_keeps_the_given_path_and_names_nested_message() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_config_text('input [ { name: "a" dimz: 3 } ]', "bad/config.pbtxt")
    assert caught.value.message == 'bad/config.pbtxt:1:21: no field named "dimz" in ModelInput'


def test_parse_error_for_unknown_enum_value_and_bad_integer() -> None:
    with pytest.raises(InvalidArgument, match=r'^c:1:32: no value named "TYPE_FOO" in enum'):
        parse_config_text('input [ { name: "a" data_type: TYPE_FOO } ]', "c")
    with pytest.raises(InvalidArgument, match=r"^c:2:17: Couldn't parse integer: \"a\"$"):
        parse_config_text('name: "x"\nmax_batch_size: "a"', "c")


def test_parse_error_for_unbalanced_braces() -> None:
    with pytest.raises(InvalidArgument, match=r"^c:1:\d+: Expected \"}\"$"):
        parse_config_text('input { name: "a" ', "c")


def test_json_override_accepts_camel_and_snake_case() -> None:
    config = parse_config_json(
        '{"name": "m", "maxBatchSize": 4, "input": [{"name": "a", "data_type": "TYPE_FP32",'
        ' "dims": ["3", 4]}], "version_policy": {"specific": {"versions": [2]}}}'
    )
    assert config.max_batch_size == 4
    assert list(config.input[0].dims) == [3, 4]
    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert list(config.version_policy.specific.versions) == [2]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{bad", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"max_bach_size": 1}', 'no field named "max_bach_size"'),
        ('{"input": [{"data_type": "TYPE_X"}]}', "TYPE_X"),
        ('{"max_batch_size": "x"}', "max_batch_size"),
    ],
)
def test_json_override_errors(text: str, problem: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_config_json(text)
    assert problem in caught.value.message
    assert "\n" not in caught.value.message


# ------------------------------------------------------------------------- normalization


def test_normalize_fills_triton_defaults() -> None:
    config = normalized('input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]',
                        files=("model.onnx",))
    assert config.name == "simple"
    assert config.backend == "onnxruntime"
    assert config.platform == "onnxruntime_onnx"
    assert config.default_model_filename == "model.onnx"
    assert config.version_policy.latest.num_versions == 1
    [group] = config.instance_group
    assert (group.name, group.count) == ("simple_0", 1)
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU


def test_normalize_does_not_change_its_argument() -> None:
    original = parse_config_text(SIMPLE, "c")
    normalize(original, folder_name="simple", backends=registry())
    assert not original.instance_group
    assert not original.HasField("version_policy")


@pytest.mark.parametrize(
    ("files", "backend", "platform", "filename"),
    [
        (("model.onnx",), "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        (("model.pt",), "pytorch", "pytorch_libtorch", "model.pt"),
        (("model.pt2",), "pytorch", "", "model.pt2"),
        (("model.plan",), "tensorrt", "tensorrt_plan", "model.plan"),
        (("model.py",), "python", "", "model.py"),
        (("model.custom",), "custom", "", "model.custom"),
        (("model.plan", "model.onnx"), "tensorrt", "tensorrt_plan", "model.plan"),
        (("model.savedmodel",), "tensorflow", "tensorflow_savedmodel", "model.savedmodel"),
        (("model.graphdef",), "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        (("model.onnx", "model.graphdef"), "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        ((), "", "", ""),
    ],
)
def test_backend_is_inferred_from_model_files(
    files: tuple[str, ...], backend: str, platform: str, filename: str
) -> None:
    config = normalized('name: "simple"', files=files)
    assert (config.backend, config.platform, config.default_model_filename) == (
        backend, platform, filename)


@pytest.mark.parametrize(
    ("text", "backend", "platform"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime", "onnxruntime_onnx"),
        ('platform: "pytorch_libtorch"', "pytorch", "pytorch_libtorch"),
        ('backend: "tensorrt"', "tensorrt", "tensorrt_plan"),
        ('backend: "python"', "python", ""),
        ('platform: "custom_plat"', "custom", "custom_plat"),
        ('default_model_filename: "model.onnx"', "onnxruntime", "onnxruntime_onnx"),
        ('backend: "tensorflow"', "tensorflow", "tensorflow_savedmodel"),
        ('platform: "tensorflow_graphdef"', "tensorflow", "tensorflow_graphdef"),
        ('default_model_filename: "model.graphdef"', "tensorflow", "tensorflow_graphdef"),
    ],
)
def test_backend_and_platform_infer_each_other(text: str, backend: str, platform: str) -> None:
    config = normalized(text)
    assert (config.backend, config.platform) == (backend, platform)


def test_a_tensorflow_platform_picks_its_own_file_and_only_savedmodels_auto_complete() -> None:
    graphdef = normalized('platform: "tensorflow_graphdef"', files=("model.savedmodel",))
    assert graphdef.default_model_filename == "model.graphdef"
    assert not backend_can_auto_complete(graphdef, built_in())
    savedmodel = normalized('backend: "tensorflow"', files=("model.graphdef", "model.savedmodel"))
    assert (savedmodel.platform, savedmodel.default_model_filename) == (
        "tensorflow_savedmodel", "model.savedmodel")
    assert backend_can_auto_complete(savedmodel, built_in())


def test_explicit_backend_picks_its_file_that_exists() -> None:
    config = normalized('backend: "pytorch"', files=("model.pt2",))
    assert config.default_model_filename == "model.pt2"
    assert config.platform == ""
    assert backend_can_auto_complete(config, built_in())
    assert not backend_can_auto_complete(normalized('backend: "pytorch"', files=("model.pt",)),
                                         built_in())


def test_whether_a_backend_auto_completes_is_what_its_spec_says() -> None:
    config = normalized('backend: "custom"', files=("model.custom",))
    assert not backend_can_auto_complete(config, registry())
    completing = BackendRegistry()
    completing.add(BackendSpec(name="custom", entry="x:y", platforms=("custom_plat",),
                               default_filename="model.custom", auto_completes=True))
    assert backend_can_auto_complete(config, completing)
    narrowed = BackendRegistry()
    narrowed.add(BackendSpec(name="custom", entry="x:y", platforms=("custom_plat",),
                             default_filename="model.custom", auto_completes=True,
                             auto_completes_only=("other_plat",)))
    assert not backend_can_auto_complete(config, narrowed)
    assert {name for name in built_in().names() if backend_can_auto_complete(
        normalized(f'backend: "{name}"'), built_in())} >= {"onnxruntime", "python", "tensorrt"}


def test_instance_groups_get_names_counts_and_kinds() -> None:
    config = normalized(
        SIMPLE + 'instance_group [ { count: 0 kind: KIND_AUTO }, { name: "big" count: 3 },'
        " { kind: KIND_GPU } ]"
    )
    groups = [(g.name, g.count, g.kind) for g in config.instance_group]
    kinds = model_config_pb2.ModelInstanceGroup
    assert groups == [("simple_0", 1, kinds.KIND_CPU), ("big", 3, kinds.KIND_CPU),
                      ("simple_2", 1, kinds.KIND_GPU)]


def test_auto_kind_becomes_gpu_when_gpus_exist() -> None:
    config = normalize(parse_config_text(SIMPLE, "c"), folder_name="simple",
                       backends=registry(), gpu_ids=(0, 1))
    [group] = config.instance_group
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert list(group.gpus) == [0, 1]


def test_ensemble_gets_no_instance_group_or_backend() -> None:
    config = normalized(ENSEMBLE, folder="pipeline")
    assert not config.instance_group
    assert config.backend == ""
    assert config.version_policy.latest.num_versions == 1
    validate(config, folder_name="pipeline", complete=True)


def test_dynamic_batching_preferred_size_defaults_to_max_batch_size() -> None:
    config = normalized(SIMPLE + "dynamic_batching { }")
    assert list(config.dynamic_batching.preferred_batch_size) == [8]


# -------------------------------------------------------------------------------- JSON


def test_json_prints_64_bit_fields_as_numbers() -> None:
    config = normalized(
        SIMPLE.replace("dims: [ 16 ] } ]\noutput",
                       "dims: [ -1, 16 ] reshape { shape: [ -1, 4, 4 ] } } ]\noutput")
        + "dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2"
        " default_priority_level: 1 default_queue_policy { default_timeout_microseconds: 7 }"
        " priority_queue_policy { key: 2 value { default_timeout_microseconds: 9 } } }"
        " version_policy { specific { versions: [ 1, 3 ] } }"
    )
    document = json.loads(config_to_json_text(config))
    assert document["input"][0]["dims"] == [-1, 16]
    assert document["input"][0]["reshape"]["shape"] == [-1, 4, 4]
    assert document["output"][0]["dims"] == [16]
    batching = document["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["priority_levels"] == 2
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 7
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 9
    assert batching["preferred_batch_size"] == [8]
    assert document["version_policy"] == {"specific": {"versions": [1, 3]}}


def test_json_prints_every_scalar_snake_case_with_enum_names() -> None:
    document = config_to_json(normalized(SIMPLE))
    assert document["max_batch_size"] == 8
    assert document["runtime"] == ""
    assert document["input"][0]["data_type"] == "TYPE_INT32"
    assert document["input"][0]["is_shape_tensor"] is False
    assert document["instance_group"][0]["kind"] == "KIND_CPU"
    assert document["version_policy"] == {"latest": {"num_versions": 1}}
    assert "maxBatchSize" not in document


def test_json_prints_ensemble_and_sequence_numbers() -> None:
    ensemble = config_to_json(normalized(ENSEMBLE, folder="pipeline"))
    assert [s["model_version"] for s in ensemble["ensemble_scheduling"]["step"]] == [-1, -1]
    sequence = config_to_json(normalized(
        SIMPLE + "sequence_batching { oldest { max_queue_delay_microseconds: 5 }"
        " state [ { input_name: \"a\" output_name: \"b\" data_type: TYPE_FP32 dims: [ 2 ] } ] }"
    ))["sequence_batching"]
    assert sequence["max_sequence_idle_microseconds"] == 1_000_000
    assert sequence["oldest"]["max_queue_delay_microseconds"] == 5
    assert sequence["state"][0]["dims"] == [2]


# --------------------------------------------------------------------------- validation


def test_a_normal_config_validates() -> None:
    validate(normalized(SIMPLE), folder_name="simple", complete=True)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ('name: "other"', "config name 'other' must equal the model's folder name"),
        ("max_batch_size: -1", "'max_batch_size' must be >= 0, got -1"),
        ('input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]', "input 1 must specify 'name'"),
        ('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]',
         "input 'INPUT0' is declared more than once"),
        ('output [ { name: "O" dims: [ 1 ] } ]', "output 'O' must specify 'data_type'"),
        ('output [ { name: "O" data_type: TYPE_FP32 } ]', "output 'O' must specify 'dims'"),
        ('output [ { name: "O" data_type: TYPE_FP32 dims: [ 0 ] } ]',
         "output 'O' has 'dims' [0]: each dimension must be >= 1, or -1"),
        ('output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 0 ] } } ]',
         "output 'O' has 'reshape' [0]"),
        ('output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 3 ] } } ]',
         "does not hold the same elements as its 'dims' [4]"),
        ("dynamic_batching { preferred_batch_size: [ 16 ] }",
         "'dynamic_batching.preferred_batch_size' 16 must be <= max_batch_size (8)"),
        ("dynamic_batching { preferred_batch_size: [ 0 ] }",
         "'dynamic_batching.preferred_batch_size' 0 must be > 0"),
        ('instance_group [ { count: -2 } ]', "has 'count' -2"),
        ('instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]', "has kind KIND_CPU but lists 'gpus'"),
        ("version_policy { specific { versions: [ -1 ] } }",
         "'version_policy.specific.versions' must be >= 0, got [-1]"),
        ("version_policy { latest { num_versions: 0 } }",
         "'version_policy.latest.num_versions' must be >= 1, got 0"),
        ('platform: "pytorch_libtorch"',
         "'platform' 'pytorch_libtorch' and 'backend' 'onnxruntime' do not go together"),
    ],
)
def test_validation_failures_name_model_and_field(change: str, expected: str) -> None:
    config = parse_config_text(SIMPLE, "c")
    text_format.Merge(change, config)  # Merge lets a change override a scalar already set
    message = invalid(normalize(config, folder_name="simple", backends=registry()))
    assert message.startswith("model 'simple': ")
    assert expected in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
         "default priority level must be in range [1, 2] for simple"),
        ("dynamic_batching { priority_levels: 2 }",
         "default priority level must be in range [1, 2] for simple"),
        ("dynamic_batching { priority_levels: 2 default_priority_level: 1 "
         "priority_queue_policy { key: 3 value { max_queue_size: 1 } } }",
         "priority queue policy must have priority level in range [1, 2] for simple"),
        ("dynamic_batching { priority_levels: 2 default_priority_level: 1 "
         "preserve_ordering: true }",
         "Only one priority level is allowed when 'preserve_ordering' is true for simple"),
        ("dynamic_batching { preserve_ordering: true default_queue_policy { "
         "timeout_action: DELAY default_timeout_microseconds: 100 } }",
         "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true "
         "for simple"),
        ("dynamic_batching { default_queue_policy { timeout_action: 7 } }",
         "model 'simple': unknown timeout_action 7 in dynamic_batching.default_queue_policy "
         "(REJECT or DELAY)"),
    ],
)
def test_queue_policies_are_refused_in_tritons_words(change: str, expected: str) -> None:
    config = parse_config_text(SIMPLE, "c")
    text_format.Merge(change, config)
    assert invalid(normalize(config, folder_name="simple", backends=registry())) == expected


def test_missing_backend_and_platform() -> None:
    message = invalid(normalized(SIMPLE.replace('backend: "onnxruntime"', "")))
    assert message.startswith("model 'simple': must specify 'platform' or 'backend'")


def test_unknown_platform_without_backend() -> None:
    message = invalid(normalized(SIMPLE.replace('backend: "onnxruntime"', 'platform: "tf"')))
    assert "no backend is known for 'platform' 'tf'" in message


def test_inputs_and_outputs_required_only_when_complete() -> None:
    config = normalized('backend: "onnxruntime"')
    validate(config, folder_name="simple", complete=False)
    assert "must specify at least one 'input'" in invalid(config, complete=True)


def test_reshape_may_regroup_elements_around_variable_dims() -> None:
    config = normalized(SIMPLE.replace(
        "dims: [ 16 ] } ]\noutput", "dims: [ 2, 4, -1, 6 ] reshape { shape: [ 8, -1, 1, 6 ] } } ]"
        "\noutput"))
    validate(config, folder_name="simple", complete=True)


# ----------------------------------------------------------------------------- ensembles


def ensemble_with(steps: str) -> ModelConfig:
    head = ENSEMBLE.split("ensemble_scheduling")[0]
    return normalized(head + "ensemble_scheduling { step [ " + steps + " ] }", folder="pipeline")


def ensemble_error(config: ModelConfig) -> str:
    return invalid(config, folder="pipeline")


def step(model: str, reads: str, writes: str) -> str:
    return (f'{{ model_name: "{model}" model_version: -1 input_map {{ key: "IN" value: "{reads}" }}'
            f' output_map {{ key: "OUT" value: "{writes}" }} }}')


def test_ensemble_reading_an_unwritten_tensor() -> None:
    message = ensemble_error(ensemble_with(step("net", "NOWHERE", "SCORES")))
    assert message == ("ensemble 'pipeline': step 0 (model 'net') reads tensor 'NOWHERE', which "
                       "is neither an ensemble input nor written by any step")


def test_ensemble_cycle_names_the_steps() -> None:
    steps = ", ".join([step("pre", "RAW", "SCORES"), step("a", "B", "A"), step("b", "A", "B")])
    message = ensemble_error(ensemble_with(steps))
    assert "cycle" in message
    assert "step 1 (model 'a')" in message and "step 2 (model 'b')" in message


def test_ensemble_output_not_written() -> None:
    message = ensemble_error(ensemble_with(step("pre", "RAW", "OTHER")))
    assert "ensemble output 'SCORES' is not written by any step" in message


def test_ensemble_tensor_written_twice() -> None:
    steps = ", ".join([step("a", "RAW", "SCORES"), step("b", "RAW", "SCORES")])
    message = ensemble_error(ensemble_with(steps))
    assert "tensor 'SCORES' is written by both step 0 (model 'a') and step 1 (model 'b')" in message


def test_ensemble_unused_input_and_missing_steps() -> None:
    extra_input = ENSEMBLE.replace(
        'input [ { name: "RAW"', 'input [ { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] },'
        ' { name: "RAW"')
    message = ensemble_error(normalized(extra_input, folder="pipeline"))
    assert message == "ensemble 'pipeline': ensemble input 'EXTRA' is not read by any step"
    assert "at least one 'step'" in ensemble_error(ensemble_with(""))


def test_ensemble_with_instance_group_or_backend_is_rejected() -> None:
    assert "'instance_group' must not be set" in ensemble_error(
        normalized(ENSEMBLE + "instance_group [ { count: 1 } ]", folder="pipeline"))
    assert "must not set 'backend'" in ensemble_error(
        normalized(ENSEMBLE + 'backend: "python"', folder="pipeline"))


def test_validate_ensemble_checks_composing_models_exist() -> None:
    config = normalized(ENSEMBLE, folder="pipeline")
    validate_ensemble(config, lambda name: name in {"pre", "net"})
    with pytest.raises(InvalidArgument) as caught:
        validate_ensemble(config, lambda name: name == "pre")
    assert caught.value.message == (
        "ensemble 'pipeline': step 1 (model 'net') uses model 'net', which is neither in the "
        "model repository nor loaded")


def test_instance_counts_and_kinds_are_bounded() -> None:
    config = parse_config_text(
        'name: "m"\nbackend: "onnxruntime"\n'
        f"instance_group [{{ count: {MAX_INSTANCES + 1} kind: KIND_CPU }}]\n", "m/config.pbtxt"
    )
    with pytest.raises(InvalidArgument, match=f"at most {MAX_INSTANCES}"):
        validate(config, folder_name="m", complete=False)
    config = parse_config_json('{"name": "m", "backend": "onnxruntime", '
                               '"instance_group": [{"kind": 7}]}')
    with pytest.raises(InvalidArgument, match="unknown 'kind' 7"):
        validate(config, folder_name="m", complete=False)


def test_auto_kind_stays_on_the_cpu_for_a_backend_that_cannot_use_the_gpus() -> None:
    config = normalize(parse_config_text(SIMPLE, "c"), folder_name="simple",
                       backends=registry(), gpu_ids=(0, 1),
                       backend_uses_gpu=lambda backend: backend != "onnxruntime")
    [group] = config.instance_group
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert list(group.gpus) == []


def test_gpu_groups_are_checked_against_the_machines_gpus() -> None:
    from inferd.kernel.modelconfig.validation import check_gpus

    on_gpu = normalized(SIMPLE + "instance_group [ { kind: KIND_GPU } ]")
    with pytest.raises(InvalidArgument, match=r"^instance group simple_0 of model simple has "
                       "kind KIND_GPU but no GPUs are available$"):
        check_gpus(on_gpu, ())
    listed = normalized(SIMPLE + "instance_group [ { kind: KIND_GPU gpus: [0, 3] } ]")
    check_gpus(listed, (0, 1, 2, 3))
    with pytest.raises(InvalidArgument, match=r"^instance group simple_0 of model simple "
                       r"specifies invalid or unsupported gpu id 3\. GPUs this server can use "
                       "are: 0, 1$"):
        check_gpus(listed, (0, 1))
    check_gpus(normalized(SIMPLE), ())  # CPU groups need no GPU
