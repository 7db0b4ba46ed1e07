"""The trace extension's wire forms (``inferd.protocols.trace_api``): updates read from HTTP
bodies and gRPC requests with Triton's names and messages, and replies written back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from inferd.protocols.errors import InvalidArgument, Unsupported
from inferd.protocols.messages import TraceSettingReply, TraceSettingRequest
from inferd.protocols.trace_api import (
    decode_grpc_request,
    decode_http_update,
    encode_grpc_reply,
    encode_http_reply,
)


def test_an_http_update_reads_values_and_clears() -> None:
    body = json.dumps({"trace_level": ["TENSORS", "TIMESTAMPS"], "trace_rate": "5",
                       "trace_count": None, "log_frequency": "0"}).encode()
    assert decode_http_update("m", body) == TraceSettingRequest(
        "m", True, level=("TIMESTAMPS", "TENSORS"), rate=5, log_frequency=0,
        clear=("trace_count",))
    assert decode_http_update("", b"") == TraceSettingRequest("", True)
    assert decode_http_update("", b'{"trace_level": ["OFF"]}').level == ()


@pytest.mark.parametrize("body, error", [
    (b"[1]", "must be a JSON object"),
    (b"{", "failed to parse the trace setting request"),
    (b'{"trace_level": "TIMESTAMPS"}', "must be a non-empty array of strings"),
    (b'{"trace_count": "2147483648"}', "out of range [ -1, 2147483647 ]"),
    (b'{"trace_rate": "4294967296"}', "out of range [ 0, 4294967295 ]"),
    (b'{"trace_rate": " "}', "Unable to parse 'trace_rate', got:  "),
    (b'{"trace_rate": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "failed to parse the trace setting request: JSON nesting deeper than 64 levels"),
])
def test_bad_http_updates_are_invalid(body: bytes, error: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        decode_http_update("", body)
    assert error in refused.value.message


def test_the_trace_file_is_not_updatable() -> None:
    with pytest.raises(Unsupported):
        decode_http_update("", b'{"trace_file": null}')
    request = service_pb2.TraceSettingRequest()
    request.settings["trace_file"].value.append("x")
    with pytest.raises(Unsupported):
        decode_grpc_request(request)


def test_a_grpc_request_reads_lists_and_empty_values_clear() -> None:
    request = service_pb2.TraceSettingRequest(model_name="m")
    request.settings["trace_level"]  # noqa: B018 - an empty value clears
    request.settings["trace_rate"].value.append("8")
    assert decode_grpc_request(request) == TraceSettingRequest(
        "m", True, rate=8, clear=("trace_level",))
    assert decode_grpc_request(service_pb2.TraceSettingRequest()) == TraceSettingRequest()


def test_replies_in_both_forms() -> None:
    reply = TraceSettingReply((("trace_level", ("OFF",)), ("trace_rate", ("1000",)),
                               ("resource", ("a=b", "c=d"))))
    assert json.loads(encode_http_reply(reply)) == {
        "trace_level": ["OFF"], "trace_rate": "1000", "resource": ["a=b", "c=d"]}
    response = encode_grpc_reply(reply, service_pb2.TraceSettingResponse)
    assert list(response.settings["resource"].value) == ["a=b", "c=d"]


@given(st.integers(min_value=-1, max_value=2**31 - 1))
def test_every_count_in_range_reads_back(count: int) -> None:
    body = json.dumps({"trace_count": str(count)}).encode()
    assert decode_http_update("", body).count == count


def test_names_that_are_no_setting_are_ignored_as_triton_ignores_them() -> None:
    body = json.dumps({"trace_mode": "opentelemetry", "x": [1, {}], "trace_rate": "3"}).encode()
    assert decode_http_update("m", body) == TraceSettingRequest("m", True, rate=3)
    request = service_pb2.TraceSettingRequest(model_name="m")
    request.settings["bogus"].value.extend(["1", "2"])
    request.settings["other"].value.extend([])
    assert decode_grpc_request(request) == TraceSettingRequest("m", True)
