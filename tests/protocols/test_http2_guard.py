"""What ``inferd.protocols.http2.guard`` decides on its own, without a connection: RFC 9113
section 8's rules for a request's and a trailer section's fields, ``content-length``, the
leaky-bucket budget, and gRPC's ping policy, each on a clock the test moves."""

from __future__ import annotations

import pytest
from inferd.protocols.http2.guard import (
    Budget,
    PingPolicy,
    content_length,
    request_problem,
    trailers_problem,
)

from tests.protocols.test_http2 import REQUEST
from tests.protocols.test_http2_rfc import MALFORMED_REQUESTS, WELL_FORMED_REQUESTS

# ------------------------------------------------------------------- request validation


@pytest.mark.parametrize("fields", MALFORMED_REQUESTS.values(), ids=MALFORMED_REQUESTS.keys())
def test_a_malformed_request_has_a_problem(fields: list[tuple[str, str]]) -> None:
    assert isinstance(request_problem(tuple(fields)), str)


@pytest.mark.parametrize("fields", [*WELL_FORMED_REQUESTS.values(), REQUEST],
                         ids=[*WELL_FORMED_REQUESTS.keys(), "grpc-request"])
def test_a_well_formed_request_has_none(fields: list[tuple[str, str]]) -> None:
    assert request_problem(tuple(fields)) is None


@pytest.mark.parametrize("trailers", [
    pytest.param([(":path", "/")], id="request-pseudo-header"),
    pytest.param([("x-t", "1"), (":status", "200")], id="response-pseudo-header"),
    pytest.param([("X-Upper", "1")], id="uppercase-name"),
    pytest.param([("", "1")], id="empty-name"),
    pytest.param([("x:y", "1")], id="colon-in-name"),
    pytest.param([("x-t", "a\x00b")], id="nul-in-value"),
    pytest.param([("x-t", "a\rb")], id="cr-in-value"),
    pytest.param([("x-t", " a")], id="leading-space"),
    pytest.param([("connection", "close")], id="connection"),
    pytest.param([("transfer-encoding", "chunked")], id="transfer-encoding"),
])
def test_malformed_trailers_have_a_problem(trailers: list[tuple[str, str]]) -> None:
    assert isinstance(trailers_problem(tuple(trailers)), str)


@pytest.mark.parametrize("trailers", [
    [], [("x-checksum", "abc")], [("grpc-status", "0"), ("grpc-message", "")]])
def test_well_formed_trailers_have_none(trailers: list[tuple[str, str]]) -> None:
    assert trailers_problem(tuple(trailers)) is None


@pytest.mark.parametrize("fields, expected", [
    ([], -1),
    ([("content-length", "0")], 0),
    ([("content-length", "1234")], 1234),
    ([("content-length", "")], -2),
    ([("content-length", "-1")], -2),
    ([("content-length", "1e3")], -2),
    ([("content-length", " 5")], -2),
    ([("content-length", "9" * 19)], -2),
])
def test_content_length(fields: list[tuple[str, str]], expected: int) -> None:
    assert content_length((*REQUEST, *fields)) == expected


# -------------------------------------------------------------------------------- Budget


def test_a_budget_allows_its_burst_and_no_more() -> None:
    budget = Budget(10)
    assert [budget.charge(0.0) for _ in range(11)] == [True] * 10 + [False]


def test_a_budget_drains_a_tenth_of_its_burst_a_second() -> None:
    budget = Budget(10)
    for _ in range(10):
        budget.charge(0.0)
    assert budget.charge(1.0) is True  # drained to 9, charged to 10
    assert budget.charge(1.0) is False
    budget = Budget(10)
    for _ in range(10):
        budget.charge(0.0)
    assert budget.charge(0.5) is False  # drained to 9.5 only


def test_a_budget_charges_an_amount_and_drains_to_no_less_than_empty() -> None:
    budget = Budget(100)
    assert budget.charge(0.0, 100.0) is True
    assert budget.charge(0.0, 0.5) is False
    assert budget.charge(1000.0, 100.0) is True  # drained to 0, not below
    assert budget.charge(1000.0, 1.0) is False


def test_a_budget_is_credited_by_work_done_and_never_below_empty() -> None:
    budget = Budget(10)
    for _ in range(10):
        budget.charge(0.0)
    budget.credit(3.0)
    assert [budget.charge(0.0) for _ in range(4)] == [True, True, True, False]
    budget.credit(1000.0)
    assert budget.level == 0.0
    assert [budget.charge(0.0) for _ in range(11)] == [True] * 10 + [False]


# ---------------------------------------------------------------------------- PingPolicy


def test_the_ping_policy_defaults_are_grpcs() -> None:
    policy = PingPolicy()
    assert (policy.permit_without_calls, policy.min_interval, policy.max_strikes) == (
        False, 300.0, 2)
    assert PingPolicy.IDLE_INTERVAL == 7200.0


def test_the_third_early_ping_is_one_strike_too_many() -> None:
    policy = PingPolicy()
    assert [policy.received(0.0, True) for _ in range(4)] == [True, True, True, False]
    assert policy.strikes == 3


@pytest.mark.parametrize("calls_in_flight, permit_without_calls, interval", [
    (True, False, 300.0), (False, False, 7200.0), (False, True, 300.0), (True, True, 300.0)])
def test_a_ping_sooner_than_the_interval_is_a_strike(
        calls_in_flight: bool, permit_without_calls: bool, interval: float) -> None:
    policy = PingPolicy(permit_without_calls=permit_without_calls)
    policy.received(0.0, calls_in_flight)
    policy.received(interval, calls_in_flight)
    assert policy.strikes == 0
    policy.received(2 * interval - 0.001, calls_in_flight)
    assert policy.strikes == 1


def test_sending_forgives_every_strike_and_the_last_ping() -> None:
    policy = PingPolicy()
    for _ in range(3):
        policy.received(0.0, True)
    policy.forgive()
    assert policy.strikes == 0
    assert [policy.received(0.0, True) for _ in range(4)] == [True, True, True, False]


def test_no_strike_limit_allows_any_ping() -> None:
    policy = PingPolicy(max_strikes=0)
    assert all(policy.received(0.0, False) for _ in range(100))
