"""NONE mode end to end: every model loads at start-up and serves; requests that do not fit a
model, or name no model, get Triton's errors. One server serves the whole module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from inferd.protocols.client import Client
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable
from inferd.protocols.messages import IndexEntry, TensorSpec

BATCH_DIM_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension"
    " to be prepended to each input shape. If you want to specify the full shape including the"
    " batch dim in your input dims config, try setting max_batch_size to zero. See the model"
    " configuration docs for more info on max_batch_size."
)


@pytest.fixture(scope="module")
def client(module_inferd: Any) -> Iterator[Client]:
    repository = module_inferd.repository("simple", "mlp", "identity_fp32")
    server = module_inferd.start(repository)  # NONE is the default mode
    with server.client(timeout=30) as client:
        yield client


def simple_inputs(rows: int = 2) -> dict[str, np.ndarray]:
    first = np.arange(rows * 16, dtype=np.int32).reshape(rows, 16)
    second = np.full((rows, 16), 3, dtype=np.int32)
    return {"INPUT0": first, "INPUT1": second}


def test_every_model_is_loaded_and_ready(client: Client) -> None:
    assert client.index() == [
        IndexEntry("identity_fp32", "1", "READY", ""),
        IndexEntry("mlp", "1", "READY", ""),
        IndexEntry("simple", "1", "READY", ""),
    ]
    assert client.is_ready() is True
    assert all(client.is_model_ready(name) for name in ("identity_fp32", "mlp", "simple"))


def test_simple_adds_and_subtracts_a_batch_of_two(client: Client) -> None:
    inputs = simple_inputs(rows=2)

    result = client.infer("simple", inputs, request_id="sum-and-difference")

    assert result.model == "simple"
    assert result.version == "1"
    assert result.id == "sum-and-difference"
    total, difference = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert total.dtype == np.int32 and total.shape == (2, 16)
    assert total.tolist() == [[v + 3 for v in range(r * 16, r * 16 + 16)] for r in range(2)]
    assert difference.tolist() == [[v - 3 for v in range(r * 16, r * 16 + 16)] for r in range(2)]


def test_simple_metadata_and_config(client: Client) -> None:
    metadata = client.model_metadata("simple")
    assert metadata.name == "simple"
    assert metadata.versions == ("1",)
    assert metadata.platform == "onnxruntime_onnx"
    assert metadata.inputs == (
        TensorSpec("INPUT0", "INT32", (-1, 16)),
        TensorSpec("INPUT1", "INT32", (-1, 16)),
    )
    assert metadata.outputs == (
        TensorSpec("OUTPUT0", "INT32", (-1, 16)),
        TensorSpec("OUTPUT1", "INT32", (-1, 16)),
    )

    config = client.model_config("simple")
    assert config["name"] == "simple"
    assert config["max_batch_size"] == 8
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert [group["name"] for group in config["instance_group"]] == ["simple_0"]


def test_unknown_model(client: Client) -> None:
    message = "Request for unknown model: 'nope' is not found"
    with pytest.raises(NotFound) as infer_error:
        client.infer("nope", simple_inputs())
    assert infer_error.value.message == message
    with pytest.raises(NotFound) as metadata_error:
        client.model_metadata("nope")
    assert metadata_error.value.message == message
    assert client.is_model_ready("nope") is False


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        pytest.param(
            {"INPUT0": np.zeros((2, 8), np.int32), "INPUT1": np.zeros((2, 16), np.int32)},
            "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [2,8]."
            + BATCH_DIM_NOTE,
            id="wrong-shape",
        ),
        pytest.param(
            {"INPUT0": np.zeros(16, np.int32), "INPUT1": np.zeros(16, np.int32)},
            "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [16]."
            + BATCH_DIM_NOTE,
            id="no-batch-dimension",
        ),
        pytest.param(
            {"INPUT0": np.zeros((1, 16), np.float32), "INPUT1": np.zeros((1, 16), np.int32)},
            "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
            id="wrong-datatype",
        ),
        pytest.param(
            {"INPUT0": np.zeros((1, 16), np.int32)},
            "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'."
            " Got input(s) ['INPUT0'],"
            " but missing required input(s) ['INPUT1']. Please provide all required input(s).",
            id="missing-input",
        ),
        pytest.param(
            {"INPUT0": np.zeros((9, 16), np.int32), "INPUT1": np.zeros((9, 16), np.int32)},
            "inference request batch-size must be <= 8 for 'simple'",
            id="batch-too-large",
        ),
    ],
)
def test_requests_that_do_not_fit_the_model(
    client: Client, inputs: dict[str, np.ndarray], message: str
) -> None:
    with pytest.raises(InvalidArgument) as error:
        client.infer("simple", inputs)
    assert error.value.message == message


def test_unknown_requested_output(client: Client) -> None:
    with pytest.raises(InvalidArgument) as error:
        client.infer("simple", simple_inputs(), outputs=["OUTPUT7"])
    assert error.value.message == "unexpected inference output 'OUTPUT7' for model 'simple'"


def test_load_and_unload_are_refused_in_none_mode(client: Client) -> None:
    message = "explicit model load / unload is not allowed if polling is enabled"
    with pytest.raises(Unavailable) as load_error:
        client.load("simple")
    assert load_error.value.message == message
    with pytest.raises(Unavailable) as unload_error:
        client.unload("simple")
    assert unload_error.value.message == message
    assert client.infer("simple", simple_inputs(1)).as_numpy("OUTPUT0").tolist() == [
        list(range(3, 19))
    ]
