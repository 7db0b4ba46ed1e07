"""The classification extension: an output returned as its top classes instead of its values.

A requested output with the ``classification`` parameter N comes back as a BYTES tensor of
the N highest-valued elements (per batch element for a batching model), each the string
``<value>:<index>[:<label>]``, as Triton's classification extension answers. The labels come
from the output's ``label_filename`` in the config: a text file in the model's folder, one
label per line, line i labelling index i. Pure: a config and a folder in, labels out; a
response and the counts asked for in, the classified response out. The scheduler reads the
labels when it starts serving a version and applies ``classify`` to its answers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.repository.folders import read_model_data
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferResponse, Tensor

Labels = dict[str, tuple[str, ...]]  # output name -> its labels, by index

# As Triton: a larger output is refused rather than sorted.
MAX_CLASSIFICATION_ELEMENTS = 1_000_000
_INTEGER_TYPES = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                            "INT64"})
_FLOAT_TYPES = frozenset({"FP32", "FP64"})


def read_labels(config: ModelConfig, model_dir: Path) -> Labels:
    """The labels of every output with a ``label_filename``; a file that is missing, not
    UTF-8 or outside the model's folder is an ``InvalidArgument`` naming the output."""
    labels: Labels = {}
    for output in config.output:
        if not output.label_filename:
            continue
        what = f"label_filename of output '{output.name}'"
        data = read_model_data(model_dir, ".", output.label_filename, what)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(f"{what} '{output.label_filename}' is not UTF-8 text") from None
        labels[output.name] = tuple(text.splitlines())
    return labels


def classify(response: InferResponse, counts: dict[str, int], labels: Labels,
             batched: bool) -> InferResponse:
    """``response`` with each output named in ``counts`` replaced by its top classes;
    ``batched`` says the first dimension is the batch (a model with ``max_batch_size > 0``)."""
    produced = {tensor.name for tensor in response.outputs}
    for name in counts:
        if name not in produced:
            raise InvalidArgument(f"unexpected inference output '{name}' for model "
                                  f"'{response.model}'")
    outputs = tuple(
        _classified(tensor, counts[tensor.name], labels.get(tensor.name, ()), batched)
        if tensor.name in counts else tensor
        for tensor in response.outputs
    )
    return replace(response, outputs=outputs)


def _classified(tensor: Tensor, count: int, labels: tuple[str, ...], batched: bool) -> Tensor:
    if tensor.datatype not in _INTEGER_TYPES and tensor.datatype not in _FLOAT_TYPES:
        raise InvalidArgument(
            f"class result not available for output due to unsupported type "
            f"'{tensor.datatype}'"
        )
    values = np.asarray(tensor.data)
    if values.size > MAX_CLASSIFICATION_ELEMENTS:
        raise InvalidArgument("classification output tensor too large")
    rows = values.reshape(values.shape[0], -1) if batched and values.ndim else values.reshape(1, -1)
    text = _float_text if tensor.datatype in _FLOAT_TYPES else str
    per_row = min(count, rows.shape[1])
    classes: list[str] = []
    for row in rows:
        # Highest first; equal values keep their index order (a stable sort of the negation).
        order = np.argsort(-row.astype(np.float64), kind="stable")[:per_row]
        for index in order.tolist():
            entry = f"{text(row[index].item())}:{index}"
            if index < len(labels) and labels[index]:  # an empty line labels nothing
                entry += f":{labels[index]}"
            classes.append(entry)
    shape = (rows.shape[0], per_row) if batched and values.ndim else (per_row,)
    data = np.array([entry.encode() for entry in classes], dtype=np.object_).reshape(shape)
    return Tensor(tensor.name, "BYTES", shape, data)


def _float_text(value: float) -> str:
    # C++'s std::to_string, which Triton formats values with: six decimals.
    return f"{value:f}"
