"""The plain infer-header scan (protocols/kserve_http/scan.py) changes nothing a client sees:
for every body the scan reads, ``decode_plain_infer_request`` gives what the full parser
(``parse_infer_request``) gives, and it declines (None) every body the full parser refuses,
so the full parser words every error; checked on the headers tritonclient sends, their
variants, hostile ones and random mutations of them. The scan does read the plain headers
(else these comparisons would compare nothing), and ``decode_infer_request`` (which uses
the scan only compiled) gives the full parser's answer either way.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.protocols.kserve_http import infer as codec
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.kserve_http.scan import scan_plain_infer_request

LIMIT = 1 << 16


def client_body(datatype: str = "INT32", shape: tuple[int, ...] = (1, 16),
                outputs: bool = True, **options: Any) -> tuple[bytes, int]:
    """The body and header length tritonclient sends for ``simple``'s two inputs."""
    dtype = {"INT32": np.int32, "FP16": np.float16, "BOOL": np.bool_, "BYTES": np.object_,
             "FP64": np.float64, "UINT8": np.uint8}[datatype]
    count = int(np.prod(shape))
    values = (np.array([str(i).encode() for i in range(count)], dtype=np.object_)
              if datatype == "BYTES" else np.arange(count).astype(dtype))
    inputs = [httpclient.InferInput(name, list(shape), datatype) for name in ("IN0", "IN1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(values.reshape(shape), binary_data=True)
    requested = ([httpclient.InferRequestedOutput(name, binary_data=binary)
                  for name, binary in (("OUT0", True), ("OUT1", False))] if outputs else None)
    body, length = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=requested, **options)
    return body, length


def outcome(decode: Any, body: bytes, length: int | None) -> Any:
    """What ``decode`` makes of ``body``: its error's words, or the request and encoding in
    comparable terms (each tensor's datatype, shape, dtype and bytes)."""
    try:
        request, encoding = decode("m", "2", body, length, LIMIT)
    except InvalidArgument as error:
        return ("error", error.message)
    inner = getattr(request, "request", request)
    tensors = [(t.name, t.datatype, tuple(t.shape), str(t.data.dtype), t.data.shape,
                t.data.tolist()) for t in inner.inputs]
    return (type(request).__name__, inner.model, inner.version, inner.id, inner.outputs,
            inner.parameters, inner.priority, inner.timeout_us, inner.classification, tensors,
            encoding.binary, encoding.default_binary)


def plain_outcome(body: bytes, length: int | None) -> Any:
    """The plain decode's outcome, or None where it declines the body."""
    if codec.decode_plain_infer_request("m", "2", body, length, LIMIT) is None:
        return None
    return outcome(codec.decode_plain_infer_request, body, length)


def assert_same(body: bytes, length: int | None) -> Any:
    """The plain decode's outcome (None where it declines), after checking it and
    ``decode_infer_request``'s against the full parser's."""
    full = outcome(codec.parse_infer_request, body, length)
    assert outcome(codec.decode_infer_request, body, length) == full
    plain = plain_outcome(body, length)
    assert plain is None or plain == full
    assert plain is not None or full[0] != "InferRequest" or scan_plain_infer_request(
        body[:length] if length is not None else body) is None  # declined only unread ones
    return plain


def with_header(body: bytes, length: int, header: bytes) -> tuple[bytes, int]:
    return header + body[length:], len(header)


PLAIN = [
    client_body(),
    client_body(outputs=False),
    client_body("FP16", (2, 3)),
    client_body("BOOL", (5,)),
    client_body("BYTES", (1, 3)),
    client_body("FP64", (1,)),
    client_body(request_id="my-request"),
]


@pytest.mark.parametrize("body, length", PLAIN)
def test_the_scan_reads_what_tritonclient_sends_and_decodes_it_as_the_full_parser(
        body: bytes, length: int) -> None:
    assert scan_plain_infer_request(body[:length]) is not None
    plain = assert_same(body, length)
    assert plain is not None and plain[0] == "InferRequest"


def _header(document: Any) -> bytes:
    return json.dumps(document).encode()


SIMPLE_BODY, SIMPLE_LENGTH = client_body()
SIMPLE = json.loads(SIMPLE_BODY[:SIMPLE_LENGTH])
IN0, IN1 = SIMPLE["inputs"]


def _variant(**fields: Any) -> bytes:
    return _header({**SIMPLE, **fields})


HOSTILE_HEADERS = [
    # Plain, written otherwise: whitespace everywhere, other key orders, empty lists.
    b' { "inputs" : [ ' + _header(IN0) + b' ,\n' + _header(IN1) + b'\t] }\r\n',
    _header({"outputs": SIMPLE["outputs"], "inputs": SIMPLE["inputs"][::-1]}),
    _header({"inputs": [{k: IN0[k] for k in reversed(IN0)}, IN1], "outputs": []}),
    _variant(outputs=[{"name": "OUT0"}, {"name": "OUT1", "parameters": {}}]),
    _variant(id="", parameters={}),
    _variant(id="né ☃"),
    # Not plain, yet valid: the full parser's.
    _variant(parameters={"priority": 3, "binary_data_output": True}),
    _variant(parameters={"sequence_id": 7, "sequence_start": True}),
    _variant(outputs=[{"name": "OUT0", "parameters": {"classification": 2}}]),
    _variant(id="a\\u0062c").replace(b"\\\\u", b"\\u"),
    _variant(inputs=[{**IN0, "name": "IN\\u0030"}, IN1]).replace(b"\\\\u", b"\\u"),
    _variant(inputs=[{**IN0, "shape": [1.0, 16]}, IN1]),
    _variant(inputs=[{**IN0, "shape": [1, 1.6e1]}, IN1]),
    _variant(inputs=[{**IN0, "parameters": {"binary_data_size": 64.0}}, IN1]),
    # Errors the full parser words.
    _variant(inputs=[{**IN0, "shape": [-1, 16]}, IN1]),
    _variant(inputs=[{**IN0, "shape": [1, 17]}, IN1]),
    _variant(inputs=[{**IN0, "shape": [2**40, 2**40]}, IN1]),
    _variant(inputs=[{**IN0, "datatype": "INT33"}, IN1]),
    _variant(inputs=[{**IN0, "name": ""}, IN1]),
    _variant(inputs=[{**IN0, "name": 5}, IN1]),
    _variant(inputs=[{**IN0, "parameters": {"binary_data_size": 65}}, IN1]),
    _variant(inputs=[{**IN0, "parameters": {"binary_data_size": 63}}, IN1]),
    _variant(inputs=[{**IN0, "parameters": {"binary_data_size": 10**30}}, IN1]),
    _variant(inputs=[{**IN0, "parameters": {"binary_data_size": -64}}, IN1]),
    _variant(inputs=[{**IN0, "parameters": {"binary_data_size": True}}, IN1]),
    _variant(inputs=[{**IN0, "data": [1]}, IN1]),
    _variant(inputs=[{**IN0, "extra": 1}, IN1]),
    _variant(inputs=[IN0]),
    _variant(inputs=[IN0, IN1, IN1]),
    _variant(inputs=[]),
    _variant(inputs={}),
    _variant(outputs=[{"name": "OUT0"}, {"name": "OUT0"}]),
    _variant(outputs=[{"name": ""}]),
    _variant(outputs=[{"name": "OUT0", "parameters": {"binary_data": 1}}]),
    _variant(outputs=[{"parameters": {"binary_data": True}}]),
    _variant(id=5),
    _variant(parameters={"triton_x": 1}),
    _variant(parameters={"binary_data_output": "yes"}),
    _header({"outputs": SIMPLE["outputs"]}),
    _header({**SIMPLE, "extra": None}),
    b'{"inputs":' + _header(SIMPLE["inputs"]) + b',"inputs":' + _header(SIMPLE["inputs"]) + b"}",
    _header(SIMPLE).replace(b'"INT32"', b'"INT32", "datatype": "INT32"', 1),
    _header(SIMPLE).replace(b"[1, 16]", b"[01, 16]", 1),
    _header(SIMPLE).replace(b"[1, 16]", b"[1, 16,]", 1),
    _header(SIMPLE).replace(b"[1, 16]", b"[1 16]", 1),
    _header(SIMPLE).replace(b"[1, 16]", b"[1, " + b"9" * 5000 + b"]", 1),
    _header(SIMPLE).replace(b"[1, 16]", b"[1, 1" + b"0" * 18 + b"]", 1),
    _header(SIMPLE).replace(b"true", b"tru", 1),
    _header(SIMPLE).replace(b"true", b"True", 1),
    _header(SIMPLE).replace(b"true", b"truex", 1),
    _header(SIMPLE).replace(b"IN0", b"IN\x01", 1),
    _header(SIMPLE).replace(b"IN0", b"IN\xff", 1),
    _header(SIMPLE).replace(b"IN0", "IN\u00e9".encode(), 1),
    _header(SIMPLE) + b"}",
    _header(SIMPLE) + b"x",
    _header(SIMPLE)[:-1],
    _header(SIMPLE)[:40],
    b"\xef\xbb\xbf" + _header(SIMPLE),
    json.dumps(SIMPLE).encode("utf-16"),
    b"[" * 100 + b"]" * 100,
    b'{"inputs": ' + b"[" * 70 + b"]" * 70 + b"}",
    b"{}",
    b"null",
    b"",
    b" ",
]


@pytest.mark.parametrize("header", HOSTILE_HEADERS)
def test_any_other_header_is_decoded_as_the_full_parser_decodes_it(header: bytes) -> None:
    body, length = with_header(SIMPLE_BODY, SIMPLE_LENGTH, header)
    assert_same(body, length)
    assert_same(body, None)  # the whole body taken as JSON


def test_the_scan_leaves_escapes_numbers_it_does_not_read_and_repeated_keys_alone() -> None:
    for header in (HOSTILE_HEADERS[9], HOSTILE_HEADERS[11], HOSTILE_HEADERS[40],
                   HOSTILE_HEADERS[44]):
        assert scan_plain_infer_request(header) is None


_MUTATION_BYTES = st.sampled_from(list(b' \t\n{}[],:"0123456789-.eE\\tfnulx\x00\xff'))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, SIMPLE_LENGTH - 1), st.integers(0, 2),
                          _MUTATION_BYTES), min_size=1, max_size=4))
def test_mutated_client_headers_are_decoded_as_the_full_parser_decodes_them(
        mutations: list[tuple[int, int, int]]) -> None:
    header = bytearray(SIMPLE_BODY[:SIMPLE_LENGTH])
    for position, kind, byte in mutations:
        position = min(position, len(header))
        if kind == 0:
            header.insert(position, byte)
        elif kind == 1 and position < len(header):
            del header[position]
        elif position < len(header):
            header[position] = byte
    body, length = with_header(SIMPLE_BODY, SIMPLE_LENGTH, bytes(header))
    assert_same(body, length)
