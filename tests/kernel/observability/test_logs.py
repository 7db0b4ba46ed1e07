"""Log settings: the logging extension's updates, the flags an executor is started with, and
the message a running one is sent, all carry the same settings."""

from __future__ import annotations

import argparse

from inferd.kernel.observability.logs import LogSettings, as_reply, updated
from inferd.protocols.messages import LogSettingsReply


def test_updates_change_only_the_settings_named() -> None:
    settings = LogSettings(verbose=0, file="a.log")
    changed = updated(settings, {"log_verbose_level": 2, "log_info": False,
                                 "log_format": "ISO8601"})
    assert changed == LogSettings(verbose=2, info=False, format="ISO8601", file="a.log")
    assert updated(changed, {"log_file": ""}).file == ""


def test_reply_reads_warnings_only_as_verbosity_zero() -> None:
    assert as_reply(LogSettings(verbose=-1, error=False)) == LogSettingsReply(
        "", True, True, False, 0, "default")


def test_flags_and_message_carry_every_setting() -> None:
    settings = LogSettings(verbose=1, info=False, warning=True, error=False, format="ISO8601",
                           file="/var/log/inferd.log")
    parser = argparse.ArgumentParser()
    LogSettings.add_arguments(parser)
    assert LogSettings.from_arguments(parser.parse_args(settings.as_arguments())) == settings
    assert LogSettings.from_message(settings.as_message()) == settings
