"""The wire bench's floor: a bare ZeroMQ echo of exactly the frames ``wire.encode`` makes for
the payload's ``InferBatch``, this process's DEALER to a child process's ROUTER over
``ipc://`` and straight back, ``copy=False`` both ways, nothing decoded: what moving the
bytes there and back costs.

Owns the echo child (``wire --echo``, which exits when its parent does) and its sockets; it
knows nothing of the kernel or the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import zmq
import zmq.asyncio

from bench.common import serving
from bench.performance.wire_samples import (
    EXECUTOR,
    REPLY_TIMEOUT_SECS,
    Cell,
    infer_batch,
    measure_sync,
    progress,
    tensor_of,
)
from inferd.protocols.wire import codec as wire
from inferd.protocols.messages import (
    Envelope,
)

PARENT_CHECK_MS = 1000


def tune(sock: zmq.Socket[Any]) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)


def serve_echo(endpoint: str, parent_pid: int) -> None:
    """The floor's child process: send every message straight back until the parent goes."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    tune(router)
    router.bind(endpoint)
    try:
        while os.getppid() == parent_pid:
            if router.poll(PARENT_CHECK_MS, zmq.POLLIN):
                while int(router.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                    router.send_multipart(router.recv_multipart(copy=False), copy=False)
    except KeyboardInterrupt:
        pass
    finally:
        router.close(linger=0)
        context.term()


def receive(dealer: zmq.Socket[Any]) -> list[zmq.Frame]:
    if not dealer.poll(int(REPLY_TIMEOUT_SECS * 1000), zmq.POLLIN):
        raise TimeoutError(f"no echo within {REPLY_TIMEOUT_SECS:g} s")
    return dealer.recv_multipart(copy=False)


def floor_concurrent(
    dealer: zmq.Socket[Any], frames: list[Any], seconds: float, concurrency: int
) -> float:
    started = time.perf_counter()
    end = started + seconds
    for _ in range(concurrency):
        dealer.send_multipart(frames, copy=False)
    completed = 0
    while time.perf_counter() < end:
        receive(dealer)
        completed += 1
        dealer.send_multipart(frames, copy=False)
    for _ in range(concurrency):
        receive(dealer)
    return (completed + concurrency) / (time.perf_counter() - started)


def floor_cell(dealer: zmq.Socket[Any], size: int, seconds: float, concurrency: int) -> Cell:
    envelope = Envelope(1, "main", EXECUTOR, infer_batch(tensor_of(size), 1, 1))
    frames: list[Any] = [b"", *wire.encode(envelope)]

    def round_trip() -> None:
        dealer.send_multipart(frames, copy=False)
        receive(dealer)

    samples = measure_sync(round_trip, seconds)
    concurrent = floor_concurrent(dealer, frames, seconds, concurrency) if concurrency else None
    return Cell(samples.p50_us(), samples.per_second(), concurrent)


def measure_floor(sizes: Sequence[int], seconds: float, concurrency: int) -> dict[int, Cell]:
    with serving.temporary_folder("bench-wire-") as folder:
        endpoint = f"ipc://{folder}/echo"
        command = [sys.executable, "-m", "bench.performance.wire", "--echo", endpoint,
                   "--parent-pid", str(os.getpid())]
        echo = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        tune(dealer)
        try:
            dealer.connect(endpoint)
            results = {}
            for size in sizes:
                results[size] = floor_cell(dealer, size, seconds, concurrency)
                progress("floor", size, results[size], concurrency)
            return results
        finally:
            dealer.close(linger=0)
            context.term()
            serving.stop_process(echo, grace=5)
