"""The frontends' default connection caps share the open-file limit
(kernel/runtime/open_file_limit.py): HTTP half, gRPC a quarter, so idle clients of one protocol
never take the descriptors the other's need (issue 28: 1,000 idle gRPC connections starved HTTP)."""

from __future__ import annotations

import resource

import pytest

from inferd.kernel.sdk import open_file_limit as limits
from inferd.plugins.frontends.kserve_grpc.frontend import server_options


@pytest.mark.parametrize("soft", [64, 1024, 65536, 1 << 20])
def test_the_caps_leave_a_quarter_of_the_limit(monkeypatch: pytest.MonkeyPatch,
                                               soft: int) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft, soft))
    http, grpc = limits.default_connection_cap("http"), limits.default_connection_cap("grpc")
    assert http == min(soft // 2, limits.MAX_CONNECTIONS_CEILING)
    assert grpc == min(soft // 4, limits.MAX_CONNECTIONS_CEILING)
    assert http + grpc <= soft * 3 // 4


def test_grpc_is_given_its_cap_and_keepalive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    options = dict(server_options(1 << 20))
    assert options["grpc.max_allowed_incoming_connections"] == 256
    assert options["grpc.keepalive_time_ms"] == 7_200_000  # tritonserver's defaults
    assert options["grpc.keepalive_timeout_ms"] == 20_000
    chosen = dict(server_options(1 << 20, 1.0, 2.0, 10, (5000, 1000)))
    assert chosen["grpc.max_allowed_incoming_connections"] == 10
    assert chosen["grpc.max_connection_idle_ms"] == 2000
    assert (chosen["grpc.keepalive_time_ms"], chosen["grpc.keepalive_timeout_ms"]) == (5000, 1000)
