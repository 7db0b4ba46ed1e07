"""The logging extension's codec: both protocols read the same updates, refuse the same
mistakes in Triton's words, and answer the same six settings."""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc import service_pb2

from inferd.protocols import logging_api
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import LogSettingsReply, LogSettingsRequest

REPLY = LogSettingsReply("", True, True, False, 2, "ISO8601")


def test_http_update_reads_every_setting() -> None:
    body = json.dumps({"log_file": "x.log", "log_info": False, "log_warning": True,
                       "log_error": False, "log_verbose_level": 3, "log_format": "ISO8601"})
    assert logging_api.decode_http_request(body.encode()).updates == {
        "log_file": "x.log", "log_info": False, "log_warning": True, "log_error": False,
        "log_verbose_level": 3, "log_format": "ISO8601"}


def test_http_json_format_is_inferds_extension() -> None:
    body = b'{"log_format": "json"}'
    assert logging_api.decode_http_request(body).updates == {"log_format": "json"}


@pytest.mark.parametrize("body", [b"", b"{}", b'{"log_info": null, "log_format": null}'])
def test_http_nothing_to_update(body: bytes) -> None:
    assert logging_api.decode_http_request(body) == LogSettingsRequest()


@pytest.mark.parametrize(("body", "message"), [
    ({"log_format": "JSON"}, "invalid argument for --log_format, got: JSON"),
    ({"log_format": "yaml"}, "invalid argument for --log_format, got: yaml"),
    ({"log_info": 1}, "expect boolean for 'log_info'"),
    ({"log_verbose_level": 1.5}, "expect int32 for 'log_verbose_level'"),
    ({"log_verbose_level": 2**32}, "expect int32 for 'log_verbose_level'"),
    ({"log_verbose_level": 2**31}, "expect int32 for 'log_verbose_level'"),  # Triton wraps it
    ({"log_verbose_level": -1}, "expect int32 for 'log_verbose_level'"),
    ({"log_file": ["a"]}, "expect string for 'log_file'"),
])
def test_http_mistakes(body: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        logging_api.decode_http_request(json.dumps(body).encode())


def test_unknown_settings_are_ignored_as_triton_ignores_them() -> None:
    body = b'{"verbose": 1, "log_info": false}'
    assert logging_api.decode_http_request(body).updates == {"log_info": False}
    request = service_pb2.LogSettingsRequest()
    request.settings["log_level"].uint32_param = 1
    assert logging_api.decode_grpc_request(request) == LogSettingsRequest()


def test_http_body_must_be_an_object() -> None:
    with pytest.raises(InvalidArgument, match="must be a JSON object"):
        logging_api.decode_http_request(b"[]")
    with pytest.raises(InvalidArgument, match="malformed log settings request"):
        logging_api.decode_http_request(b"{")


def test_http_reply_in_tritons_order() -> None:
    assert logging_api.encode_http_reply(REPLY) == (
        b'{"log_file":"","log_info":true,"log_warning":true,"log_error":false,'
        b'"log_verbose_level":2,"log_format":"ISO8601"}')


def test_grpc_update_and_reply() -> None:
    request = service_pb2.LogSettingsRequest()
    request.settings["log_verbose_level"].uint32_param = 1
    request.settings["log_error"].bool_param = False
    request.settings["log_format"]  # no value: as JSON's null  # noqa: B018
    assert logging_api.decode_grpc_request(request).updates == {
        "log_verbose_level": 1, "log_error": False}
    response = logging_api.encode_grpc_reply(REPLY)
    assert response.settings["log_error"].bool_param is False
    assert response.settings["log_error"].WhichOneof("parameter_choice") == "bool_param"
    assert response.settings["log_verbose_level"].uint32_param == 2
    assert response.settings["log_format"].string_param == "ISO8601"
    assert set(response.settings) == set(logging_api.SETTING_NAMES)


@pytest.mark.parametrize(("name", "field", "value", "message"), [
    ("log_info", "uint32_param", 1, "expect boolean for 'log_info'"),
    ("log_verbose_level", "bool_param", True, "expect int32 for 'log_verbose_level'"),
    ("log_format", "string_param", "xml", "invalid argument for log_format, got: xml"),
    ("log_format", "bool_param", True, "expect string for 'log_format'"),
])
def test_grpc_mistakes(name: str, field: str, value: object, message: str) -> None:
    request = service_pb2.LogSettingsRequest()
    setattr(request.settings[name], field, value)
    with pytest.raises(InvalidArgument, match=message):
        logging_api.decode_grpc_request(request)
