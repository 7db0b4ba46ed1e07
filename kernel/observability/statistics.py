"""Per-version inference statistics with Triton's fields (SPEC 5.4).

Counters only rise. ``RequestDurations`` holds the ``{count, ns}`` pairs of answered requests
(``success``/``fail``/``queue``/``compute_*``), which an ensemble also keeps per step;
``VersionStatistics`` adds what a served version counts besides: ``inference_count`` counts
batch elements, ``execution_count`` batches run; ``batch_stats`` breaks compute time down by
batch size. ``failures`` counts the failed requests by Triton's metric reason (REJECTED,
CANCELED, BACKEND, OTHER); ``summaries``, when the server has latency summaries on, observes
each request's latencies. ``as_dict`` prints them as Triton's statistics extension does. No
I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from inferd.kernel.observability.latency_summary import LatencySummaries
from inferd.protocols.prometheus import FAILURE_REASONS


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchSizeStatistics:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


# The compute phases a backend reports, in the order of ``BatchResult.compute_ns``.
COMPUTE_PHASES = ("compute_input", "compute_infer", "compute_output")


@dataclass(slots=True)
class RequestDurations:
    """Answered requests and their time: ``success`` and ``fail`` hold each request's whole
    time; ``queue`` and ``compute_*`` the successful requests' time in the queue and in each
    compute phase."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)

    def record_answer(self, ok: bool, total_ns: int, queue_ns: int) -> None:
        """One request answered after ``total_ns``; only a success counts its queue time."""
        (self.success if ok else self.fail).add(total_ns)
        if ok:
            self.queue.add(queue_ns)

    def record_compute(self, compute_ns: tuple[int, int, int], requests: int = 1) -> None:
        """``requests`` requests computed together, each charged the whole ``compute_ns``."""
        input_ns, infer_ns, output_ns = compute_ns
        self.compute_input.add(input_ns * requests, requests)
        self.compute_infer.add(infer_ns * requests, requests)
        self.compute_output.add(output_ns * requests, requests)

    def durations_as_dict(self) -> dict[str, dict[str, int]]:
        return {
            "success": self.success.as_dict(),
            "fail": self.fail.as_dict(),
            "queue": self.queue.as_dict(),
            **{phase: getattr(self, phase).as_dict() for phase in COMPUTE_PHASES},
        }


@dataclass(slots=True)
class VersionStatistics(RequestDurations):
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, BatchSizeStatistics] = field(default_factory=dict)
    failures: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    summaries: LatencySummaries | None = None

    def record_batch(
        self, batch_size: int, requests: int, compute_ns: tuple[int, int, int]
    ) -> None:
        """One execution of ``requests`` requests holding ``batch_size`` batch elements. As in
        Triton, every request of the batch is charged the batch's compute time in
        ``inference_stats``, while ``batch_stats`` counts the execution once."""
        self.execution_count += 1
        self.inference_count += batch_size
        self.record_compute(compute_ns, requests)
        by_size = self.batches.get(batch_size)
        if by_size is None:
            by_size = self.batches[batch_size] = BatchSizeStatistics()
        input_ns, infer_ns, output_ns = compute_ns
        by_size.compute_input.add(input_ns)
        by_size.compute_infer.add(infer_ns)
        by_size.compute_output.add(output_ns)
        if self.summaries is not None:
            now = time.monotonic()
            for phase, ns in zip(COMPUTE_PHASES, compute_ns, strict=True):
                self.summaries.observe(phase, ns, now, requests)

    def record_request(self, ok: bool, total_ns: int, queue_ns: int,
                       reason: str = "OTHER") -> None:
        """One request answered; a failed one is counted under ``reason`` (one of
        ``FAILURE_REASONS``)."""
        self.last_inference_ms = int(time.time() * 1000)
        self.record_answer(ok, total_ns, queue_ns)
        if not ok:
            self.failures[reason if reason in self.failures else "OTHER"] += 1
        elif self.summaries is not None:
            now = time.monotonic()
            self.summaries.observe("request", total_ns, now)
            self.summaries.observe("queue", queue_ns, now)

    def record_warmup(self, executions: tuple[tuple[int, int, int, int, int], ...]) -> None:
        """The warm-up executions of a new copy of the version, ``(batch size, requests,
        input, infer, output ns)`` each: Triton counts them as it counts inferences (each
        request a success whose time is the execution's, with no time queued)."""
        for batch_size, requests, *compute_ns in executions:
            phases = (compute_ns[0], compute_ns[1], compute_ns[2])
            self.record_batch(batch_size, requests, phases)
            for _ in range(requests):
                self.record_request(True, sum(phases), 0)

    def record_cache_hit(self, total_ns: int, queue_ns: int, hit_ns: int) -> None:
        """A request answered from the response cache: as in Triton a success (its whole
        time, and as queue time what passed before the lookup) and a ``cache_hit`` (the
        lookup's time), with no execution and no inference counted."""
        self.record_request(True, total_ns, queue_ns)
        self.cache_hit.add(hit_ns)
        if self.summaries is not None:
            self.summaries.observe("cache_hit", hit_ns, time.monotonic())

    def record_cache_miss(self, lookup_ns: int, insertion_ns: int) -> None:
        """A successful request the cache did not hold: a ``cache_miss`` of the lookup's and
        the insertion's time. The insertion comes after the request was counted, so its time
        is added to the request's (the lookup's already is), as Triton adds it."""
        self.cache_miss.add(lookup_ns + insertion_ns)
        self.success.ns += insertion_ns
        if self.summaries is not None:
            self.summaries.observe("cache_miss", lookup_ns + insertion_ns, time.monotonic())

    def as_dict(self, name: str, version: str) -> dict[str, Any]:
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                **self.durations_as_dict(),
                "cache_hit": self.cache_hit.as_dict(),
                "cache_miss": self.cache_miss.as_dict(),
            },
            # Triton fills these only from a backend that reports them (its python
            # backend reports neither); the keys are there over HTTP as over gRPC.
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stats.compute_input.as_dict(),
                    "compute_infer": stats.compute_infer.as_dict(),
                    "compute_output": stats.compute_output.as_dict(),
                }
                for size, stats in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }
