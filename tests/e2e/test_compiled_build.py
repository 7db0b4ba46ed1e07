"""The server's log says once, at start, which build of the request path runs: the one
``inferd.protocols.build`` reports for this install, and the sources under
``INFERD_COMPILE=0``; a warning when the sources run though nobody asked for them (a build
that failed, or was killed: tests/test_setup_build.py), information otherwise."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.protocols import build

LINE = "request path: "


def _request_path_lines(log: str) -> list[str]:
    return [line[line.index(LINE):] for line in log.splitlines() if LINE in line]


def _request_path_levels(log: str) -> list[str]:
    """The level letters of those lines (the text format: ``12:00:00 I [main] inferd: ...``)."""
    return [line.split(" [", 1)[0].rsplit(" ", 1)[-1]
            for line in log.splitlines() if LINE in line]


def _simple_infers(server: Any) -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    outputs = server.client().infer("simple", {"INPUT0": data, "INPUT1": data})
    np.testing.assert_array_equal(outputs.outputs["OUTPUT0"].data, data + data)


def test_the_log_names_the_installed_build(inferd: Any) -> None:
    server = inferd.start(inferd.repository("simple"))
    _simple_infers(server)
    assert _request_path_lines(server.log()) == [LINE + build.describe()]
    assert _request_path_levels(server.log()) == ["W" if build.fell_back() else "I"]


def test_inferd_compile_0_serves_from_source_and_says_so(inferd: Any) -> None:
    server = inferd.start(inferd.repository("simple"), env={"INFERD_COMPILE": "0"})
    _simple_infers(server)
    assert _request_path_lines(server.log()) == [LINE + "pure Python (INFERD_COMPILE=0)"]
    assert _request_path_levels(server.log()) == ["I"]
