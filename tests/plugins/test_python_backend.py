"""The python backend, driven directly (no executor, no server): Triton-style ``model.py`` files
loaded from a temporary repository, executed, auto-completed and closed, and the
``triton_python_backend_utils`` module they import."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inferd.kernel.modelconfig.reading import normalize
from inferd.kernel.sdk.backends import BackendRegistry, Instance, Model, ModelContext
from inferd.plugins.backends.python import PYTHON_BACKEND
from inferd.plugins.backends.python import triton_python_backend_utils as pb_utils
from inferd.plugins.backends.python.backend import PythonBackend
from inferd.protocols.errors import ErrorCode, InferdError, InvalidArgument, NotFound
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import from_numpy

# Models shared with tests/e2e/test_python_backend.py, as a Triton user writes them.
PYTHON_MODELS = Path(__file__).parent / "python_models"

ONE_IO_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""

# Fails a request whose input holds a negative number, the way Triton's docs show.
CHECKING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (values < 0).any():
                code = pb_utils.TritonError.INVALID_ARG if values[0] == -2 else None
                error = (pb_utils.TritonError("bad input") if code is None
                         else pb_utils.TritonError("bad input", code))
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", values * 2)]))
        return responses
"""

RAISING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("boom")
"""

SHORT_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return []
"""

# Records its initialize args and finalize in files of the model folder, and counts how many
# times its module was executed (each instance should get a fresh module).
LIFECYCLE_MODEL = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

IMPORTS = 0
IMPORTS += 1


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.folder = args["model_repository"]
        recorded = dict(args, model_dir=pb_utils.get_model_dir())
        with open(os.path.join(self.folder, "args-" + args["model_instance_name"]), "w") as f:
            json.dump(recorded, f)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([float(IMPORTS)],
                                                                        dtype=np.float32))])
            for _ in requests
        ]

    def finalize(self):
        name = "finalized-" + self.args["model_instance_name"]
        open(os.path.join(self.folder, name), "w").close()
"""

ASYNC_MODEL = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.01)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)])
            for r in requests
        ]
"""

AUTO_COMPLETE_CONFIG = """
name: "auto"
backend: "python"
"""

AUTO_COMPLETE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}]
        outputs = [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}]
        config = auto_complete_model_config.as_dict()
        declared = {entry["name"] for entry in config["input"]}
        for entry in inputs:
            if entry["name"] not in declared:
                auto_complete_model_config.add_input(entry)
        for entry in outputs:
            auto_complete_model_config.add_output(entry)
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""

# Calls model "other" with its input and returns other's OUT0 as its own OUT; an error from
# "other" is passed on as this request's error.
BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(
                model_name="other",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT0"],
            )
            result = bls.exec()
            if result.has_error():
                responses.append(pb_utils.InferenceResponse(error=result.error()))
                continue
            out = pb_utils.get_output_tensor_by_name(result, "OUT0")
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", out.as_numpy())]))
        return responses
"""

ASYNC_BLS_MODEL = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN")
            pending = [
                pb_utils.InferenceRequest(
                    model_name=name, inputs=[values], requested_output_names=["OUT0"]
                ).async_exec()
                for name in ("other", "another")
            ]
            first, second = await asyncio.gather(*pending)
            total = (pb_utils.get_output_tensor_by_name(first, "OUT0").as_numpy()
                     + pb_utils.get_output_tensor_by_name(second, "OUT0").as_numpy())
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", total)]))
        return responses
"""


def write_model(root: Path, name: str, config_text: str, model_text: str) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(config_text))
    (folder / "1" / "model.py").write_text(textwrap.dedent(model_text))
    return folder


def context_for(
    folder: Path,
    *,
    auto_complete: bool = True,
    infer: Callable[[InferRequest, float | None], InferResponse] | None = None,
) -> ModelContext:
    """The context the executor would build: the config normalized as the repository does."""
    registry = BackendRegistry()
    registry.add(PYTHON_BACKEND)
    config = text_format.Parse(
        (folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    config = normalize(
        config, folder_name=folder.name, backends=registry,
        default_filename_present=lambda filename: (folder / "1" / filename).exists(),
    )
    return ModelContext(
        name=folder.name, version=1, model_dir=folder, config=config,
        auto_complete=auto_complete, infer=infer,
    )


def load(
    root: Path, name: str, config_text: str, model_text: str, **options: Any
) -> tuple[Model, Instance]:
    return load_folder(write_model(root, name, config_text, model_text), **options)


def load_shared(root: Path, name: str, **options: Any) -> tuple[Model, Instance]:
    """The ``name`` model of ``python_models``, loaded from a copy under ``root``."""
    return load_folder(Path(shutil.copytree(PYTHON_MODELS / name, root / name)), **options)


def load_folder(folder: Path, **options: Any) -> tuple[Model, Instance]:
    model = PythonBackend().load_model(context_for(folder, **options))
    return model, model.create_instance(0)


def fp32(name: str, values: Sequence[float]) -> Tensor:
    return from_numpy(name, np.array(values, dtype=np.float32))


def request(
    model: str, *inputs: Tensor, outputs: tuple[str, ...] = (), request_id: str = ""
) -> InferRequest:
    return InferRequest(model=model, inputs=inputs, outputs=outputs, id=request_id)


def response(result: InferResponse | InferdError) -> dict[str, np.ndarray]:
    assert isinstance(result, InferResponse), result
    return {tensor.name: tensor.data for tensor in result.outputs}


# --------------------------------------------------------------------------------- execution


def test_add_sub_example_runs_unchanged(tmp_path: Path) -> None:
    model, instance = load_shared(tmp_path, "add_sub")
    first = request("add_sub", fp32("INPUT0", [1, 2, 3, 4]), fp32("INPUT1", [4, 3, 2, 1]),
                    request_id="a")
    second = request("add_sub", fp32("INPUT0", [0.5] * 4), fp32("INPUT1", [0.25] * 4))
    results = instance.execute([first, second])
    assert len(results) == 2
    assert isinstance(results[0], InferResponse)
    assert results[0].id == "a" and results[0].model == "add_sub" and results[0].version == "1"
    assert [t.name for t in results[0].outputs] == ["OUTPUT0", "OUTPUT1"]
    assert all(t.datatype == "FP32" for t in results[0].outputs)
    np.testing.assert_array_equal(response(results[0])["OUTPUT0"], [5, 5, 5, 5])
    np.testing.assert_array_equal(response(results[0])["OUTPUT1"], [-3, -1, 1, 3])
    np.testing.assert_array_equal(response(results[1])["OUTPUT0"], [0.75] * 4)
    np.testing.assert_array_equal(response(results[1])["OUTPUT1"], [0.25] * 4)
    instance.close()
    model.unload()


def test_only_requested_outputs_are_returned(tmp_path: Path) -> None:
    _, instance = load_shared(tmp_path, "add_sub")
    only = request("add_sub", fp32("INPUT0", [1] * 4), fp32("INPUT1", [2] * 4),
                   outputs=("OUTPUT1",))
    (result,) = instance.execute([only])
    assert list(response(result)) == ["OUTPUT1"]
    np.testing.assert_array_equal(response(result)["OUTPUT1"], [-1] * 4)
    instance.close()


def test_bytes_model_gets_bytes_and_returns_strings(tmp_path: Path) -> None:
    _, instance = load_shared(tmp_path, "strings")
    texts = from_numpy("TEXT", np.array([b"hello", b"w\xc3\xb6rld", b""], dtype=object), "BYTES")
    (result,) = instance.execute([request("strings", texts)])
    assert isinstance(result, InferResponse)
    by_name = {tensor.name: tensor for tensor in result.outputs}
    assert by_name["LENGTH"].datatype == "INT32"
    assert by_name["LENGTH"].data.dtype == np.int32
    np.testing.assert_array_equal(by_name["LENGTH"].data, [5, 6, 0])
    assert by_name["UPPER"].datatype == "BYTES"
    assert list(by_name["UPPER"].data) == [b"HELLO", "WÖRLD".encode(), b""]
    instance.close()


def test_error_response_fails_only_its_request(tmp_path: Path) -> None:
    _, instance = load(tmp_path, "checking", ONE_IO_CONFIG.format(name="checking"),
                       CHECKING_MODEL)
    results = instance.execute([
        request("checking", fp32("IN", [1, 2])),
        request("checking", fp32("IN", [-1, 2])),
        request("checking", fp32("IN", [-2, 2])),
    ])
    np.testing.assert_array_equal(response(results[0])["OUT"], [2, 4])
    # TritonError's default code is INTERNAL; INVALID_ARG is a client error.
    assert isinstance(results[1], InferdError)
    assert results[1].code == ErrorCode.INTERNAL and results[1].message == "bad input"
    assert isinstance(results[2], InvalidArgument) and results[2].message == "bad input"
    instance.close()


def test_exception_in_execute_fails_every_request_of_the_call(tmp_path: Path) -> None:
    """In Triton's python backend's words: the instance, then the exception as pybind11
    words it, with the model's frames after "At:"."""
    _, instance = load(tmp_path, "raising", ONE_IO_CONFIG.format(name="raising"), RAISING_MODEL)
    results = instance.execute([request("raising", fp32("IN", [1])),
                                request("raising", fp32("IN", [2]))])
    assert len(results) == 2
    for result in results:
        assert isinstance(result, InferdError) and result.code == ErrorCode.INTERNAL
        assert result.message == (
            "Failed to process the request(s) for model 'raising_0_0', message: "
            f"ValueError: boom\n\nAt:\n  {tmp_path / 'raising' / '1' / 'model.py'}(7): execute\n"
        )
    instance.close()


def test_wrong_number_of_responses_fails_every_request(tmp_path: Path) -> None:
    _, instance = load(tmp_path, "short", ONE_IO_CONFIG.format(name="short"), SHORT_MODEL)
    results = instance.execute([request("short", fp32("IN", [1]))] * 2)
    assert len(results) == 2
    for result in results:
        assert isinstance(result, InferdError)
        assert "Number of InferenceResponse objects do not match" in result.message
        assert "InferenceRequest(s) size is:2, and InferenceResponse(s) size is:0" in result.message
    instance.close()


def test_async_execute_runs_on_the_instance_loop(tmp_path: Path) -> None:
    _, instance = load(tmp_path, "async", ONE_IO_CONFIG.format(name="async"), ASYNC_MODEL)
    for _ in range(2):  # the instance's loop is reused across calls
        (result,) = instance.execute([request("async", fp32("IN", [1, 2]))])
        np.testing.assert_array_equal(response(result)["OUT"], [2, 3])
    instance.close()


def test_python_instances_never_run_on_the_event_loop(tmp_path: Path) -> None:
    _, instance = load_shared(tmp_path, "add_sub")
    assert instance.runs_on_event_loop is False
    instance.close()


# --------------------------------------------------------------------------------- lifecycle


def test_initialize_args_fresh_module_per_instance_and_finalize(tmp_path: Path) -> None:
    config = ONE_IO_CONFIG.format(name="life") + 'instance_group [ { count: 2 kind: KIND_CPU } ]\n'
    folder = write_model(tmp_path, "life", config, LIFECYCLE_MODEL)
    model = PythonBackend().load_model(context_for(folder))
    instances = [model.create_instance(0), model.create_instance(1)]
    args = json.loads((folder / "args-life_0_0").read_text())
    assert args["model_name"] == "life"
    assert args["model_version"] == "1"
    assert args["model_repository"] == str(folder)
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert json.loads(args["model_config"])["input"][0]["name"] == "IN"
    assert args["model_dir"] == str(folder / "1")
    assert json.loads((folder / "args-life_0_1").read_text())["model_instance_name"] == "life_0_1"
    for instance in instances:
        # Each instance imported model.py itself: its module counter is 1, not 2.
        (result,) = instance.execute([request("life", fp32("IN", [0]))])
        np.testing.assert_array_equal(response(result)["OUT"], [1.0])
    assert not (folder / "finalized-life_0_0").exists()
    for instance in instances:
        instance.close()
    model.unload()
    assert (folder / "finalized-life_0_0").exists() and (folder / "finalized-life_0_1").exists()


def test_auto_complete_config_fills_the_config(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "auto", AUTO_COMPLETE_CONFIG, AUTO_COMPLETE_MODEL)
    model = PythonBackend().load_model(context_for(folder))
    config = model.config
    assert config.max_batch_size == 8
    assert config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("IN", [4])]
    assert [(t.name, t.data_type) for t in config.output] == [("OUT", model_config_pb2.TYPE_FP32)]
    assert config.backend == "python" and config.name == "auto"
    instance = model.create_instance(0)
    batch = from_numpy("IN", np.ones((2, 4), dtype=np.float32))
    (result,) = instance.execute([request("auto", batch)])
    assert response(result)["OUT"].shape == (2, 4)
    instance.close()


def test_auto_complete_is_skipped_when_disabled(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "auto", AUTO_COMPLETE_CONFIG, AUTO_COMPLETE_MODEL)
    model = PythonBackend().load_model(context_for(folder, auto_complete=False))
    assert not model.config.input and model.config.max_batch_size == 0
    model.unload()


def test_auto_complete_may_not_change_declared_tensors(tmp_path: Path) -> None:
    config = AUTO_COMPLETE_CONFIG + 'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
    folder = write_model(tmp_path, "auto", config, AUTO_COMPLETE_MODEL.replace(
        'if entry["name"] not in declared', "if True"))
    with pytest.raises(InvalidArgument, match="configuration expects datatype TYPE_INT32"):
        PythonBackend().load_model(context_for(folder))


def test_load_failures_name_the_problem(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    (missing / "1").mkdir(parents=True)
    (missing / "config.pbtxt").write_text(ONE_IO_CONFIG.format(name="missing"))
    with pytest.raises(InvalidArgument, match="Python model file not found"):
        PythonBackend().load_model(context_for(missing))
    no_class = write_model(tmp_path, "noclass", ONE_IO_CONFIG.format(name="noclass"), "x = 1\n")
    with pytest.raises(InvalidArgument, match="defines no class TritonPythonModel"):
        PythonBackend().load_model(context_for(no_class))
    broken = write_model(tmp_path, "broken", ONE_IO_CONFIG.format(name="broken"),
                         "import no_such_module_here\n")
    with pytest.raises(InvalidArgument, match="ModuleNotFoundError"):
        PythonBackend().load_model(context_for(broken))
    failing_init = write_model(
        tmp_path, "badinit", ONE_IO_CONFIG.format(name="badinit"),
        "class TritonPythonModel:\n    def initialize(self, args):\n"
        "        raise RuntimeError('no weights')\n",
    )
    model = PythonBackend().load_model(context_for(failing_init))
    with pytest.raises(InvalidArgument, match="initialize failed: RuntimeError: no weights"):
        model.create_instance(0)


# --------------------------------------------------------------------------------------- BLS


def fake_server(calls: list[InferRequest]) -> Callable[[InferRequest, float | None], InferResponse]:
    """A server whose "other" model doubles IN (as OUT0) and "another" adds 10; any other
    model is unknown."""

    def infer(bls_request: InferRequest, timeout: float | None) -> InferResponse:
        calls.append(bls_request)
        values = bls_request.inputs[0].data
        if bls_request.model == "other":
            result = values * 2
        elif bls_request.model == "another":
            result = values + 10
        else:
            raise NotFound(f"Request for unknown model: '{bls_request.model}' is not found")
        return InferResponse(bls_request.model, "1", (from_numpy("OUT0", result),))

    return infer


def test_bls_exec_calls_the_server(tmp_path: Path) -> None:
    calls: list[InferRequest] = []
    _, instance = load(tmp_path, "bls", ONE_IO_CONFIG.format(name="bls"), BLS_MODEL,
                       infer=fake_server(calls))
    original = fp32("IN", [1, 2, 3])
    (result,) = instance.execute([request("bls", original)])
    np.testing.assert_array_equal(response(result)["OUT"], [2, 4, 6])
    (sent,) = calls
    assert sent.model == "other" and sent.outputs == ("OUT0",) and sent.version == ""
    assert sent.inputs[0] is original  # the request's tensor is passed on, not copied
    instance.close()


def test_bls_errors_come_back_as_error_responses(tmp_path: Path) -> None:
    calls: list[InferRequest] = []
    text = BLS_MODEL.replace('model_name="other"', 'model_name="nowhere"')
    _, instance = load(tmp_path, "bls", ONE_IO_CONFIG.format(name="bls"), text,
                       infer=fake_server(calls))
    (result,) = instance.execute([request("bls", fp32("IN", [1]))])
    assert isinstance(result, NotFound)
    assert result.message == "Request for unknown model: 'nowhere' is not found"
    instance.close()


def test_async_bls_runs_requests_concurrently(tmp_path: Path) -> None:
    calls: list[InferRequest] = []
    _, instance = load(tmp_path, "bls", ONE_IO_CONFIG.format(name="bls"), ASYNC_BLS_MODEL,
                       infer=fake_server(calls))
    (result,) = instance.execute([request("bls", fp32("IN", [1, 2]))])
    np.testing.assert_array_equal(response(result)["OUT"], [13, 16])
    assert sorted(call.model for call in calls) == ["another", "other"]
    instance.close()


def test_bls_without_a_server_is_an_error_response_of_the_model(tmp_path: Path) -> None:
    _, instance = load(tmp_path, "bls", ONE_IO_CONFIG.format(name="bls"), BLS_MODEL)
    (result,) = instance.execute([request("bls", fp32("IN", [1]))])
    assert isinstance(result, InferdError)
    assert "BLS requests need a running inferd server" in result.message
    instance.close()


# ---------------------------------------------------------------------------- pb_utils itself


def test_tensor_api() -> None:
    tensor = pb_utils.Tensor("X", np.arange(6, dtype=np.float32).reshape(2, 3))
    assert tensor.name() == "X" and tensor.shape() == [2, 3] and tensor.is_cpu()
    assert tensor.triton_dtype() == 11  # TRITONSERVER_TYPE_FP32
    assert pb_utils.Tensor("S", np.array([b"a"], dtype=object)).triton_dtype() == 13
    round_trip = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    np.testing.assert_array_equal(round_trip.as_numpy(), tensor.as_numpy())
    np.testing.assert_array_equal(np.from_dlpack(tensor), tensor.as_numpy())
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("", np.zeros(1))


def test_request_tensors_are_writable_as_triton_gives_them() -> None:
    read_only = np.frombuffer(np.arange(3, dtype=np.float32).tobytes(), dtype=np.float32)
    wrapped = pb_utils.Tensor.from_inferd(Tensor("IN", "FP32", (3,), read_only))
    array = wrapped.as_numpy()
    array *= 2  # would raise on the read-only request buffer
    np.testing.assert_array_equal(wrapped.to_inferd().data, [0, 2, 4])
    other = pb_utils.Tensor.from_inferd(Tensor("IN", "FP32", (3,), read_only))
    np.testing.assert_array_equal(np.from_dlpack(other), [0, 1, 2])  # numpy refuses read-only


def test_output_datatype_mismatch_across_kinds_is_refused() -> None:
    tensor = pb_utils.Tensor("OUT", np.array([1.5], dtype=np.float64))
    assert tensor.to_inferd("FP32").data.dtype == np.float32
    with pytest.raises(InferdError, match="holds FP64 data but the model configuration declares"):
        tensor.to_inferd("INT32")


def test_triton_error_codes() -> None:
    error = pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND)
    assert error.message() == "gone" and error.code() == pb_utils.TritonError.NOT_FOUND
    assert isinstance(error.to_inferd(), NotFound)
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    assert pb_utils.TritonError("x", pb_utils.TritonError.UNKNOWN).to_inferd().code == (
        ErrorCode.INVALID_ARGUMENT
    )
    assert pb_utils.InferenceResponse(error=error).has_error()


def test_type_helpers_and_byte_serialization() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(8) is np.int32
    assert pb_utils.numpy_to_triton_type(np.float16) == 10
    serialized = pb_utils.serialize_byte_tensor(np.array([b"ab", b""], dtype=object))
    assert serialized == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"
    assert list(pb_utils.deserialize_bytes_tensor(serialized)) == [b"ab", b""]
    config = {"input": [{"name": "A", "data_type": "TYPE_FP32"}], "output": []}
    assert pb_utils.get_input_config_by_name(config, "A") == config["input"][0]
    assert pb_utils.get_output_config_by_name(config, "A") is None


def test_model_config_refuses_what_triton_refuses() -> None:
    config = pb_utils.ModelConfig(json.dumps({
        "name": "m", "max_batch_size": 4, "input": [], "output": [],
        "sequence_batching": {},
    }))
    with pytest.raises(ValueError, match="configuration specified max_batch_size 4"):
        config.set_max_batch_size(2)
    with pytest.raises(ValueError, match="tries to set scheduling_choice as 'dynamic_batching'"):
        config.set_dynamic_batching()
    with pytest.raises(ValueError, match="missing 'dims' property"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [1], "optional": True})



def test_logger_writes_to_the_server_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("DEBUG", logger="inferd.python_model"):
        pb_utils.Logger.log_info("info line")
        pb_utils.Logger.log_warn("warn line")
        pb_utils.Logger.log("error line", pb_utils.Logger.ERROR)
        pb_utils.Logger.log_verbose("verbose line")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "info line"), ("WARNING", "warn line"), ("ERROR", "error line"),
        ("DEBUG", "verbose line"),
    ]
