"""``inferd.kernel.sdk.flags``: tritonserver's ``[group,]setting=value`` split once for every
flag that takes it, ``--backend-config`` read through it, and a frontend's socket flags."""

from __future__ import annotations

import argparse

import pytest

from inferd.kernel.sdk.flags import ListenFlags, SettingText, backend_setting, split_setting


@pytest.mark.parametrize(("text", "parts"), [
    ("rate=5", SettingText(None, "rate", "5")),
    ("triton,file=/x.json", SettingText("triton", "file", "/x.json")),
    ("summary_quantiles=0.5:0.05,0.9:0.01", SettingText(None, "summary_quantiles",
                                                        "0.5:0.05,0.9:0.01")),
    ("opentelemetry,resource=key=value", SettingText("opentelemetry", "resource", "key=value")),
    ("redis,password=a,b=c", SettingText("redis", "password", "a,b=c")),
    ("local,size", SettingText("local", "size", None)),
    ("level", SettingText(None, "level", None)),
    (",file=x", SettingText("", "file", "x")),
    ("local,size=", SettingText("local", "size", "")),
    (" local , size = 1 ", SettingText(" local ", " size ", " 1 ")),
])
def test_a_setting_splits_at_the_first_equals_and_the_first_comma_before_it(
        text: str, parts: SettingText) -> None:
    assert split_setting(text) == parts


@pytest.mark.parametrize(("text", "setting"), [
    ("default-max-batch-size=16", ("", "default-max-batch-size", "16")),
    ("onnxruntime,default-max-batch-size=16", ("onnxruntime", "default-max-batch-size", "16")),
    (" python , shm-region-prefix-name = a,b ", ("python", "shm-region-prefix-name", "a,b")),
    ("tensorflow,version=", ("tensorflow", "version", "")),
])
def test_backend_config_names_a_backend_or_every_backend(
        text: str, setting: tuple[str, str, str]) -> None:
    assert backend_setting(text) == setting


@pytest.mark.parametrize("text", ["no-equals-sign", "onnxruntime,=1", "onnxruntime, =1"])
def test_a_backend_config_without_a_setting_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=f"--backend-config={text}: expected "
                                         r"\[backend,\]setting=value"):
        backend_setting(text)


def test_listen_flags_are_tritons_and_read_back_with_their_defaults() -> None:
    listen = ListenFlags("http", 8000)
    parser = argparse.ArgumentParser()
    listen.add_to(parser)
    assert listen.read(vars(parser.parse_args([]))) == ("0.0.0.0", 8000)
    given = vars(parser.parse_args(["--http-port", "9000", "--http-address=127.0.0.1"]))
    assert listen.read(given) == ("127.0.0.1", 9000)
    assert listen.read({}) == ("0.0.0.0", 8000)  # a frontend made without the parser
