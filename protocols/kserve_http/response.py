"""The KServe v2 REST infer response, with Triton's binary tensor extension: an
``InferResponse`` into headers and body parts, each output as JSON ``data`` or as binary after
the JSON header (``Inference-Header-Content-Length`` then gives the header's length), as the
request asked (``OutputEncoding``); an output written into shared memory travels without data.

Owns the response's encoding only: the request body is ``inferd.protocols.kserve_http.infer``'s, and
this module sends nothing, frames no HTTP and compresses nothing. Compiled with mypyc as part
of the request path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.protocols.json_bodies import dumps
from inferd.protocols.kserve_http.json_tensors import json_values
from inferd.protocols.messages import InferResponse, SharedMemoryInferResponse, SharedMemoryOutput
from inferd.protocols.tensors import tensor_to_buffer

HEADER_LENGTH_HEADER = "Inference-Header-Content-Length"


@dataclass(frozen=True, slots=True)
class OutputEncoding:
    """How each output of the response travels: binary (after the JSON header) or as JSON
    ``data``. Outputs the request did not name use ``default_binary``."""

    binary: dict[str, bool] = field(default_factory=dict)
    default_binary: bool = False

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response ready to send: extra headers and the body as parts, sent in order."""

    headers: tuple[tuple[str, str], ...]
    parts: tuple[bytes | memoryview, ...]

    @property
    def length(self) -> int:
        return sum(len(part) if isinstance(part, bytes) else part.nbytes for part in self.parts)


def encode_infer_response(
    response: InferResponse | SharedMemoryInferResponse, encoding: OutputEncoding
) -> EncodedResponse:
    """The response as JSON, or as a JSON header followed by the binary outputs in order (then
    ``Inference-Header-Content-Length`` gives the header's length). An output written into
    shared memory has its name, datatype and shape only (Triton's ``FinalizeResponse``)."""
    outputs = []
    buffers: list[bytes | memoryview] = []
    any_binary = False
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": [int(dim) for dim in tensor.shape],
        }
        if isinstance(tensor, SharedMemoryOutput):
            pass
        elif encoding.is_binary(tensor.name):
            any_binary = True
            buffer = tensor_to_buffer(tensor)
            size = buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
            entry["parameters"] = {"binary_data_size": size}
            if size:
                buffers.append(buffer)
        else:
            entry["data"] = json_values(tensor)
        outputs.append(entry)
    document: dict[str, Any] = {}
    if response.id:
        document["id"] = response.id
    document["model_name"] = response.model
    document["model_version"] = response.version
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    header = dumps(document)
    if not any_binary:
        return EncodedResponse((("content-type", "application/json"),), (header,))
    headers = (
        ("content-type", "application/octet-stream"),
        (HEADER_LENGTH_HEADER.lower(), str(len(header))),
    )
    return EncodedResponse(headers, (header, *buffers))

