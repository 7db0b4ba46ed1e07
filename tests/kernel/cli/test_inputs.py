"""The client commands' argument parsing without a server: ``--input`` tensors (datatype
from the model, a batch dimension added, .npy files as they are), ``--file`` overrides,
``--config`` files, and the statistics row and abbreviated values the tables show."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferd.plugins.cli.commands import stats_record
from inferd.plugins.cli.connection import InputSpec
from inferd.plugins.cli.inputs import (
    ArgumentProblem,
    config_override,
    input_tensors,
    override_files,
)
from inferd.plugins.cli.kserve_connections import _integers
from inferd.plugins.cli.render import show, values

SPECS = [InputSpec("A", "FP32", (-1, 3)), InputSpec("T", "BYTES", (2,)),
         InputSpec("N", "INT64", (2,))]


def test_json_inputs_take_the_models_datatype_and_a_missing_batch_dimension() -> None:
    a, text, n = input_tensors(["A=[1, 2, 3]", 'T=["x", "yz"]', "N=[[1, 2]]"], SPECS)
    assert (a.datatype, a.data.dtype, a.data.shape) == ("FP32", np.float32, (1, 3))
    assert (text.datatype, text.data.tolist()) == ("BYTES", [b"x", b"yz"])
    assert (n.datatype, n.data.dtype, n.data.shape) == ("INT64", np.int64, (1, 2))
    [unknown] = input_tensors(["Z=[1.5]"], SPECS)  # the server will name the mistake
    assert (unknown.datatype, unknown.data.tolist()) == ("FP64", [1.5])


def test_npy_inputs_are_sent_as_they_are(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.uint8).reshape(2, 3))
    np.save(tmp_path / "t.npy", np.array(["ab", "c"]))
    a, text = input_tensors([f"A=@{tmp_path / 'a.npy'}", f"T=@{tmp_path / 't.npy'}"], SPECS)
    assert (a.datatype, a.data.shape) == ("UINT8", (2, 3))
    assert (text.datatype, text.data.tolist()) == ("BYTES", [b"ab", b"c"])


@pytest.mark.parametrize(("argument", "message"), [
    ("A", "--input A: expected NAME=JSON or NAME=@file.npy"),
    ("=[1]", "--input =[1]: expected NAME=JSON"),
    ("A=[1,", "--input A=[1,: the value is not JSON"),
    ("A=[[1],[2,3]]", "--input A=[[1],[2,3]]: not a FP32 array"),
    ('A=["x"]', "not a FP32 array"),
    ("A=@/no/such.npy", "--input A=@/no/such.npy: No such file or directory"),
])
def test_bad_inputs_say_which_argument_and_why(argument: str, message: str) -> None:
    with pytest.raises(ArgumentProblem) as caught:
        input_tensors([argument], SPECS)
    assert message in str(caught.value)


def test_file_overrides_and_config_files(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"\x00model")
    assert override_files([f"1/model.onnx={tmp_path / 'm.onnx'}"]) == {
        "1/model.onnx": b"\x00model"}
    for argument, message in (("1/model.onnx", "expected VERSION/NAME=LOCAL_PATH"),
                              ("model.onnx=x", "the target is <version>/<name>"),
                              ("1/m=/no/such", "/no/such: No such file or directory")):
        with pytest.raises(ArgumentProblem) as caught:
            override_files([argument])
        assert message in str(caught.value)
    pbtxt = tmp_path / "config.pbtxt"
    pbtxt.write_text('name: "m"\nmax_batch_size: 4\ninput [{ name: "A" data_type: TYPE_FP32 '
                     'dims: [ 3 ] }]\n')
    assert json.loads(config_override(str(pbtxt))) == {
        "name": "m", "max_batch_size": 4,
        "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": ["3"]}]}
    as_json = tmp_path / "config.json"
    as_json.write_text('{"max_batch_size": 2}')
    assert config_override(str(as_json)) == '{"max_batch_size": 2}'  # the server checks it
    pbtxt.write_text("max_batch_size: x\n")
    with pytest.raises(ArgumentProblem, match=rf"--config {pbtxt}:1:17: "):
        config_override(str(pbtxt))


def test_stats_rows_average_over_successful_requests() -> None:
    entry = _integers({"name": "m", "version": "1", "inference_count": "6",
                       "execution_count": "2", "inference_stats": {
                           "success": {"count": "4", "ns": "9000"},
                           "fail": {"count": "1", "ns": "5"}, "queue": {"count": "4", "ns": "8000"},
                           "compute_input": {"count": "4", "ns": "1000"},
                           "compute_infer": {"count": "4", "ns": "6000"},
                           "compute_output": {"count": "4", "ns": "1000"}}})
    assert stats_record(entry) == {
        "model": "m", "version": "1", "success": 4, "fail": 1, "inference_count": 6,
        "execution_count": 2, "avg_queue_us": 2.0, "avg_compute_us": 2.0}
    assert stats_record({"name": "idle", "version": "1"})["avg_queue_us"] == 0.0


def test_values_are_abbreviated_in_the_middle() -> None:
    assert values(np.arange(4)) == "[0, 1, 2, 3]"
    assert values(np.arange(20).reshape(4, 5)) == "[0, 1, 2, 3, …, 16, 17, 18, 19]"
    assert values(np.array([b"a", b"\xff"], dtype=object)) == "['a', b'\\xff']"
    assert values(np.array([0.1234567891], dtype=np.float64)) == "[0.123457]"


def test_json_output_writes_tensors_and_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    show("json", (), (), {"data": np.array([[b"a", b"\xff"]], dtype=object),
                          "numbers": np.arange(3, dtype=np.int16), "one": np.float32(0.5)})
    assert json.loads(capsys.readouterr().out) == {
        "data": [["a", "ff"]], "numbers": [0, 1, 2], "one": 0.5}
