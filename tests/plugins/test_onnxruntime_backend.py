"""The onnxruntime backend, driven directly (no executor, no server): loading the example
repository's models, auto-complete, config validation and batched execution."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.devices import PINNED_GPU_ENV
from inferd.kernel.sdk.backends import BackendRegistry, ModelContext
from inferd.plugins.backends.onnxruntime import ONNXRUNTIME_BACKEND, inferd_register_backends
from inferd.plugins.backends.onnxruntime.backend import (
    OnnxRuntimeBackend,
    Placement,
    instance_placements,
    open_session,
)
from inferd.plugins.backends.onnxruntime.instance import ExecutionPlan, OnnxRuntimeInstance
from inferd.protocols.errors import InferdError, InvalidArgument, Unavailable
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import from_numpy

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def parse_config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def repository_context(name: str) -> ModelContext:
    config = parse_config((REPOSITORY / name / "config.pbtxt").read_text())
    return ModelContext(name=name, version=1, model_dir=REPOSITORY / name, config=config)


def write_model(
    model_dir: Path,
    inputs: Sequence[tuple[str, int, list[Any]]],
    outputs: Sequence[tuple[str, int, list[Any]]],
    nodes: Sequence[onnx.NodeProto],
) -> None:
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*spec) for spec in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(model_dir / "1" / "model.onnx"))


def identity_context(
    tmp_path: Path,
    config_text: str,
    elem_type: int = TensorProto.FLOAT,
    shape: list[Any] | None = None,
    auto_complete: bool = True,
) -> ModelContext:
    shape = ["batch", 3] if shape is None else shape
    write_model(
        tmp_path / "m",
        [("IN", elem_type, shape)],
        [("OUT", elem_type, shape)],
        [helper.make_node("Identity", ["IN"], ["OUT"])],
    )
    return ModelContext(
        name="m",
        version=1,
        model_dir=tmp_path / "m",
        config=parse_config(config_text),
        auto_complete=auto_complete,
    )


def int32(name: str, values: Any) -> Tensor:
    return from_numpy(name, np.asarray(values, dtype=np.int32), "INT32")


def simple_request(batch: int, request_id: str, outputs: tuple[str, ...] = ()) -> InferRequest:
    rng = np.random.default_rng(batch)
    return InferRequest(
        model="simple",
        id=request_id,
        inputs=(
            int32("INPUT0", rng.integers(-1000, 1000, (batch, 16))),
            int32("INPUT1", rng.integers(-1000, 1000, (batch, 16))),
        ),
        outputs=outputs,
    )


def response(result: InferResponse | InferdError) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


def outputs_by_name(result: InferResponse | InferdError) -> dict[str, Tensor]:
    return {tensor.name: tensor for tensor in response(result).outputs}


class CountingSession:
    """Wraps a session to count how many times the instance runs it."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.runs: list[list[str]] = []

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> Any:
        self.runs.append(output_names)
        return self.session.run(output_names, feeds)


# ------------------------------------------------------------------------------ plugin hook


def test_hook_registers_the_backend_by_import_path() -> None:
    registry = BackendRegistry()
    inferd_register_backends(registry)
    assert registry.for_platform("onnxruntime_onnx") == ONNXRUNTIME_BACKEND
    assert registry.for_filename("model.onnx") == ONNXRUNTIME_BACKEND
    assert ONNXRUNTIME_BACKEND.load_class() is OnnxRuntimeBackend


def test_hook_modules_import_no_framework() -> None:
    script = textwrap.dedent(
        """
        import sys
        import inferd.plugins.backends.onnxruntime
        import inferd.plugins.backends.testing
        assert "onnxruntime" not in sys.modules, "a hook module imported onnxruntime"
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr


def test_missing_onnxruntime_makes_the_model_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(Unavailable, match=r"onnxruntime is not installed.*inferd\[onnx\]"):
        OnnxRuntimeBackend().load_model(repository_context("simple"))


# --------------------------------------------------------------------------------- execute


class BindingSpy:
    """Stands in for the C++ session under a CPU ``InferenceSession``, counting its runs."""

    def __init__(self, binding: Any) -> None:
        self.binding = binding
        self.runs = 0

    def run(self, names: list[str], feeds: dict[str, np.ndarray], options: Any) -> Any:
        self.runs += 1
        return self.binding.run(names, feeds, options)

    def __getattr__(self, name: str) -> Any:  # what else the Python wrapper asks it
        return getattr(self.binding, name)


def test_a_cpu_session_is_run_through_its_binding_with_the_same_answers() -> None:
    model = OnnxRuntimeBackend().load_model(repository_context("simple"))
    session = onnxruntime.InferenceSession(str(REPOSITORY / "simple/1/model.onnx"),
                                           providers=["CPUExecutionProvider"])
    spy = BindingSpy(session._sess)
    session._sess = spy
    instance = OnnxRuntimeInstance(session, ExecutionPlan.from_config(model.config, "simple", 1))
    request = simple_request(2, "a")

    (result,) = instance.execute([request])

    assert spy.runs == 1
    first, second = (tensor.data for tensor in request.inputs)
    outputs = outputs_by_name(result)
    np.testing.assert_array_equal(outputs["OUTPUT0"].data, first + second)
    np.testing.assert_array_equal(outputs["OUTPUT1"].data, first - second)


def test_a_feed_without_a_required_input_gets_the_wrappers_message() -> None:
    # A config may leave out an input the graph needs (Triton loads it, and so does inferd):
    # the feed then lacks it, and the error names it as onnxruntime's Python wrapper does.
    model = OnnxRuntimeBackend().load_model(repository_context("simple"))
    session = onnxruntime.InferenceSession(str(REPOSITORY / "simple/1/model.onnx"),
                                           providers=["CPUExecutionProvider"])
    spy = BindingSpy(session._sess)
    session._sess = spy
    plan = ExecutionPlan.from_config(model.config, "simple", 1)
    one_input = ExecutionPlan(model=plan.model, version=plan.version, batching=plan.batching,
                              inputs={"INPUT0": plan.inputs["INPUT0"]}, outputs=plan.outputs)
    instance = OnnxRuntimeInstance(session, one_input)
    request = InferRequest(model="simple", id="a", inputs=simple_request(1, "a").inputs[:1])

    (result,) = instance.execute([request])

    assert spy.runs == 0
    assert isinstance(result, InferdError)
    assert "Required inputs (['INPUT1']) are missing" in result.message


def test_simple_runs_requests_of_different_batch_sizes_as_one_batch() -> None:
    model = OnnxRuntimeBackend().load_model(repository_context("simple"))
    session = CountingSession(onnxruntime.InferenceSession(str(REPOSITORY / "simple/1/model.onnx")))
    instance = OnnxRuntimeInstance(session, ExecutionPlan.from_config(model.config, "simple", 1))
    requests = [simple_request(1, "a"), simple_request(3, "b")]

    results = instance.execute(requests)

    assert len(session.runs) == 1
    for request, result in zip(requests, results, strict=True):
        first, second = (tensor.data for tensor in request.inputs)
        assert response(result).id == request.id
        assert (response(result).model, response(result).version) == ("simple", "1")
        outputs = outputs_by_name(result)
        assert list(outputs) == ["OUTPUT0", "OUTPUT1"]
        assert outputs["OUTPUT0"].datatype == "INT32"
        assert outputs["OUTPUT0"].shape == first.shape
        assert np.array_equal(outputs["OUTPUT0"].data, first + second)
        assert np.array_equal(outputs["OUTPUT1"].data, first - second)


def test_each_request_gets_only_the_outputs_it_asked_for() -> None:
    instance = OnnxRuntimeBackend().load_model(repository_context("simple")).create_instance(0)
    only_difference = simple_request(2, "a", outputs=("OUTPUT1",))
    everything = simple_request(1, "b")

    first, second = instance.execute([only_difference, everything])

    assert list(outputs_by_name(first)) == ["OUTPUT1"]
    assert list(outputs_by_name(second)) == ["OUTPUT0", "OUTPUT1"]
    inputs = [tensor.data for tensor in only_difference.inputs]
    assert np.array_equal(outputs_by_name(first)["OUTPUT1"].data, inputs[0] - inputs[1])


def test_an_unknown_requested_output_fails_only_its_request() -> None:
    instance = OnnxRuntimeBackend().load_model(repository_context("simple")).create_instance(0)

    bad, good = instance.execute(
        [simple_request(1, "a", outputs=("OUTPUT9",)), simple_request(1, "b")]
    )

    assert isinstance(bad, InvalidArgument)
    assert "unexpected inference output 'OUTPUT9' for model 'simple'" in bad.message
    assert list(outputs_by_name(good)) == ["OUTPUT0", "OUTPUT1"]


def test_an_onnxruntime_error_fails_every_request_of_the_batch() -> None:
    instance = OnnxRuntimeBackend().load_model(repository_context("simple")).create_instance(0)
    wrong_type = InferRequest(
        model="simple",
        inputs=(
            from_numpy("INPUT0", np.zeros((1, 16), np.float32), "FP32"),
            from_numpy("INPUT1", np.zeros((1, 16), np.float32), "FP32"),
        ),
    )

    results = instance.execute([wrong_type, wrong_type])

    assert len(results) == 2
    for result in results:
        assert isinstance(result, InvalidArgument)
        assert "tensor(float)" in result.message


def test_requests_whose_inner_shapes_differ_run_apart(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m"', shape=["batch", "n"])
    model = OnnxRuntimeBackend().load_model(context)
    assert model.config.max_batch_size == 4
    instance = model.create_instance(0)
    short = InferRequest(model="m", inputs=(from_numpy("IN", np.ones((1, 2), np.float32)),))
    long = InferRequest(model="m", inputs=(from_numpy("IN", np.ones((2, 5), np.float32)),))

    results = instance.execute([short, long])

    assert [outputs_by_name(r)["OUT"].shape for r in results] == [(1, 2), (2, 5)]


def test_bytes_tensors_travel_as_onnx_strings(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m"', TensorProto.STRING, ["batch", 2])
    model = OnnxRuntimeBackend().load_model(context)
    assert model.config.input[0].data_type == model_config_pb2.TYPE_STRING
    instance = model.create_instance(0)
    words = from_numpy("IN", [[b"caf\xc3\xa9", b""]], "BYTES")
    not_utf8 = from_numpy("IN", [[b"\xff", b"x"]], "BYTES")

    good, bad = instance.execute(
        [InferRequest(model="m", inputs=(words,)), InferRequest(model="m", inputs=(not_utf8,))]
    )

    output = outputs_by_name(good)["OUT"]
    assert output.datatype == "BYTES"
    assert output.data.tolist() == [[b"caf\xc3\xa9", b""]]
    assert isinstance(bad, InvalidArgument) and "UTF-8" in bad.message


def test_mlp_matches_numpy() -> None:
    instance = OnnxRuntimeBackend().load_model(repository_context("mlp")).create_instance(0)
    weights = {
        tensor.name: numpy_helper.to_array(tensor)
        for tensor in onnx.load(str(REPOSITORY / "mlp/1/model.onnx")).graph.initializer
    }
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)

    (result,) = instance.execute([InferRequest(model="mlp", inputs=(from_numpy("x", x),))])

    hidden = np.maximum(x @ weights["w1"] + weights["b1"], 0)
    expected = hidden @ weights["w2"] + weights["b2"]
    assert np.allclose(outputs_by_name(result)["y"].data, expected, rtol=1e-5, atol=1e-5)


def test_a_model_folder_with_external_data_loads(tmp_path: Path) -> None:
    source = onnx.load(str(REPOSITORY / "mlp/1/model.onnx"))
    folder = tmp_path / "mlp" / "1" / "model.onnx"
    folder.mkdir(parents=True)
    onnx.save_model(
        source,
        str(folder / "model.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    context = ModelContext(
        name="mlp", version=1, model_dir=tmp_path / "mlp", config=parse_config('name: "mlp"')
    )
    reference = OnnxRuntimeBackend().load_model(repository_context("mlp")).create_instance(0)
    external = OnnxRuntimeBackend().load_model(context).create_instance(0)
    request = InferRequest(model="mlp", inputs=(from_numpy("x", np.ones((1, 64), np.float32)),))

    (expected,), (got,) = reference.execute([request]), external.execute([request])

    assert (folder / "weights.bin").is_file()
    assert np.array_equal(outputs_by_name(got)["y"].data, outputs_by_name(expected)["y"].data)


# --------------------------------------------------------------------------- auto-complete


def test_auto_complete_fills_mlp_inputs_and_outputs_and_keeps_its_batch_size() -> None:
    context = repository_context("mlp")
    model = OnnxRuntimeBackend().load_model(context)

    config = model.config
    assert config.max_batch_size == 64
    assert config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("x", model_config_pb2.TYPE_FP32, [64])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("y", model_config_pb2.TYPE_FP32, [10])
    ]
    assert not context.config.input and not context.config.output


def test_auto_complete_of_a_bare_config_batches_by_default(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m"', shape=["batch", 3, "width"])

    config = OnnxRuntimeBackend().load_model(context).config

    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    assert list(config.input[0].dims) == [3, -1]
    assert list(config.output[0].dims) == [3, -1]
    assert context.config.max_batch_size == 0 and not context.config.HasField("dynamic_batching")


def test_auto_complete_keeps_a_configured_scheduler(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m" sequence_batching {}')

    config = OnnxRuntimeBackend().load_model(context).config

    assert config.max_batch_size == 4
    assert config.HasField("sequence_batching") and not config.HasField("dynamic_batching")


def test_auto_complete_does_not_batch_a_model_with_a_fixed_first_dimension(
    tmp_path: Path,
) -> None:
    context = identity_context(tmp_path, 'name: "m"', shape=[2, 3])

    config = OnnxRuntimeBackend().load_model(context).config

    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [2, 3]


def test_auto_complete_fills_only_what_declared_tensors_leave_out(tmp_path: Path) -> None:
    context = identity_context(
        tmp_path, 'name: "m" max_batch_size: 2 input [{ name: "IN" }] output [{ name: "OUT" }]'
    )

    config = OnnxRuntimeBackend().load_model(context).config

    assert config.max_batch_size == 2
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("IN", model_config_pb2.TYPE_FP32, [3])
    ]


def test_a_batched_scalar_is_completed_with_a_reshape_and_runs(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m"', shape=["batch"])
    model = OnnxRuntimeBackend().load_model(context)
    assert list(model.config.input[0].dims) == [1]
    assert model.config.input[0].HasField("reshape")
    assert list(model.config.input[0].reshape.shape) == []

    values = np.array([[1.5], [2.5]], np.float32)
    (result,) = model.create_instance(0).execute(
        [InferRequest(model="m", inputs=(from_numpy("IN", values),))]
    )

    output = outputs_by_name(result)["OUT"]
    assert output.shape == (2, 1)
    assert np.array_equal(output.data, values)


# ------------------------------------------------------------------------------ validation


def test_a_declared_input_missing_from_the_model_fails_the_load() -> None:
    context = repository_context("simple")
    context.config.input[1].name = "INPUT7"

    with pytest.raises(InvalidArgument) as caught:
        OnnxRuntimeBackend().load_model(context)

    assert "'INPUT7'" in caught.value.message
    assert "[INPUT0, INPUT1]" in caught.value.message


def test_a_declared_output_missing_from_the_model_fails_the_load() -> None:
    context = repository_context("simple")
    context.config.output[0].name = "SUM"

    with pytest.raises(InvalidArgument, match=r"output 'SUM'.*\[OUTPUT0, OUTPUT1\]"):
        OnnxRuntimeBackend().load_model(context)


def test_a_datatype_that_differs_from_the_model_fails_the_load() -> None:
    context = repository_context("simple")
    context.config.input[0].data_type = model_config_pb2.TYPE_FP32

    with pytest.raises(InvalidArgument, match=r"input 'INPUT0'.*TYPE_FP32.*TYPE_INT32"):
        OnnxRuntimeBackend().load_model(context)


def test_a_shape_that_differs_from_the_model_fails_the_load() -> None:
    context = repository_context("simple")
    context.config.input[0].dims[0] = 15

    with pytest.raises(InvalidArgument, match=r"input 'INPUT0'.*\[15\].*\[16\]"):
        OnnxRuntimeBackend().load_model(context)


def test_batching_a_model_without_a_dynamic_first_dimension_fails_the_load(
    tmp_path: Path,
) -> None:
    context = identity_context(tmp_path, 'name: "m" max_batch_size: 8', shape=[2, 3])

    with pytest.raises(InvalidArgument, match="no dynamic first dimension"):
        OnnxRuntimeBackend().load_model(context)


def test_without_auto_complete_every_model_input_must_be_declared(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m"', auto_complete=False)

    with pytest.raises(InvalidArgument, match="input 'IN' is missing from the configuration"):
        OnnxRuntimeBackend().load_model(context)


def test_a_missing_model_file_fails_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    context = ModelContext(
        name="m", version=1, model_dir=tmp_path / "m", config=parse_config('name: "m"')
    )

    with pytest.raises(InvalidArgument) as caught:
        OnnxRuntimeBackend().load_model(context)

    assert str(tmp_path / "m" / "1" / "model.onnx") in caught.value.message


def test_default_model_filename_is_honoured(tmp_path: Path) -> None:
    context = identity_context(tmp_path, 'name: "m" default_model_filename: "other.onnx"')

    with pytest.raises(InvalidArgument, match=r"other\.onnx"):
        OnnxRuntimeBackend().load_model(context)

    (context.version_dir / "model.onnx").rename(context.version_dir / "other.onnx")
    assert OnnxRuntimeBackend().load_model(context).config.max_batch_size == 4


def test_a_file_that_is_not_onnx_fails_the_load(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"not a model")
    context = ModelContext(
        name="m", version=1, model_dir=tmp_path / "m", config=parse_config('name: "m"')
    )

    with pytest.raises(InvalidArgument, match="onnxruntime could not load"):
        OnnxRuntimeBackend().load_model(context)


# ---------------------------------------------------------------------- sessions, devices


def test_the_thread_count_parameter_must_be_a_number() -> None:
    context = repository_context("simple")
    context.config.parameters["intra_op_thread_count"].string_value = "many"

    with pytest.raises(InvalidArgument, match="intra_op_thread_count"):
        OnnxRuntimeBackend().load_model(context)


def test_sessions_run_sequentially_with_the_requested_thread_count() -> None:
    session = open_session(onnxruntime, REPOSITORY / "simple/1/model.onnx", Placement(False), 3)

    options = session.get_session_options()
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 1
    assert options.execution_mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_instances_are_placed_per_group_and_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = parse_config(
        'name: "m" instance_group [{ kind: KIND_CPU count: 2 },'
        " { kind: KIND_GPU count: 1 gpus: [0, 1] }]"
    )

    assert instance_placements(config, cuda_available=True) == [
        Placement(False),
        Placement(False),
        Placement(True, 0),
        Placement(True, 1),
    ]
    # No silent fallback: a GPU group without CUDA fails the load, saying why.
    with pytest.raises(Unavailable, match="instance group '' is KIND_GPU but onnxruntime "
                       "has no CUDAExecutionProvider here; install onnxruntime-gpu"):
        instance_placements(config, cuda_available=False)
    auto = parse_config('name: "m" instance_group [{ kind: KIND_AUTO count: 2 }]')
    assert instance_placements(auto, cuda_available=False) == [Placement(False)] * 2
    assert instance_placements(auto, cuda_available=True) == [Placement(True, 0)] * 2

    # The executor of GPU 1, pinned to it, gets the group narrowed to GPU 1: CUDA's device 0.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv(PINNED_GPU_ENV, "1")
    narrowed = parse_config('name: "m" instance_group [{ kind: KIND_GPU count: 2 gpus: [1] }]')
    assert instance_placements(narrowed, cuda_available=True) == [Placement(True, 0)] * 2


def test_every_instance_has_its_own_session() -> None:
    context = repository_context("simple")
    context.config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=2)
    model = OnnxRuntimeBackend().load_model(context)
    first, second = model.create_instance(0), model.create_instance(1)

    assert first._session is not second._session  # type: ignore[attr-defined]
    for instance in (first, second):
        assert isinstance(instance.execute([simple_request(2, "a")])[0], InferResponse)


def test_the_example_repository_is_what_generate_py_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A __pycache__ folder in the repository would look like a model folder to the server.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    spec = importlib.util.spec_from_file_location("generate", REPOSITORY / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)

    first = generate.generate(tmp_path)
    second = generate.generate(tmp_path)

    assert {status for _, _, status in first} == {"written"}
    assert {status for _, _, status in second} == {"unchanged"}
    for relative, _, _ in first:
        assert (tmp_path / relative).read_bytes() == (REPOSITORY / relative).read_bytes(), relative
