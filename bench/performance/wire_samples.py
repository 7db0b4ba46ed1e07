"""What the three paths of the wire bench share: the payload (an ``identity_fp32`` batch of one
FP32 tensor of a given size, addressed to the bench's executor, and the check that it came
back unchanged), the timed calls (``measure_sync``: warm-up, then calls until enough samples
and seconds) and their figures (``Cell``), and the progress line each path prints.

Pure measurement helpers: no socket, process or server of their own.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from statistics import median
from typing import Any, TypeVar

import anyio
import numpy as np

from inferd.protocols.messages import (
    InferBatch,
    InferRequest,
    InferResponse,
    Tensor,
)
from inferd.protocols.tensors import from_numpy

MODEL = "identity_fp32"
INPUT = "INPUT0"
OUTPUT = "OUTPUT0"
EXECUTOR = "executor/bench"


MIN_SAMPLES = 5
MIN_WARMUP_CALLS = 3
REPLY_TIMEOUT_SECS = 30.0


ResultT = TypeVar("ResultT")


# ------------------------------------------------------------------------------ measuring


@dataclass(frozen=True, slots=True)
class Cell:
    """One (path, size) measurement."""

    p50_us: float
    sequential_per_s: float
    concurrent_per_s: float | None


class Samples:
    """Round trips timed one at a time until the time budget is spent."""

    def __init__(self, seconds: float) -> None:
        self.started = time.perf_counter_ns()
        self.end = self.started + int(seconds * 1e9)
        self.latencies_ns: list[int] = []
        self.last = self.started

    def more(self) -> bool:
        return self.last < self.end or len(self.latencies_ns) < MIN_SAMPLES

    def record(self, sent_ns: int) -> None:
        self.last = time.perf_counter_ns()
        self.latencies_ns.append(self.last - sent_ns)

    def p50_us(self) -> float:
        return median(self.latencies_ns) / 1e3

    def per_second(self) -> float:
        return len(self.latencies_ns) / ((self.last - self.started) / 1e9)


def warmup_seconds(seconds: float) -> float:
    return min(0.25, seconds / 4)


def measure_sync(call: Callable[[], object], seconds: float) -> Samples:
    warm_until = time.perf_counter() + warmup_seconds(seconds)
    for count in range(1_000_000):
        call()
        if count + 1 >= MIN_WARMUP_CALLS and time.perf_counter() >= warm_until:
            break
    samples = Samples(seconds)
    while samples.more():
        sent = time.perf_counter_ns()
        call()
        samples.record(sent)
    return samples


async def measure_async(call: Callable[[], Awaitable[object]], seconds: float) -> Samples:
    warm_until = time.perf_counter() + warmup_seconds(seconds)
    for count in range(1_000_000):
        await call()
        if count + 1 >= MIN_WARMUP_CALLS and time.perf_counter() >= warm_until:
            break
    samples = Samples(seconds)
    while samples.more():
        sent = time.perf_counter_ns()
        await call()
        samples.record(sent)
    return samples


async def measure_concurrent(
    call: Callable[[], Awaitable[object]], seconds: float, concurrency: int
) -> float:
    """Requests per second with ``concurrency`` callers each asking again as soon as
    its previous answer arrives."""
    completed = 0
    end = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal completed
        while time.perf_counter() < end:
            await call()
            completed += 1

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(concurrency):
            tasks.start_soon(caller)
    return completed / (time.perf_counter() - started)


def run_async(function: Callable[..., Awaitable[ResultT]], *args: Any) -> ResultT:
    """Run on the event loop the server itself uses (asyncio, with uvloop when present)."""
    return anyio.run(function, *args, backend="asyncio", backend_options={"use_uvloop": True})


# ------------------------------------------------------------------------------ payloads


def tensor_of(size_bytes: int) -> Tensor:
    return from_numpy(INPUT, np.arange(size_bytes // 4, dtype=np.float32))


def infer_batch(tensor: Tensor, version: int, instance: int) -> InferBatch:
    return InferBatch(MODEL, version, instance, (InferRequest(MODEL, (tensor,)),))


def check_identity(response: InferResponse, tensor: Tensor) -> None:
    """The one correctness check: the model really ran and sent the tensor back."""
    output = {out.name: out for out in response.outputs}.get(OUTPUT)
    if output is None or not np.array_equal(output.data, tensor.data):
        raise RuntimeError(f"{MODEL} did not return its input as {OUTPUT}")


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*(b|k|ki|kib|m|mi|mib)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 64B, 64KiB or 4MiB")
    unit = (match.group(2) or "b").lower()[:1]
    size = int(match.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20}[unit]
    if size <= 0 or size % 4:
        raise argparse.ArgumentTypeError(f"{text!r}: an FP32 tensor needs a multiple of 4 bytes")
    return size


def parse_sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def size_label(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def progress(path: str, size: int, cell: Cell, concurrency: int) -> None:
    line = (f"  {path:<6} {size_label(size):>8}: p50 {cell.p50_us:9.1f} µs, "
            f"{cell.sequential_per_s:8.0f} req/s")
    if cell.concurrent_per_s is not None:
        line += f"; {concurrency} in flight: {cell.concurrent_per_s:8.0f} req/s"
    print(line, file=sys.stderr, flush=True)
