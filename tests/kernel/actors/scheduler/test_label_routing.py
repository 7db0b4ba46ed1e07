"""Where a request naming no version goes for a model with version labels
(inferd.kernel.actors.scheduler.label_routing, through the routing table)."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.label_routing import LabelRoute
from inferd.kernel.actors.scheduler.queue_policy import QueuePolicy
from inferd.kernel.actors.scheduler.request_validation import ModelSignature
from inferd.kernel.actors.scheduler.version import Version, batcher_of
from inferd.kernel.actors.scheduler.version_table import RoutingTable

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""


def served(number: int) -> Version:
    """A served version of model ``m`` with no instance (the table reads its number and
    whether it is retired)."""
    config = text_format.Parse(CONFIG, ModelConfig())
    return Version("m", number, config, ModelSignature.from_config(config), batcher_of(config),
                   QueuePolicy.of(config), [])


def table(*numbers: int) -> RoutingTable:
    routing = RoutingTable()
    routing.served["m"] = {n: served(n) for n in numbers}
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
