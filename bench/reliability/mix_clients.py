"""The stateful clients of the chaos mix: sequences, streams, shared memory regions, and
connections broken on purpose.

Owns ``Sequences`` (a running sum per correlation id on ``accumulate``, so a sequence that
saw another's state answers a wrong sum), ``Stream`` (a gRPC stream to the decoupled
``stream_words``: each word back in order, then the final flag), ``SharedMemoryClient``
(inputs and outputs in a system shared memory region of its own, registered again whenever
an answer says it is gone) and the two ways a client breaks a request mid-way (an HTTP
connection closed before its answer, a gRPC call cancelled). Each answer is checked against
a reference computed here; judging errors is ``mix_traffic``'s. Each says since when its
state has been what its next request depends on (``since``: its sequence's start, its
stream's opening, its region's registration), so a fault since then may explain a failure.
"""

from __future__ import annotations

import json
import queue
import random
import socket
import time
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from bench.reliability.mix_traffic import (
    DECOUPLED,
    OK,
    SEQUENCE,
    SHARED_MEMORY_MODEL,
    STATELESS,
    WORDS,
    Outcome,
    Target,
    Wrong,
    check,
    grpc_error,
    grpc_tensors,
    inputs_for,
    random_array,
)


class Sequences:
    """One client's sequences on ``accumulate`` over gRPC: each a fresh correlation id, its
    answers the running sum of its own inputs (another sequence's state would show as a wrong
    sum). After an error the sequence is dropped and a new one started."""

    def __init__(self, first_id: int, rng: random.Random) -> None:
        self.next_id = first_id
        self.rng = rng
        self.sequence_id = 0
        self.total = 0.0
        self.left = 0
        self.since = time.monotonic()  # when the current sequence started

    def once(self, client: Any, target: Target) -> Outcome:
        start = self.left == 0
        if start:
            self.since = time.monotonic()
            self.sequence_id, self.next_id = self.next_id, self.next_id + 1
            self.total, self.left = 0.0, self.rng.randint(2, 12)
        value = float(self.rng.randint(1, 1000))
        self.left -= 1
        tensor = grpcclient.InferInput("INPUT", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], np.float32))
        try:
            result = client.infer(SEQUENCE, [tensor], sequence_id=self.sequence_id,
                                  sequence_start=start, sequence_end=self.left == 0,
                                  client_timeout=target.deadline)
        except InferenceServerException:
            self.left = 0
            raise
        self.total += value
        got = result.as_numpy("OUTPUT")
        if got is None or float(got.ravel()[0]) != self.total:
            self.left = 0
            raise Wrong(f"sequence {self.sequence_id}: got {got}, want {self.total} (another "
                        "sequence's state?)")
        return OK


class Stream:
    """One client's gRPC stream to ``stream_words``: a request of a few words is answered by
    each word in order, then an empty final response."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.client: Any = None
        self.answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.requests = 0
        self.since = time.monotonic()  # when the current stream opened

    def open(self) -> None:
        self.since = time.monotonic()
        self.client = grpcclient.InferenceServerClient(self.target.grpc)
        self.answers = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.answers.put((result,
                                                                                  error)))

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.stop_stream(cancel_requests=True)
                self.client.close()
            except Exception:  # noqa: BLE001 - a stream the server broke: gone already
                pass
            self.client = None

    def once(self, rng: random.Random) -> Outcome:
        if self.client is None:
            self.open()
        self.requests += 1
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
        tensor = grpcclient.InferInput("text_input", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([" ".join(words).encode()], np.object_))
        request_id = str(self.requests)
        self.client.async_stream_infer(DECOUPLED, [tensor], request_id=request_id,
                                       enable_empty_final_response=True)
        got: list[str] = []
        limit = time.monotonic() + self.target.deadline
        while True:
            try:
                result, error = self.answers.get(timeout=max(0.0, limit - time.monotonic()))
            except queue.Empty:
                self.close()
                return "hung", "", f"stream: {got} of {words} after {self.target.deadline} s"
            if error is not None:
                self.close()  # the stream is over after an error
                return grpc_error(error)
            response = result.get_response()
            if response.id != request_id:
                return "wrong", "", f"stream: answer for {response.id} to request {request_id}"
            output = result.as_numpy("text_output")
            if output is not None and output.size:
                got.append(output.ravel()[0].decode())
            if response.parameters["triton_final_response"].bool_param:
                break
        if got != words:
            return "wrong", "", f"stream: got {got}, want {words}"
        return OK


class SharedMemoryClient:
    """A client whose inputs and outputs are in a system shared memory region of its own,
    registered over HTTP; the chaos may unregister it at any time, and it registers it again
    when an answer says so."""

    def __init__(self, target: Target, key: str) -> None:
        self.target = target
        self.name, self.key, self.size = key.strip("/"), key, 2 * 64 * 4
        self.handle = shm.create_shared_memory_region(self.name, key, self.size)
        self.client = httpclient.InferenceServerClient(
            target.http, connection_timeout=5, network_timeout=target.deadline)
        self.registered = False
        self.since = time.monotonic()  # when the region was last registered

    def register(self) -> None:
        self.since = time.monotonic()
        self.client.register_system_shared_memory(self.name, self.key, self.size)
        self.registered = True

    def once(self, rng: random.Random) -> Outcome:
        if not self.registered:
            try:
                self.register()
            except InferenceServerException as error:
                if "already" in (error.message() or ""):
                    self.registered = True  # registered before an answer got lost
                else:
                    raise
        values = random_array(rng, (rng.randint(1, 64),), np.float32)
        shm.set_shared_memory_region(self.handle, [values])
        tensor = httpclient.InferInput("INPUT0", list(values.shape), "FP32")
        tensor.set_shared_memory(self.name, values.nbytes)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        output.set_shared_memory(self.name, values.nbytes, offset=64 * 4)
        try:
            self.client.infer(SHARED_MEMORY_MODEL, [tensor], outputs=[output])
        except InferenceServerException as error:
            if "shared memory" in (error.message() or ""):
                self.registered = False
            raise
        got = shm.get_contents_as_numpy(self.handle, np.float32, list(values.shape),
                                        offset=64 * 4)
        check(f"{SHARED_MEMORY_MODEL} (shared memory)", "OUTPUT0", got, values)
        return OK

    def close(self) -> None:
        try:
            self.client.unregister_system_shared_memory(self.name)
        except Exception:  # noqa: BLE001 - the server may be gone already
            pass
        self.client.close()
        shm.destroy_shared_memory_region(self.handle)


def break_http(target: Target, rng: random.Random) -> None:
    """Send an inference (all of it, or its head and half its body) and close the
    connection without reading the answer."""
    host, port = target.http.rsplit(":", 1)
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]}).encode()
    head = (f"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=target.deadline) as sock:
        sock.sendall(head + (body if rng.random() < 0.5 else body[: len(body) // 2]))


def break_grpc(client: Any, rng: random.Random) -> None:
    """Start an inference and cancel it before its answer comes."""
    model = rng.choice(STATELESS)
    context = client.async_infer(model, grpc_tensors(inputs_for(model, rng)),
                                 callback=lambda result, error: None)
    context.cancel()
