"""Where a request naming no version goes for a model with version labels
(inferd.kernel.actors.scheduler.label_routing, through the routing table)."""

from __future__ import annotations

from typing import Any

from inferd.kernel.actors.scheduler.label_routing import LabelRoute
from inferd.kernel.actors.scheduler.routing import RoutingTable


class Served:
    """A stand-in for a served ``Version``: the table reads only ``retired``."""

    def __init__(self, number: int) -> None:
        self.version = number
        self.retired = False


def table(*numbers: int) -> RoutingTable:
    routing = RoutingTable()
    served: dict[int, Any] = {n: Served(n) for n in numbers}
    routing.served["m"] = served
    return routing


def test_the_canary_gets_exactly_its_share_in_order() -> None:
    routing = table(1, 2, 3)
    routing.labelled["m"] = LabelRoute(stable=1, canary=2, canary_percent=25)
    picked = [routing.route("m", "").version for _ in range(8)]
    assert picked == [1, 1, 1, 2, 1, 1, 1, 2]


def test_metadata_and_readiness_see_stable_and_spend_no_share() -> None:
    routing = table(1, 2)
    routing.labelled["m"] = LabelRoute(stable=1, canary=2, canary_percent=50)
    assert [routing.resolve("m", "").version for _ in range(4)] == [1, 1, 1, 1]
    assert [routing.route("m", "").version for _ in range(2)] == [1, 2]


def test_a_named_version_is_served_as_named() -> None:
    routing = table(1, 2)
    routing.labelled["m"] = LabelRoute(stable=1)
    assert routing.route("m", "2").version == 2


def test_a_label_on_a_version_not_live_is_passed_over() -> None:
    routing = table(1, 3)
    routing.labelled["m"] = LabelRoute(stable=2, canary=5, canary_percent=100)
    assert routing.route("m", "").version == 3  # as without labels: the highest live
    routing.served["m"][3].retired = True
    routing.labelled["m"] = LabelRoute(stable=3)
    assert routing.route("m", "").version == 1
