"""Statistics counters as Triton's statistics extension prints them."""

from __future__ import annotations

from inferd.kernel.observability.statistics import VersionStatistics


def test_a_batch_charges_each_request_and_counts_one_execution() -> None:
    stats = VersionStatistics()
    stats.record_batch(batch_size=5, requests=2, compute_ns=(10, 100, 20))
    for _ in range(2):
        stats.record_request(True, total_ns=1_000, queue_ns=50)
    printed = stats.as_dict("simple", "1")
    assert printed["inference_count"] == 5
    assert printed["execution_count"] == 1
    inference = printed["inference_stats"]
    assert inference["compute_infer"] == {"count": 2, "ns": 200}
    assert inference["compute_input"] == {"count": 2, "ns": 20}
    assert inference["success"] == {"count": 2, "ns": 2_000}
    assert inference["queue"] == {"count": 2, "ns": 100}
    assert inference["fail"] == {"count": 0, "ns": 0}
    assert printed["batch_stats"] == [{
        "batch_size": 5,
        "compute_input": {"count": 1, "ns": 10},
        "compute_infer": {"count": 1, "ns": 100},
        "compute_output": {"count": 1, "ns": 20},
    }]


def test_failures_do_not_count_queue_time() -> None:
    stats = VersionStatistics()
    stats.record_request(False, total_ns=300, queue_ns=300)
    printed = stats.as_dict("m", "2")["inference_stats"]
    assert printed["fail"] == {"count": 1, "ns": 300}
    assert printed["queue"] == {"count": 0, "ns": 0}
    assert stats.last_inference_ms > 0
