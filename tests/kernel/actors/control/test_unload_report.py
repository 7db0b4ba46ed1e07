"""What control reports of an unload: the index's figures, the metric samples of each
version's last unload, a log line; nothing for a reply that measured nothing."""

from __future__ import annotations

import logging

import pytest

from inferd.kernel.actors.control.unload_report import UnloadReports
from inferd.protocols.messages import Ack, VersionUnloaded

MIB = 1 << 20


def test_an_unload_s_figures_go_to_the_index_the_metrics_and_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    reports = UnloadReports()
    with caplog.at_level(logging.INFO):
        figures = reports.record("m", 2, VersionUnloaded(100 * MIB, 90 * MIB))
    assert figures == {"loaded_resident_bytes": 100 * MIB, "returned_resident_bytes": 90 * MIB}
    assert ("model 'm' version 2 unloaded: 90.0 MiB of resident memory returned to the "
            "system, its load took 100.0 MiB") in caplog.text
    labels = {"model": "m", "version": "2", "memory": "resident"}
    assert reports.metrics() == [("inferd_model_unload_footprint_bytes", labels, 100 * MIB),
                                 ("inferd_model_unload_returned_bytes", labels, 90 * MIB)]


def test_gpu_figures_are_reported_where_they_were_read() -> None:
    reports = UnloadReports()
    figures = reports.record("m", 1, VersionUnloaded(10, 9, 4 * MIB, 3 * MIB))
    assert figures["loaded_device_bytes"] == 4 * MIB
    assert figures["returned_device_bytes"] == 3 * MIB
    device = {"model": "m", "version": "1", "memory": "device"}
    assert ("inferd_model_unload_returned_bytes", device, 3 * MIB) in reports.metrics()


def test_the_last_unload_of_a_version_replaces_its_figures() -> None:
    reports = UnloadReports()
    reports.record("m", 1, VersionUnloaded(10, 9))
    reports.record("m", 1, VersionUnloaded(20, 19))
    assert [value for name, _, value in reports.metrics()] == [20, 19]


def test_a_reply_that_measured_nothing_reports_nothing() -> None:
    reports = UnloadReports()
    assert reports.record("m", 1, Ack()) == {}
    assert reports.record("m", 1, VersionUnloaded()) == {}
    assert reports.metrics() == []
