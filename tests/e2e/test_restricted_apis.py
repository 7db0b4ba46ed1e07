"""Triton's restricted APIs against a real server: ``--http-restricted-api`` and
``--grpc-restricted-protocol`` refuse a restricted group's calls without the header (or with
a wrong value) in Triton's words and statuses, let them through with it, and leave the other
groups alone; a bad restriction fails the start."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

WAIT_SECS = 30.0


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    return module_inferd.start(
        module_inferd.repository("simple"),
        "--http-restricted-api=model-repository,statistics:Admin-Key=s3cret",
        "--grpc-restricted-protocol=inference:infer-key=abc",
    )


def simple_inputs(module: Any) -> list[Any]:
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
    return inputs


def test_http_groups_need_their_header(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for headers in (None, {"admin-key": "wrong"}):
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_repository_index(headers=headers)
        assert refused.value.status() == "403"
        assert refused.value.message() == "This API is restricted, expecting header 'admin-key'"
        with pytest.raises(InferenceServerException):
            client.get_inference_statistics("simple", headers=headers)
    allowed = {"Admin-Key": "s3cret"}
    assert client.get_model_repository_index(headers=allowed)
    assert client.get_inference_statistics("simple", headers=allowed)["model_stats"]
    # Groups without a restriction are untouched.
    assert client.is_server_live() and client.get_model_config("simple")["name"] == "simple"
    assert client.infer("simple", simple_inputs(httpclient)).as_numpy("OUTPUT0").sum() == 32


def test_grpc_groups_need_their_metadata(server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("simple", simple_inputs(grpcclient))
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    assert refused.value.message() == (
        "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'")
    result = client.infer("simple", simple_inputs(grpcclient),
                          headers={"triton-grpc-protocol-infer-key": "abc"})
    assert result.as_numpy("OUTPUT0").sum() == 32
    assert client.is_server_live() and client.get_model_repository_index().models


def test_a_bad_restriction_fails_the_start(inferd: InferdHarness) -> None:
    unknown = inferd.launch(inferd.repository("simple"), "--http-restricted-api=secrets:k=v")
    assert unknown.wait_exit(WAIT_SECS) == 2
    assert "unknown API group 'secrets'" in unknown.log()
    twice = inferd.launch(inferd.repository("simple"), "--grpc-restricted-protocol=health:a=1",
                          "--grpc-restricted-protocol=health,metadata:b=2")
    assert twice.wait_exit(WAIT_SECS) == 1
    assert "API group 'health' is restricted more than once" in twice.log()


@pytest.mark.parametrize("flag, problem", [
    ("--http-restricted-api=health,:k=v", "an API group is empty"),
    ("--http-restricted-api=:k=v", "an API group is empty"),
    ("--http-restricted-api=health:k=", "the header value is empty"),
    ("--grpc-restricted-protocol=health:=v", "the header key is empty"),
    ("--grpc-restricted-protocol=,inference:k=v", "an API group is empty"),
])
def test_an_empty_part_of_a_restriction_fails_the_start(inferd: InferdHarness, flag: str,
                                                        problem: str) -> None:
    # Triton refuses these at start-up too; a server that ran would leave an API open.
    refused = inferd.launch(inferd.repository("simple"), flag)
    assert refused.wait_exit(WAIT_SECS) == 2
    assert f"{flag.split('=', 1)[1]!r}: {problem}" in refused.log()
