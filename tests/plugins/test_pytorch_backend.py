"""The pytorch backend, driven directly (no executor, no server): TorchScript and
``torch.export`` models written by the tests, Triton's naming rules, auto-complete from a
``.pt2`` signature, thread settings, devices and the no-copy input path."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk.backends import BackendRegistry, ModelContext
from inferd.plugins.backends.pytorch import PYTORCH_BACKEND, inferd_register_backends
from inferd.plugins.backends.pytorch.naming import (
    NamingConvention,
    bind_script_inputs,
    bind_script_outputs,
)
from inferd.plugins.backends.pytorch.threads import ThreadSettings
from inferd.protocols.errors import InferdError, InvalidArgument, Unavailable
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import from_numpy
from tests.services import import_or_missing

torch = import_or_missing("torch", "make setup installs it unless WITH_TORCH=0")
# Writing TorchScript files is what these tests do; torch 2.13 deprecates it.
# (pytest resets the backend's own filters for each test).
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated"),
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable"),
]

from inferd.plugins.backends.pytorch.backend import PyTorchBackend  # noqa: E402

FP32_IO = """
input [{ name: "%s" data_type: TYPE_FP32 dims: [ 4 ] },
       { name: "%s" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "%s" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "%s" data_type: TYPE_FP32 dims: [ 4 ] }]
"""


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class AddSubList(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [x + y, x - y]


class AddSubDict(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"sum": x + y, "diff": x - y}


class DictInput(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"] * 2 + inputs["b"]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class AddsOneInPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x


def parse_config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def save_script(folder: Path, module: torch.nn.Module) -> Path:
    (folder / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.script(module).save(str(folder / "1" / "model.pt"))
    return folder


def load(folder: Path, config_text: str, auto_complete: bool = True, **options: Any) -> Any:
    config = parse_config(f'name: "{folder.name}"\nbackend: "pytorch"\n{config_text}')
    context = ModelContext(
        name=folder.name, version=1, model_dir=folder, config=config,
        auto_complete=auto_complete, options=options,
    )
    return PyTorchBackend().load_model(context)


def fp32(name: str, values: Any) -> Tensor:
    return from_numpy(name, np.asarray(values, dtype=np.float32), "FP32")


def read_only(array: np.ndarray) -> np.ndarray:
    """An array like the executor hands over: a view of received bytes, not writable."""
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


def response(result: InferResponse | InferdError) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


def outputs(result: InferResponse | InferdError) -> dict[str, np.ndarray]:
    return {tensor.name: tensor.data for tensor in response(result).outputs}


def request(model: str, *inputs: Tensor, request_id: str = "") -> InferRequest:
    return InferRequest(model=model, id=request_id, inputs=inputs)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``torch.export`` programs, exported once for the module (an export takes a second)."""
    root = tmp_path_factory.mktemp("exported")
    batch = torch.export.Dim("batch", max=1024)
    examples = (torch.ones(2, 4), torch.ones(2, 4))
    for name, module, dynamic in (
        ("addsub", AddSub(), ({0: batch}, {0: batch})),
        ("addsub_dict", AddSubDict(), ({0: batch}, {0: batch})),
        ("addsub_fixed", AddSub(), None),
    ):
        program = torch.export.export(module, examples, dynamic_shapes=dynamic)
        (root / name / "1").mkdir(parents=True)
        torch.export.save(program, str(root / name / "1" / "model.pt2"))
    yield root


def load_exported(root: Path, name: str, config_text: str = "", auto_complete: bool = True
                  ) -> Any:
    return load(root / name, f'default_model_filename: "model.pt2"\n{config_text}',
                auto_complete=auto_complete)


# ------------------------------------------------------------------------------ plugin hook


def test_hook_registers_the_backend_by_import_path() -> None:
    registry = BackendRegistry()
    inferd_register_backends(registry)
    assert registry.for_platform("pytorch_libtorch") == PYTORCH_BACKEND
    assert registry.for_filename("model.pt") == PYTORCH_BACKEND
    assert PYTORCH_BACKEND.load_class() is PyTorchBackend


def test_the_hook_module_imports_no_torch() -> None:
    script = textwrap.dedent(
        """
        import sys
        import inferd.plugins.backends.pytorch
        assert "torch" not in sys.modules, "the hook module imported torch"
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr


def test_missing_torch_makes_the_model_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_script(tmp_path / "m", AddSub())
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(Unavailable, match=r"torch is not installed.*torch==2\.13\.0"):
        load(tmp_path / "m", FP32_IO % ("x", "y", "OUTPUT__0", "OUTPUT__1"))


# ---------------------------------------------------------------------- TorchScript naming


def test_ordinal_names_run_requests_of_different_batch_sizes_as_one_batch(
    tmp_path: Path,
) -> None:
    model = load(save_script(tmp_path / "m", AddSub()),
                 "max_batch_size: 8\n" + FP32_IO % ("INPUT__1", "INPUT__0", "OUTPUT__1",
                                                    "OUTPUT__0"))
    instance = model.create_instance(0)
    x, y = np.arange(12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 10, np.float32)
    results = instance.execute([
        request("m", fp32("INPUT__0", x[:1]), fp32("INPUT__1", y[:1]), request_id="a"),
        request("m", fp32("INPUT__0", x[1:]), fp32("INPUT__1", y[1:]), request_id="b"),
    ])
    assert [response(r).id for r in results] == ["a", "b"]
    both = [outputs(r) for r in results]
    np.testing.assert_array_equal(np.concatenate([o["OUTPUT__0"] for o in both]), x + y)
    np.testing.assert_array_equal(np.concatenate([o["OUTPUT__1"] for o in both]), x - y)
    assert instance.phase_ns is not None


def test_forward_argument_names_bind_by_name_whatever_their_order(tmp_path: Path) -> None:
    model = load(save_script(tmp_path / "m", AddSub()), FP32_IO % ("y", "x", "SUM__0", "DIFF__1"))
    result = outputs(model.create_instance(0).execute(
        [request("m", fp32("x", [5, 5, 5, 5]), fp32("y", [1, 2, 3, 4]))]
    )[0])
    np.testing.assert_array_equal(result["SUM__0"], [6, 7, 8, 9])
    np.testing.assert_array_equal(result["DIFF__1"], [4, 3, 2, 1])


def test_names_that_fit_no_convention_bind_by_config_order_with_tritons_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        model = load(save_script(tmp_path / "m", AddSub()),
                     FP32_IO % ("first__x", "second", "SUM", "DIFF"))
    assert (
        "input 'first__x' or previous input(s) are neither an input argument to the model 'm' "
        "nor do they follow the <name>__<index> naming convention. Falling back to enforcing "
        "strict ordering from model configuration."
    ) in caplog.text
    result = outputs(model.create_instance(0).execute(
        [request("m", fp32("first__x", [5, 5, 5, 5]), fp32("second", [1, 1, 1, 1]))]
    )[0])
    np.testing.assert_array_equal(result["SUM"], [6, 6, 6, 6])
    np.testing.assert_array_equal(result["DIFF"], [4, 4, 4, 4])


def test_the_naming_rules_follow_triton() -> None:
    assert bind_script_inputs("m", ["x", "y"], ["x", "y"]).convention is (
        NamingConvention.FORWARD_ARGUMENT
    )
    named = bind_script_inputs("m", ["IN__1", "IN__0"], ["x", "y"])
    assert named.convention is NamingConvention.NAMED_INDEX
    assert named.positions == {"IN__1": 1, "IN__0": 0}
    # One name that is not an argument makes the whole list fall back to the next rule.
    mixed = bind_script_inputs("m", ["x", "INPUT__0"], ["x", "y"])
    assert mixed.convention is NamingConvention.STRICT_CONFIG_ORDERING
    assert mixed.warning is None  # "x" has no "__": Triton falls back without a word
    outputs_binding = bind_script_outputs("m", ["OUT__x"], 1)
    assert outputs_binding.convention is NamingConvention.STRICT_CONFIG_ORDERING
    assert outputs_binding.warning == (
        "output 'OUT__x' or previous output(s) of the model 'm' do not follow the "
        "<name>__<index> naming convention. Falling back to enforcing strict ordering from "
        "model configuration."
    )


def test_an_input_count_other_than_forwards_fails_with_tritons_message(tmp_path: Path) -> None:
    config = """
    input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }]
    output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }]
    """
    with pytest.raises(InvalidArgument, match=(
        r"^unable to load model 'm', configuration expects 1 inputs, model provides 2$"
    )):
        load(save_script(tmp_path / "m", AddSub()), config)


def test_an_index_past_the_arguments_or_the_result_fails_the_load(tmp_path: Path) -> None:
    folder = save_script(tmp_path / "m", AddSub())
    with pytest.raises(InvalidArgument, match=r"input 'INPUT__2' refers to forward\(\) "
                                              r"argument 2 .* only 2 \(x, y\)"):
        load(folder, FP32_IO % ("INPUT__0", "INPUT__2", "OUTPUT__0", "OUTPUT__1"))
    with pytest.raises(InvalidArgument, match=r"output 'OUTPUT__5' refers to forward\(\) result "
                                              r"element 5 .* only 2"):
        load(folder, FP32_IO % ("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__5"))
    with pytest.raises(InvalidArgument, match=r"inputs 'A__0' and 'B__0' both refer"):
        load(folder, FP32_IO % ("A__0", "B__0", "OUTPUT__0", "OUTPUT__1"))


def test_a_list_result_is_read_by_position(tmp_path: Path) -> None:
    model = load(save_script(tmp_path / "m", AddSubList()),
                 FP32_IO % ("x", "y", "OUTPUT__1", "OUTPUT__0"))
    result = outputs(model.create_instance(0).execute(
        [request("m", fp32("x", [2, 2, 2, 2]), fp32("y", [1, 1, 1, 1]))]
    )[0])
    np.testing.assert_array_equal(result["OUTPUT__0"], [3, 3, 3, 3])
    np.testing.assert_array_equal(result["OUTPUT__1"], [1, 1, 1, 1])


def test_a_dict_result_is_refused_at_load_with_tritons_message(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"forward\(\) returns Dict\[str, Tensor\]: "
                                              r"output must be of type Tensor, List\[str\] or "
                                              r"Tuple .* not be a List / Dictionary"):
        load(save_script(tmp_path / "m", AddSubDict()),
             FP32_IO % ("x", "y", "OUTPUT__0", "OUTPUT__1"))


def test_a_dict_input_takes_the_configured_names_as_keys(tmp_path: Path) -> None:
    config = """
    input [{ name: "b" data_type: TYPE_FP32 dims: [ 2 ] },
           { name: "a" data_type: TYPE_FP32 dims: [ 2 ] }]
    output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] }]
    """
    model = load(save_script(tmp_path / "m", DictInput()), config)
    result = outputs(model.create_instance(0).execute(
        [request("m", fp32("a", [1, 2]), fp32("b", [10, 20]))]
    )[0])
    np.testing.assert_array_equal(result["OUTPUT__0"], [12, 24])


def test_a_torchscript_config_must_list_its_tensors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"TorchScript file \(model\.pt\) does not say .* "
                                              r"must list every input .* takes \(x, y\)"):
        load(save_script(tmp_path / "m", AddSub()), "")


def test_string_and_unsigned_wide_tensors_are_refused(tmp_path: Path) -> None:
    folder = save_script(tmp_path / "m", Identity())
    for data_type, pattern in (
        ("TYPE_STRING", r"unsupported datatype TYPE_STRING for input 'x' for model 'm' "
                        r"\(inferd's pytorch backend runs tensors of numbers"),
        ("TYPE_UINT32", r"^unsupported datatype TYPE_UINT32 for input 'x' for model 'm'$"),
    ):
        config = f"""
        input [{{ name: "x" data_type: {data_type} dims: [ 2 ] }}]
        output [{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] }}]
        """
        with pytest.raises(InvalidArgument, match=pattern):
            load(folder, config)


def test_an_output_whose_dtype_differs_from_the_config_fails_its_requests(tmp_path: Path) -> None:
    config = """
    input [{ name: "x" data_type: TYPE_FP32 dims: [ 2 ] }]
    output [{ name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 2 ] }]
    """
    model = load(save_script(tmp_path / "m", Identity()), config)
    (result,) = model.create_instance(0).execute([request("m", fp32("x", [1, 2]))])
    assert isinstance(result, InferdError)
    assert result.message.startswith("PyTorch execute failure: output 'OUTPUT__0'")
    assert "torch.float32 but the configuration says TYPE_INT32" in result.message


def test_a_missing_or_broken_model_file_fails_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    io = FP32_IO % ("x", "y", "OUTPUT__0", "OUTPUT__1")
    with pytest.raises(InvalidArgument, match=r"model file .*m/1/model\.pt does not exist"):
        load(tmp_path / "m", io)
    (tmp_path / "m" / "1" / "model.pt").write_bytes(b"not a model")
    with pytest.raises(InvalidArgument, match=r"torch\.jit\.load could not load .*model\.pt"):
        load(tmp_path / "m", io)


# ------------------------------------------------------------------------ no-copy inputs


def test_read_only_inputs_reach_torch_and_come_back_without_a_copy(tmp_path: Path) -> None:
    config = """
    input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]
    output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }]
    """
    model = load(save_script(tmp_path / "m", Identity()), config)
    array = read_only(np.arange(4, dtype=np.float32))
    (result,) = model.create_instance(0).execute([request("m", fp32("x", array))])
    assert np.shares_memory(outputs(result)["OUTPUT__0"], array)


def test_a_model_that_writes_its_input_gets_a_copy_of_a_read_only_one(tmp_path: Path) -> None:
    config = """
    input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]
    output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }]
    """
    model = load(save_script(tmp_path / "m", AddsOneInPlace()), config)
    array = read_only(np.zeros(4, dtype=np.float32))
    (result,) = model.create_instance(0).execute([request("m", fp32("x", array))])
    np.testing.assert_array_equal(outputs(result)["OUTPUT__0"], [1, 1, 1, 1])
    np.testing.assert_array_equal(array, [0, 0, 0, 0])


def test_bf16_travels_as_raw_bits(tmp_path: Path) -> None:
    config = """
    input [{ name: "x" data_type: TYPE_BF16 dims: [ 3 ] }]
    output [{ name: "OUTPUT__0" data_type: TYPE_BF16 dims: [ 3 ] }]
    """
    model = load(save_script(tmp_path / "m", Identity()), config)
    tensor = from_numpy("x", np.asarray([1.0, -2.5, 3.0], dtype=np.float32), "BF16")
    (result,) = model.create_instance(0).execute([request("m", tensor)])
    (output,) = response(result).outputs
    assert output.datatype == "BF16"
    np.testing.assert_array_equal(output.data, tensor.data)


# -------------------------------------------------------------------- torch.export programs


def test_auto_complete_fills_an_exported_programs_tensors(exported: Path) -> None:
    model = load_exported(exported, "addsub")
    config = model.config
    assert config.max_batch_size == 0
    assert [(e.name, e.data_type, list(e.dims)) for e in config.input] == [
        ("x", model_config_pb2.TYPE_FP32, [-1, 4]), ("y", model_config_pb2.TYPE_FP32, [-1, 4]),
    ]
    assert [e.name for e in config.output] == ["OUTPUT__0", "OUTPUT__1"]
    batched = load_exported(exported, "addsub", "max_batch_size: 8").config
    assert batched.max_batch_size == 8
    assert [list(e.dims) for e in (*batched.input, *batched.output)] == [[4]] * 4
    result = outputs(load_exported(exported, "addsub", "max_batch_size: 8").create_instance(0)
                     .execute([request("addsub", fp32("x", [[1, 2, 3, 4]] * 3),
                                       fp32("y", [[1, 1, 1, 1]] * 3))])[0])
    np.testing.assert_array_equal(result["OUTPUT__0"], [[2, 3, 4, 5]] * 3)
    np.testing.assert_array_equal(result["OUTPUT__1"], [[0, 1, 2, 3]] * 3)


def test_a_dict_result_names_its_outputs_by_key(exported: Path) -> None:
    model = load_exported(exported, "addsub_dict")
    assert [e.name for e in model.config.output] == ["sum", "diff"]
    result = outputs(model.create_instance(0).execute(
        [request("addsub_dict", fp32("x", [[3, 3, 3, 3]]), fp32("y", [[1, 1, 1, 1]]))]
    )[0])
    np.testing.assert_array_equal(result["sum"], [[4, 4, 4, 4]])
    np.testing.assert_array_equal(result["diff"], [[2, 2, 2, 2]])


def test_exported_tensors_answer_to_tritons_ordinal_and_forward_names(exported: Path) -> None:
    config = """
    max_batch_size: 4
    input [{ name: "ARGS[1]" }, { name: "INPUT__0" }]
    output [{ name: "RESULT[diff]" }, { name: "OUTPUT__0" }]
    """
    model = load_exported(exported, "addsub_dict", config)
    assert [e.data_type for e in model.config.input] == [model_config_pb2.TYPE_FP32] * 2
    result = outputs(model.create_instance(0).execute(
        [request("addsub_dict", fp32("INPUT__0", [[3, 3, 3, 3]]), fp32("ARGS[1]", [[1] * 4]))]
    )[0])
    np.testing.assert_array_equal(result["OUTPUT__0"], [[4, 4, 4, 4]])
    np.testing.assert_array_equal(result["RESULT[diff]"], [[2, 2, 2, 2]])


def test_a_name_the_exported_program_does_not_have_fails_the_load(exported: Path) -> None:
    with pytest.raises(InvalidArgument, match=(
        r"configuration input 'z' is not an input of the exported program; its inputs are "
        r"x \(INPUT__0 / ARGS\[0\]\), y \(INPUT__1 / ARGS\[1\]\)"
    )):
        load_exported(exported, "addsub", 'input [{ name: "z" }, { name: "x" }]')
    with pytest.raises(InvalidArgument, match=r"input\(s\) \['y'\] are missing"):
        load_exported(exported, "addsub", 'input [{ name: "x" }]')


def test_exported_signatures_are_checked_against_the_config(exported: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"input 'x': the configuration says TYPE_INT32 "
                                              r"but the exported program has TYPE_FP32"):
        load_exported(exported, "addsub", 'input [{ name: "x" data_type: TYPE_INT32 }]')
    with pytest.raises(InvalidArgument, match=r"shape \[2, 4\] has no dynamic first dimension"):
        load_exported(exported, "addsub_fixed", "max_batch_size: 2")
    with pytest.raises(InvalidArgument, match=r"shape \[5\] does not match the exported "
                                              r"program's shape \[4\]"):
        load_exported(exported, "addsub", 'max_batch_size: 2\ninput [{ name: "x" dims: [5] }]')


def test_without_auto_complete_the_config_must_say_everything(exported: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"input\(s\) \['x', 'y'\] are missing"):
        load_exported(exported, "addsub", auto_complete=False)


# --------------------------------------------------------------- threads and devices


class FakeTorch:
    """Records what the backend asks of torch's thread pools."""

    def __init__(self, interop_frozen: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.interop_frozen = interop_frozen

    def set_num_threads(self, threads: int) -> None:
        self.calls.append(("intra", threads))

    def set_num_interop_threads(self, threads: int) -> None:
        if self.interop_frozen:
            raise RuntimeError("Error: cannot set number of interop threads after parallel work")
        self.calls.append(("inter", threads))

    def get_num_interop_threads(self) -> int:
        return 2


def thread_config(name: str, **parameters: str) -> model_config_pb2.ModelConfig:
    lines = [f'name: "{name}"'] + [
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}'
        for k, v in parameters.items()
    ]
    return parse_config("\n".join(lines))


def test_thread_counts_are_set_once_per_process_by_the_first_model_that_says(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, fake = ThreadSettings(), FakeTorch()
    as_torch: Any = fake
    settings.apply(as_torch, thread_config("a"), {"intra_op_threads": 3})
    settings.apply(as_torch, thread_config("b", INTRA_OP_THREAD_COUNT="2",
                                           INTER_OP_THREAD_COUNT="1"), {})
    with caplog.at_level(logging.WARNING):
        settings.apply(as_torch, thread_config("c", INTRA_OP_THREAD_COUNT="5",
                                               INTER_OP_THREAD_COUNT="4"), {})
    assert fake.calls == [("intra", 3), ("intra", 2), ("inter", 1)]
    assert "INTRA_OP_THREAD_COUNT 5 ignored" in caplog.text
    assert "model 'b' already set 2" in caplog.text
    assert "INTER_OP_THREAD_COUNT 4 ignored" in caplog.text


def test_an_inter_op_count_after_parallel_work_is_reported_not_applied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake: Any = FakeTorch(interop_frozen=True)
    with caplog.at_level(logging.WARNING):
        ThreadSettings().apply(fake, thread_config("a", INTER_OP_THREAD_COUNT="3"), {})
    assert "INTER_OP_THREAD_COUNT 3 not applied" in caplog.text
    assert "already has 2 threads" in caplog.text


def test_a_thread_count_must_be_a_positive_integer() -> None:
    with pytest.raises(InvalidArgument, match=r"INTRA_OP_THREAD_COUNT must be a positive "
                                              r"integer, got 'many'"):
        ThreadSettings().apply(SimpleNamespace(), thread_config("a", INTRA_OP_THREAD_COUNT="many"),
                               {})


def test_a_gpu_instance_without_cuda_fails_the_load_naming_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = FP32_IO % ("x", "y", "OUTPUT__0", "OUTPUT__1") + (
        'instance_group [{ name: "m_gpu" kind: KIND_GPU count: 1 }]'
    )
    with pytest.raises(InvalidArgument, match=r"instance group 'm_gpu' is KIND_GPU but torch "
                                              r".* sees no CUDA GPU here .* does not fall back "
                                              r"to the CPU"):
        load(save_script(tmp_path / "m", AddSub()), config)
