"""Request cancellation end to end, as in Triton: a client that goes away (a gRPC cancel or
deadline, an HTTP connection that breaks mid-request, a gRPC stream cancelled, a native zmq
client that stops waiting) takes its queued
request out of the queue, so it never runs, counted as a CANCELED failure; a request already
running is told, and a python model sees ``request.is_cancelled()`` (a decoupled one
``response_sender.is_cancelled()``) and stops early.

One server serves ``waiter`` (one instance; an odd TAG holds it until its client goes away or
the test releases it) and ``ticker`` (decoupled: responds until cancelled), both from
tests/plugins/python_models; each records what ran in ``record.txt`` in its model folder.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.client import AsyncClient, Client
from inferd.protocols.errors import DeadlineExceeded
from tests.e2e.inferd_harness import InferdHarness, ServerHandle

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
WAIT_SECS = 20.0


@dataclass
class Served:
    server: ServerHandle
    repository: Path

    def record(self, model: str) -> list[str]:
        path = self.repository / model / "record.txt"
        return path.read_text().splitlines() if path.exists() else []

    def metric(self, name: str, model: str, **labels: str) -> float:
        url = f"http://127.0.0.1:{self.server.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=WAIT_SECS) as response:
            text = response.read().decode()
        wanted = {"model": model, **labels}
        for line in text.splitlines():
            match = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
            if match is None or match.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            if all(found.get(key) == value for key, value in wanted.items()):
                return float(match.group(3))
        return 0.0

    def canceled(self, model: str) -> float:
        return self.metric("nv_inference_request_failure", model, reason="CANCELED")

    def pending(self, model: str) -> float:
        return self.metric("nv_inference_pending_request_count", model)


def wait_for(condition: Callable[[], object], what: str, served: Served) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; its log:\n{served.server.log()}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def served(module_inferd: InferdHarness) -> Served:
    root: Path = module_inferd.repository()
    module_inferd.copy_models(root, PYTHON_MODELS, "waiter", "ticker")
    return Served(module_inferd.start(root), root)


@pytest.fixture
def released(served: Served) -> Iterator[Path]:
    """The file that lets a held ``waiter`` request go: made by the test, removed after."""
    path = served.repository / "waiter" / "release"
    yield path
    path.unlink(missing_ok=True)


def grpc_tag(tag: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("TAG", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[tag]], np.int32))
    return [tensor]


def http_infer_and_keep_open(served: Served, tag: int) -> socket.socket:
    """An HTTP infer request for ``waiter`` sent on a socket left open (closing it is the
    client going away)."""
    body = json.dumps({"inputs": [
        {"name": "TAG", "shape": [1, 1], "datatype": "INT32", "data": [tag]}]}).encode()
    connection = socket.create_connection(("127.0.0.1", served.server.ports["http"]),
                                          timeout=WAIT_SECS)
    connection.sendall(b"POST /v2/models/waiter/infer HTTP/1.1\r\nHost: inferd\r\n"
                       b"Content-Type: application/json\r\n"
                       + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return connection


def drop(connection: socket.socket) -> None:
    """Close ``connection`` with a reset, as a client whose connection breaks: a plain close
    (FIN) could be a half-close, after which the client still reads its answer."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def test_a_grpc_cancel_takes_a_queued_request_out_and_tells_the_running_one(
        served: Served) -> None:
    canceled_before = served.canceled("waiter")
    answers: queue.Queue[tuple[int, Any, Any]] = queue.Queue()

    def answered(tag: int) -> Callable[[Any, Any], None]:
        return lambda result, error: answers.put((tag, result, error))

    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        held = client.async_infer("waiter", grpc_tag(1), answered(1))
        wait_for(lambda: "1 started" in served.record("waiter"), "the held request", served)
        queued = client.async_infer("waiter", grpc_tag(2), answered(2))
        wait_for(lambda: served.pending("waiter") == 2, "the queued request", served)
        queued.cancel()
        wait_for(lambda: served.canceled("waiter") == canceled_before + 1,
                 "the queued request's cancellation", served)
        assert served.pending("waiter") == 1
        # The queue holds one request: the cancelled one gave its place back.
        client.async_infer("waiter", grpc_tag(4), answered(4))
        wait_for(lambda: served.pending("waiter") == 2, "the next queued request", served)
        held.cancel()
        got = {}
        while 4 not in got:  # a cancelled call's callback hears its cancellation too
            tag, result, error = answers.get(timeout=WAIT_SECS)
            got[tag] = result, error
        result, error = got[4]
        assert error is None, error
        assert result.as_numpy("OUT").tolist() == [[4]]
    assert served.record("waiter") == ["1 started", "1 cancelled", "4 started", "4 finished"]
    assert served.canceled("waiter") == canceled_before + 2
    assert served.pending("waiter") == 0


def test_a_grpc_deadline_cancels_the_running_request(served: Served) -> None:
    canceled_before = served.canceled("waiter")
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="Deadline"):
            client.infer("waiter", grpc_tag(21), client_timeout=1.0)
    wait_for(lambda: "21 cancelled" in served.record("waiter"), "is_cancelled()", served)
    wait_for(lambda: served.canceled("waiter") == canceled_before + 1, "the count", served)


def test_an_http_client_whose_connection_breaks_cancels_its_request(served: Served,
                                                                    released: Path) -> None:
    canceled_before = served.canceled("waiter")
    held = http_infer_and_keep_open(served, 11)
    wait_for(lambda: "11 started" in served.record("waiter"), "the held request", served)
    queued = http_infer_and_keep_open(served, 12)
    wait_for(lambda: served.pending("waiter") == 2, "the queued request", served)
    drop(queued)
    wait_for(lambda: served.canceled("waiter") == canceled_before + 1,
             "the queued request's cancellation", served)
    drop(held)
    wait_for(lambda: "11 cancelled" in served.record("waiter"), "is_cancelled()", served)
    with httpclient.InferenceServerClient(served.server.http_url) as client:
        tensor = httpclient.InferInput("TAG", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[14]], np.int32))
        assert client.infer("waiter", [tensor]).as_numpy("OUT").tolist() == [[14]]
    record = served.record("waiter")
    assert "12 started" not in record
    assert record[-4:] == ["11 started", "11 cancelled", "14 started", "14 finished"]
    assert served.canceled("waiter") == canceled_before + 2
    # A client that stays gets its answer, and the request is not counted as cancelled.
    connection = http_infer_and_keep_open(served, 15)
    wait_for(lambda: "15 started" in served.record("waiter"), "the held request", served)
    released.touch()
    head = connection.recv(65536)
    connection.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    assert served.record("waiter")[-1] == "15 finished"
    assert served.canceled("waiter") == canceled_before + 2


def test_a_cancelled_grpc_stream_ends_a_decoupled_model_s_request(served: Served) -> None:
    responses: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        client.start_stream(lambda result, error: responses.put(result or error))
        tensor = grpcclient.InferInput("TAG", [1], "INT32")
        tensor.set_data_from_numpy(np.array([41], np.int32))
        client.async_stream_infer("ticker", [tensor])
        for _ in range(3):
            first = responses.get(timeout=WAIT_SECS)
            assert first.as_numpy("OUT").tolist() == [41]
        client.stop_stream(cancel_requests=True)
    wait_for(lambda: "41 cancelled" in served.record("ticker"), "is_cancelled()", served)
    wait_for(lambda: served.canceled("ticker") == 1, "the CANCELED count", served)


def test_a_native_client_that_stops_waiting_cancels_its_request(served: Served) -> None:
    canceled_before = served.canceled("waiter")

    async def run() -> None:
        async with AsyncClient(served.server.url, timeout=WAIT_SECS) as client:
            held = asyncio.get_running_loop().create_task(
                client.infer("waiter", {"TAG": np.array([[51]], np.int32)}))
            while "51 started" not in served.record("waiter"):
                await asyncio.sleep(0.02)
            queued = asyncio.get_running_loop().create_task(
                client.infer("waiter", {"TAG": np.array([[52]], np.int32)}))
            while served.pending("waiter") != 2:
                await asyncio.sleep(0.02)
            queued.cancel()
            while served.canceled("waiter") != canceled_before + 1:
                await asyncio.sleep(0.02)
            held.cancel()
            for task in (held, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task

    asyncio.run(asyncio.wait_for(run(), WAIT_SECS))
    wait_for(lambda: "51 cancelled" in served.record("waiter"), "is_cancelled()", served)
    assert "52 started" not in served.record("waiter")
    # The blocking client says so too when its own timeout passes.
    with Client(served.server.url, timeout=0.5) as client:
        with pytest.raises(DeadlineExceeded):
            client.infer("waiter", {"TAG": np.array([[53]], np.int32)})
    wait_for(lambda: "53 cancelled" in served.record("waiter"), "is_cancelled()", served)
    assert served.canceled("waiter") == canceled_before + 3
