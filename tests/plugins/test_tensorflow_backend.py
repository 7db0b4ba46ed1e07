"""The tensorflow backend's own rules, without TensorFlow: its parameters, auto-complete and
checks against a program's tensors, instance devices, programs shared by instances, the
once-per-process thread pools, and a missing TensorFlow. TensorFlow itself is exercised end
to end (tests/e2e/test_tensorflow_models.py), in the executor process of its own it runs in.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk.backends import ModelContext
from inferd.kernel.sdk.process_threads import Pools, ProcessThreads
from inferd.plugins.backends.tensorflow.backend import (
    PROCESS_THREADS,
    ExecutionPlan,
    Serving,
    TensorFlowBackend,
    TensorFlowModel,
    check_config,
    complete_config,
    instance_devices,
)
from inferd.plugins.backends.tensorflow.graphs import MISSING_TENSORFLOW, GraphTensor
from inferd.protocols.errors import InvalidArgument, Unavailable

FP32, INT32 = model_config_pb2.TYPE_FP32, model_config_pb2.TYPE_INT32


class FakeProgram:
    """What the backend reads of a loaded program."""

    def __init__(self, inputs: list[GraphTensor], outputs: list[GraphTensor],
                 required: set[str] | None = None) -> None:
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.required = frozenset(required if required is not None else
                                  (t.name for t in inputs))


def tensor(name: str, data_type: int = FP32, shape: tuple[int, ...] | None = (-1, 16)
           ) -> GraphTensor:
    return GraphTensor(name, data_type, shape, model_config_pb2.DataType.Name(data_type))


def config(text: str) -> ModelConfig:
    parsed = ModelConfig()
    text_format.Parse('name: "m"\n' + text, parsed)
    return parsed


def signature_program() -> Any:
    return FakeProgram([tensor("x"), tensor("y")], [tensor("sum"), tensor("product")])


# --------------------------------------------------------------- parameters


def test_serving_defaults_are_tritons() -> None:
    serving = Serving.from_config(config('platform: "tensorflow_savedmodel"'))
    assert (serving.signature, serving.tag, serving.share_count) == ("serving_default", "serve", 1)


def test_serving_reads_the_signature_tag_and_share_count() -> None:
    serving = Serving.from_config(config(
        'platform: "tensorflow_savedmodel"\n'
        'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "scaled" } }\n'
        'parameters { key: "TF_GRAPH_TAG" value { string_value: "gpu" } }\n'
        'parameters { key: "MAX_SESSION_SHARE_COUNT" value { string_value: "3" } }\n'
        'parameters { key: "TF_USE_PER_SESSION_THREADS" value { string_value: "no" } }'))
    assert (serving.signature, serving.tag, serving.share_count) == ("scaled", "gpu", 3)


@pytest.mark.parametrize(("parameter", "value", "message"), [
    ("TF_INIT_OPS_FILE", "init_ops.json", "parameter TF_INIT_OPS_FILE is not supported"),
    ("TF_USE_PER_SESSION_THREADS", "On", "parameter TF_USE_PER_SESSION_THREADS is not supported"),
    ("MAX_SESSION_SHARE_COUNT", "0", "MAX_SESSION_SHARE_COUNT must be a positive integer"),
])
def test_parameters_it_does_not_implement_fail_the_load_by_name(
        parameter: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Serving.from_config(config(
            f'parameters {{ key: "{parameter}" value {{ string_value: "{value}" }} }}'))


def test_a_graphdef_has_no_signature_to_name() -> None:
    with pytest.raises(InvalidArgument, match="TF_SIGNATURE_DEF names a SavedModel's graph"):
        Serving.from_config(config(
            'platform: "tensorflow_graphdef"\n'
            'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "x" } }'))


# --------------------------------------------------------------- auto-complete and checks


def test_a_batchable_signature_completes_to_tritons_default_batch_and_dynamic_batching() -> None:
    completed = complete_config(config(""), signature_program())
    assert (completed.platform, completed.backend) == ("tensorflow_savedmodel", "tensorflow")
    assert completed.max_batch_size == 4
    assert completed.HasField("dynamic_batching")
    assert [(e.name, list(e.dims)) for e in completed.input] == [("x", [16]), ("y", [16])]
    assert [e.name for e in completed.output] == ["sum", "product"]


def test_declared_outputs_are_completed_and_others_left_out() -> None:
    completed = complete_config(config('max_batch_size: 2\noutput [{ name: "sum" }]'),
                                signature_program())
    assert [(e.name, e.data_type, list(e.dims)) for e in completed.output] == [
        ("sum", FP32, [16])]
    assert not completed.HasField("dynamic_batching")


def test_a_fixed_shape_signature_does_not_batch() -> None:
    program: Any = FakeProgram([tensor("x", shape=(2, 3))], [tensor("y", shape=(2, 3))])
    completed = complete_config(config(""), program)
    assert completed.max_batch_size == 0
    assert list(completed.input[0].dims) == [2, 3]


def test_a_tensor_of_unknown_rank_must_be_declared() -> None:
    program: Any = FakeProgram([tensor("x", shape=None)], [tensor("y")])
    with pytest.raises(InvalidArgument, match="'x' has an unknown rank; declare its dims"):
        complete_config(config(""), program)
    completed = complete_config(
        config('input [{ name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] }]'), program)
    assert list(completed.input[0].dims) == [-1, 4]


@pytest.mark.parametrize(("text", "message"), [
    ('max_batch_size: 4\ninput [{ name: "z" data_type: TYPE_FP32 dims: [ 16 ] }]',
     r"unexpected input 'z', the program has the inputs: x, y"),
    ('max_batch_size: 4\ninput [{ name: "x" data_type: TYPE_INT32 dims: [ 16 ] },'
     '{ name: "y" data_type: TYPE_FP32 dims: [ 16 ] }]',
     r"input 'x': the configuration says TYPE_INT32 but the program has TYPE_FP32"),
    ('max_batch_size: 4\ninput [{ name: "x" data_type: TYPE_FP32 dims: [ 8 ] },'
     '{ name: "y" data_type: TYPE_FP32 dims: [ 16 ] }]',
     r"shape \[8\] does not match the program's shape \[16\]"),
    ('max_batch_size: 4\ninput [{ name: "x" data_type: TYPE_FP32 dims: [ 16 ] }]',
     r"the program needs the input\(s\) \['y'\], which the configuration does not list"),
])
def test_a_config_the_program_cannot_run_is_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        check_config(config(text), signature_program(), "the program")


def test_graphdef_names_may_carry_the_output_index() -> None:
    program: Any = FakeProgram([tensor("INPUT0:0", INT32)], [tensor("OUTPUT0", INT32)],
                               required={"INPUT0"})
    check_config(config('max_batch_size: 1\n'
                        'input [{ name: "INPUT0:0" data_type: TYPE_INT32 dims: [ 16 ] }]\n'
                        'output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }]'),
                 program, "the GraphDef")


# --------------------------------------------------------------- devices and sharing


def test_gpu_instances_need_a_gpu_tensorflow_sees() -> None:
    gpu = config('instance_group [{ name: "g" kind: KIND_GPU count: 1 gpus: [ 0 ] }]')
    with pytest.raises(Unavailable, match=r"instance group 'g' is KIND_GPU but TensorFlow "
                                          r"2\.21\.0 sees no GPU here"):
        instance_devices(gpu, 0, "2.21.0")


def test_instances_are_placed_count_per_listed_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPU ids are the server's device numbers, which a process with its list shares.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    devices = instance_devices(config(
        'instance_group [{ kind: KIND_CPU count: 2 }, { kind: KIND_GPU count: 1 gpus: [ 1, 0 ] }]'
    ), 2, "2.21.0")
    assert devices == ["/CPU:0", "/CPU:0", "/GPU:1", "/GPU:0"]


def test_max_session_share_count_sets_how_many_instances_share_a_program() -> None:
    loads: list[str] = []

    def load(device: str) -> Any:
        loads.append(device)
        return signature_program()

    first: Any = signature_program()
    completed = complete_config(config(""), first)
    plan = ExecutionPlan.from_config(completed, 1)
    model = TensorFlowModel(completed, plan, ["/CPU:0"] * 5, 2, load, first)
    programs = [model.create_instance(index)._program for index in range(5)]
    assert loads == ["/CPU:0", "/CPU:0"]  # the first program serves instances 0 and 1
    assert programs[0] is first and programs[1] is first
    assert programs[2] is programs[3] is not first
    assert programs[4] is not programs[2]


# --------------------------------------------------------------- threads and a missing TensorFlow


def test_tensorflow_pools_accept_zero_and_report_a_late_size(
        caplog: pytest.LogCaptureFixture) -> None:
    sizes = {"intra": 0, "inter": 0}
    initialized = False

    def setter(pool: str) -> Any:
        def set_size(threads: int) -> None:
            if initialized:
                raise RuntimeError(f"{pool} op parallelism cannot be modified after init")
            sizes[pool] = threads
        return set_size

    pools = Pools(set_intra=setter("intra"), set_inter=setter("inter"),
                  intra=lambda: sizes["intra"], inter=lambda: sizes["inter"])
    threads = ProcessThreads("tensorflow", "TF_NUM_INTRA_THREADS", "TF_NUM_INTER_THREADS",
                             minimum=0)
    threads.apply_to(pools, config('parameters { key: "TF_NUM_INTER_THREADS" '
                                   'value { string_value: "0" } }'), {"intra_op_threads": 1})
    assert sizes == {"intra": 1, "inter": 0}
    initialized = True
    with caplog.at_level(logging.WARNING):
        threads.apply_to(pools, config('parameters { key: "TF_NUM_INTRA_THREADS" '
                                       'value { string_value: "3" } }'), {})
    assert "TF_NUM_INTRA_THREADS 3 not applied" in caplog.text
    assert "already has 1 threads" in caplog.text
    assert PROCESS_THREADS is not threads


def test_without_tensorflow_only_its_models_are_unavailable(tmp_path: Path) -> None:
    def missing() -> Any:
        raise Unavailable(f"{MISSING_TENSORFLOW} (No module named 'tensorflow')")

    context = ModelContext("m", 1, tmp_path, config('platform: "tensorflow_savedmodel"'))
    with pytest.raises(Unavailable, match=r"tensorflow is not installed on this machine; "
                                          r"install inferd\[tensorflow\]"):
        TensorFlowBackend(import_tensorflow=missing).load_model(context)
