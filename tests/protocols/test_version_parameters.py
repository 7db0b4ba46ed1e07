"""The ``versions`` parameter of load and unload and the version labels body (inferd
extensions) as the HTTP and gRPC codecs read them: Triton's bodies unchanged, each bad value
refused naming it."""

from __future__ import annotations

import pytest
from tritonclient.grpc import service_pb2

from inferd.protocols.kserve_grpc import admin as kserve_grpc_admin
from inferd.protocols.kserve_http import admin as kserve_http_admin
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import LabelsRequest, LoadRequest, UnloadRequest


def test_tritons_bodies_name_no_version() -> None:
    assert kserve_http_admin.decode_load_request("m", b"") == LoadRequest("m")
    assert kserve_http_admin.decode_unload_request(
        "m", b'{"parameters": {"unload_dependents": true}}') == UnloadRequest("m", True)


def test_versions_over_http_and_grpc() -> None:
    assert kserve_http_admin.decode_load_request(
        "m", b'{"parameters": {"versions": [3, 1]}}').versions == (1, 3)
    assert kserve_http_admin.decode_unload_request(
        "m", b'{"parameters": {"versions": [2]}}').versions == (2,)
    request = service_pb2.RepositoryModelLoadRequest(model_name="m")
    request.parameters["versions"].string_param = "[4, 2]"
    assert kserve_grpc_admin.decode_load_request(request).versions == (2, 4)
    unload = service_pb2.RepositoryModelUnloadRequest(model_name="m")
    unload.parameters["versions"].int64_param = 5
    assert kserve_grpc_admin.decode_unload_request(unload).versions == (5,)


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"parameters": {"versions": 3}}', "must be a list of 1 to 64 version numbers, not a number"),
    (b'{"parameters": {"versions": [true]}}', "(integers >= 1), not true"),
    (b'{"parameters": {"versions": [-1]}}', "(integers >= 1), not -1"),
    (b'{"parameters": {"versions": [1, 1]}}', "names a version twice"),
    (b'{"parameters": {"versions": ' + str(list(range(1, 66))).encode() + b"}}",
     "must be a list of 1 to 64"),
])
def test_bad_versions_are_refused(body: bytes, expected: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        kserve_http_admin.decode_load_request("m", body)
    assert expected in error.value.message


def test_the_labels_body() -> None:
    decode = kserve_http_admin.decode_labels_request
    assert decode("m", b"") == LabelsRequest("m")
    assert decode("m", b'{"labels": {"stable": 4, "canary": null}, "canary_percent": 5}') == \
        LabelsRequest("m", {"stable": 4}, ("canary",), 5.0)
    for body, expected in [(b'{"labels": {"stable": 1.5}}', "must name a version number"),
                           (b'{"canary_percent": "9"}', "'canary_percent' must be a number"),
                           (b'{"canary_percent": -3}', "from 0 to 100, not -3"),
                           (b'{"label": {}}', "label")]:
        with pytest.raises(InvalidArgument) as error:
            decode("m", body)
        assert expected in error.value.message
