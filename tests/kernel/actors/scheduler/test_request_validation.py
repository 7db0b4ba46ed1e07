"""Request checks against a model's signature, with Triton's exact messages."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.request_validation import ModelSignature, check_request
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferRequest, Tensor

SIMPLE = """
name: "simple"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


@pytest.fixture(scope="module")
def simple() -> ModelSignature:
    return ModelSignature.from_config(text_format.Parse(SIMPLE, ModelConfig()))


def tensor(name: str, shape: tuple[int, ...], dtype: str = "int32") -> Tensor:
    datatype = {"int32": "INT32", "float32": "FP32"}[dtype]
    return Tensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def request(*inputs: Tensor, outputs: tuple[str, ...] = ()) -> InferRequest:
    return InferRequest("simple", inputs, outputs=outputs)


def test_a_good_request_returns_its_batch_size(simple: ModelSignature) -> None:
    assert check_request(request(tensor("INPUT0", (3, 16)), tensor("INPUT1", (3, 16))), simple) == 3


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ((tensor("INPUT0", (1, 16)),), (),
         "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got"
         " input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all"
         " required input(s)."),
        ((tensor("INPUT0", (1, 16), "float32"), tensor("INPUT1", (1, 16))), (),
         "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"),
        ((tensor("INPUT0", (1, 8)), tensor("INPUT1", (1, 16))), (),
         "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]."
         " NOTE: Setting a non-zero max_batch_size"),
        ((tensor("INPUT0", (9, 16)), tensor("INPUT1", (9, 16))), (),
         "inference request batch-size must be <= 8 for 'simple'"),
        ((tensor("INPUT0", (1, 16)), tensor("INPUT1", (1, 16)), tensor("EXTRA", (1, 16))), (),
         "unexpected inference input 'EXTRA' for model 'simple'"),
        ((tensor("INPUT0", (1, 16)), tensor("INPUT1", (1, 16))), ("NOPE",),
         "unexpected inference output 'NOPE' for model 'simple'"),
        ((tensor("INPUT0", (1, 16)), tensor("INPUT1", (2, 16))), (),
         "input 'INPUT1' has batch size 2 but an earlier input of the same request has 1"),
    ],
)
def test_bad_requests_are_refused_with_triton_messages(
    simple: ModelSignature, inputs: tuple[Tensor, ...], outputs: tuple[str, ...], message: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_request(request(*inputs, outputs=outputs), simple)
    assert caught.value.message.startswith(message)


def test_metadata_shapes_include_the_batch_dimension(simple: ModelSignature) -> None:
    specs = simple.metadata(simple.inputs)
    assert [(s.name, s.datatype, s.shape) for s in specs] == [
        ("INPUT0", "INT32", (-1, 16)), ("INPUT1", "INT32", (-1, 16))]
