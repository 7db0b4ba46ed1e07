"""The example repository's OCR pipeline (python pre-processing, ONNX detector and refiner,
python post-processing, wired as the ensemble ``ocr``), served as `make serve` serves it and
called the three ways docs/ensembles.md shows: tritonclient http, tritonclient grpc, plain JSON."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import EXAMPLE_REPOSITORY


PIPELINE = ("preprocess", "craft", "refinenet", "postprocess_0", "ocr")
TEXTS = np.array([[b"hello world"], [bytes(range(256)) * 4], [b""]], dtype=np.object_)
EXPECTED = [
    [b"regions=0", b"bytes=11 score=0.499"],
    [b"regions=4", b"bytes=1024 score=0.316"],
    [b"regions=0", b"bytes=0 score=0.500"],
]


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> Any:
    return module_inferd.start(module_inferd.repository(*PIPELINE))


@pytest.mark.parametrize("client_module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_strings_in_strings_out(server: Any, client_module: Any) -> None:
    url = server.http_url if client_module is httpclient else server.grpc_url
    client = client_module.InferenceServerClient(url)
    text = client_module.InferInput("INPUT", list(TEXTS.shape), "BYTES")
    text.set_data_from_numpy(TEXTS)
    output = client.infer("ocr", [text]).as_numpy("OUTPUT")
    assert output.shape == (3, 2)
    assert output.tolist() == EXPECTED


def test_plain_json_as_the_docs_show(server: Any) -> None:
    body = json.dumps({"inputs": [
        {"name": "INPUT", "datatype": "BYTES", "shape": [1, 1], "data": ["hello world"]}]})
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/ocr/infer",
                                     data=body.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert answer["outputs"] == [{"name": "OUTPUT", "datatype": "BYTES", "shape": [1, 2],
                                  "data": ["regions=0", "bytes=11 score=0.499"]}]


def test_the_example_repository_holds_the_pipeline() -> None:
    for name in PIPELINE:
        assert (EXAMPLE_REPOSITORY / name / "config.pbtxt").is_file(), name
