"""Both HTTP servers (``--http-implementation loop``, the default, and ``uvicorn``) answer
the real clients alike.

The rest of the suite runs on the default, or on the server ``INFERD_TEST_HTTP_IMPLEMENTATION``
names (``make test-http-uvicorn`` runs every HTTP suite on uvicorn); here each serves the
same requests side by side: the log names which one serves, an inference with binary and
JSON tensors, an unknown model's answer, compressed bodies both ways, a 1 MiB tensor, a
client that sends a request's head and body in pieces, pipelined requests answered in
order on one socket, and a HEAD request, answered without a body.
"""

from __future__ import annotations

import gzip
import json
import re
import socket

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import InferdHarness, ServerHandle

IMPLEMENTATIONS = ["loop", "uvicorn"]


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def server(request: pytest.FixtureRequest, module_inferd: InferdHarness) -> ServerHandle:
    root = module_inferd.repository("simple", "identity_fp32")
    flags = ["--model-control-mode=explicit", "--load-model=simple", "--load-model=identity_fp32",
             f"--http-implementation={request.param}"]
    server = module_inferd.start(root, *flags)
    server.implementation = request.param  # type: ignore[attr-defined]
    return server


def http_url(server: ServerHandle) -> str:
    return f"127.0.0.1:{server.ports['http']}"


def simple_inputs(binary: bool = True) -> list[httpclient.InferInput]:
    values = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(values, binary_data=binary)
    return inputs


def exchange(server: ServerHandle, data: bytes) -> bytes:
    """Send ``data`` on one connection, half-close, and read everything the server sends."""
    with socket.create_connection(("127.0.0.1", server.ports["http"]), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_the_log_names_the_implementation(server: ServerHandle) -> None:
    which = {"loop": "(HTTP/1.1 on the event loop)", "uvicorn": "(uvicorn)"}
    assert f"HTTP frontend listening on http://127.0.0.1:{server.ports['http']} " \
        f"{which[server.implementation]}" in server.log()  # type: ignore[attr-defined]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_an_inference_and_an_unknown_model(server: ServerHandle, binary: bool,
                                           compression: str | None) -> None:
    with httpclient.InferenceServerClient(http_url(server)) as client:
        outputs = [httpclient.InferRequestedOutput(name, binary_data=binary)
                   for name in ("OUTPUT0", "OUTPUT1")]
        result = client.infer("simple", simple_inputs(binary), outputs=outputs,
                              request_compression_algorithm=compression,
                              response_compression_algorithm=compression)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"),
                                      2 * np.arange(16).reshape(1, 16))
        with pytest.raises(InferenceServerException) as missing:
            client.infer("nope", simple_inputs(binary))
    assert missing.value.status() == "404"
    assert missing.value.message() == "Request for unknown model: 'nope' is not found"


def test_a_tensor_of_one_mebibyte(server: ServerHandle) -> None:
    values = np.random.default_rng(0).random(1 << 18, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [1 << 18], "FP32")
    tensor.set_data_from_numpy(values)
    with httpclient.InferenceServerClient(http_url(server)) as client:
        result = client.infer("identity_fp32", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_a_request_in_pieces_and_pipelined_requests_answered_in_order(
        server: ServerHandle) -> None:
    body = json.dumps({"inputs": [{"name": name, "shape": [1, 16], "datatype": "INT32",
                                   "data": list(range(16))} for name in ("INPUT0", "INPUT1")]})
    infer = (b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n"
             b"Content-Encoding: gzip\r\n\r\n") % len(gzip.compress(body.encode()))
    infer += gzip.compress(body.encode())
    requests = (b"GET /v2/models/simple/ready HTTP/1.1\r\nHost: t\r\n\r\n" + infer
                + b"GET /v2/models/nope/ready HTTP/1.1\r\nHost: t\r\n\r\n"
                + b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.ports["http"]), timeout=30) as sock:
        for offset in range(0, len(requests), 7):  # a few bytes at a time
            sock.sendall(requests[offset : offset + 7])
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", received)
    assert statuses == [b"200", b"200", b"400", b"200"]
    assert b'"name":"OUTPUT0"' in received


def test_a_head_request_is_answered_without_a_body(server: ServerHandle) -> None:
    answer = exchange(server, b"HEAD /v2 HTTP/1.1\r\nHost: t\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ") and body == b""
