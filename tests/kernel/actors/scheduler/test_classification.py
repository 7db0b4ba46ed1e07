"""The classification extension's pure part: labels read from a model's folder, and a
response's outputs turned into their top classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.classification import classify, read_labels
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferResponse
from inferd.protocols.tensors import from_numpy


def config(label_filename: str) -> ModelConfig:
    parsed = ModelConfig()
    text_format.Parse(f'name: "m" output [{{ name: "y" data_type: TYPE_FP32 dims: [3] '
                      f'label_filename: "{label_filename}" }}, {{ name: "z" }}]', parsed)
    return parsed


def test_labels_are_the_lines_of_the_file_in_the_model_folder(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\n\nbird")
    assert read_labels(config("labels.txt"), tmp_path) == {"y": ("cat", "dog", "", "bird")}


@pytest.mark.parametrize(("filename", "message"), [
    ("missing.txt", "unable to read label_filename of output 'y' 'missing.txt'"),
    ("../outside.txt", "label_filename of output 'y' '../outside.txt' is not inside"),
])
def test_a_label_file_that_cannot_be_read_is_refused(tmp_path: Path, filename: str,
                                                     message: str) -> None:
    (tmp_path.parent / "outside.txt").write_text("x")
    with pytest.raises(InvalidArgument, match=message):
        read_labels(config(filename), tmp_path)


def classes(values: np.ndarray, count: int, batched: bool,
            labels: tuple[str, ...] = ()) -> list[str]:
    response = InferResponse("m", "1", (from_numpy("y", values), from_numpy("z", values)))
    result = classify(response, {"y": count}, {"y": labels}, batched)
    assert result.outputs[1] is response.outputs[1]  # not asked for: untouched
    classified = result.outputs[0]
    assert classified.datatype == "BYTES"
    return [item.decode() for item in np.asarray(classified.data).ravel()]


def test_values_print_as_triton_prints_them() -> None:
    floats = np.array([0.25, 2.0, 1.0], dtype=np.float64)
    assert classes(floats, 2, False, ("a", "b")) == ["2.000000:1:b", "1.000000:2"]
    unsigned = np.array([[1, 200], [7, 3]], dtype=np.uint8)
    assert classes(unsigned, 1, True) == ["200:1", "7:0"]


@pytest.mark.parametrize("datatype", [np.float16, np.bool_, np.object_])
def test_types_without_an_order_triton_knows_are_refused(datatype: type) -> None:
    values = np.array([b"a"] if datatype is np.object_ else [1], dtype=datatype)
    with pytest.raises(InvalidArgument, match="class result not available for output due to "
                                               "unsupported type"):
        classes(values, 1, False)


@given(hnp.arrays(np.int32, hnp.array_shapes(min_dims=2, max_dims=3, max_side=5)),
       st.integers(1, 8))
def test_each_batch_element_gets_its_highest_values_in_order(values: np.ndarray,
                                                             count: int) -> None:
    rows = values.reshape(values.shape[0], -1)
    per_row = min(count, rows.shape[1])
    result = classes(values, count, batched=True)
    assert len(result) == rows.shape[0] * per_row
    for row, picked in zip(rows, np.array(result).reshape(rows.shape[0], per_row), strict=True):
        chosen = [(int(text.split(":")[0]), int(text.split(":")[1])) for text in picked]
        assert all(row[index] == value for value, index in chosen)
        assert [value for value, _ in chosen] == sorted(row.tolist(), reverse=True)[:per_row]
