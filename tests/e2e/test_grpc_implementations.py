"""Both gRPC servers (``--grpc-implementation loop``, the default, and ``grpcio``) answer the
real clients alike, and the loop server survives what no client sends: broken HTTP/2.

The rest of the suite runs on the default; here each implementation serves the same calls:
the log names which one serves, an inference, an unknown model's and an unknown method's
statuses, compressed requests, a stream, a call past its deadline on a held model, and a
cancelled one. Then raw sockets send the loop server a wrong preface, frames a client may
not send, a frame larger than it allows and a connection cut mid-frame; each such connection
is closed, with a GOAWAY naming the error where the preface was right, and the server
answers the next real client; a peer that stops answering keepalive pings is hung up on.
"""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.protocols.http2 import connection as http2
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, wait_for

IMPLEMENTATIONS = ["loop", "grpcio"]


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def server(request: pytest.FixtureRequest, module_inferd: InferdHarness,
           tmp_path_factory: pytest.TempPathFactory) -> ServerHandle:
    held = tmp_path_factory.mktemp("held")
    root = module_inferd.repository("simple")
    model = root / "held"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(module_inferd.testing_config(
        "held", "slow", delay_ms="60000", started_file=str(held / "started"),
        release_file=str(held / "release")))
    flags = ["--model-control-mode=explicit", "--load-model=simple", "--load-model=held"]
    if request.param != "loop":  # the default must be the loop server
        flags.append(f"--grpc-implementation={request.param}")
    server = module_inferd.start(root, *flags)
    server.held = held  # type: ignore[attr-defined]
    server.implementation = request.param  # type: ignore[attr-defined]
    return server


@pytest.fixture
def client(server: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


def simple_inputs() -> list[grpcclient.InferInput]:
    values = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(values)
    return inputs


def assert_simple_answers(client: grpcclient.InferenceServerClient) -> None:
    """``simple`` answers ``simple_inputs``: their sum and their difference."""
    result = client.infer("simple", simple_inputs())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * np.arange(16).reshape(1, 16))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), np.int32))


def test_the_log_names_the_implementation(server: ServerHandle) -> None:
    which = {"loop": "(HTTP/2 on the event loop)", "grpcio": "(grpc.aio)"}
    assert f"gRPC frontend listening on 127.0.0.1:{server.ports['grpc']} " \
        f"{which[server.implementation]}" in server.log()  # type: ignore[attr-defined]


def test_an_inference_and_the_statuses_of_what_is_not_there(
        client: grpcclient.InferenceServerClient, server: ServerHandle) -> None:
    assert_simple_answers(client)
    with pytest.raises(InferenceServerException) as missing:
        client.infer("nope", simple_inputs())
    assert missing.value.status() == "StatusCode.NOT_FOUND"
    assert missing.value.message() == "Request for unknown model: 'nope' is not found"
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod")
        with pytest.raises(grpc.RpcError) as unknown:
            call(b"")
    assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert unknown.value.details() == "Method not found!"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_a_compressed_request(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    result = client.infer("simple", simple_inputs(), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), np.int32))


def test_a_stream_answers_each_request_in_order(
        client: grpcclient.InferenceServerClient) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for number in range(5):
            client.async_stream_infer("simple", simple_inputs(), request_id=str(number))
        got = [answers.get(timeout=30) for _ in range(5)]
    finally:
        client.stop_stream()
    assert [error for _, error in got] == [None] * 5
    assert [result.get_response().id for result, _ in got] == ["0", "1", "2", "3", "4"]


def held_input() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    return [tensor]


def test_a_call_past_its_deadline_is_answered_deadline_exceeded(
        client: grpcclient.InferenceServerClient, server: ServerHandle) -> None:
    held: Path = server.held  # type: ignore[attr-defined]
    started = held / "started"
    before = len(started.read_text().splitlines()) if started.exists() else 0
    with pytest.raises(InferenceServerException) as late:
        client.infer("held", held_input(), client_timeout=0.5)
    assert late.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    wait_for(lambda: started.exists() and len(started.read_text().splitlines()) > before,
             "the held model to start the late call", server)
    # Released for good: the held batch may look for the file only after a later unlink.
    (held / "release").write_text("go")
    assert_simple_answers(client)


# ------------------------------------------------------------------------------ broken HTTP/2


@pytest.fixture(scope="module")
def loop_server(module_inferd: InferdHarness) -> ServerHandle:
    return module_inferd.start(module_inferd.repository("simple"),
                               "--model-control-mode=explicit", "--load-model=simple")


def exchange(server: ServerHandle, data: bytes) -> bytes:
    """What the server sends back to a connection that sends ``data``, until it closes it."""
    with socket.create_connection(("127.0.0.1", server.ports["grpc"]), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def goaway(received: bytes) -> tuple[int, bytes] | None:
    """The error code and debug data of the GOAWAY among the frames ``received``, if any."""
    while len(received) >= 9:
        length = int.from_bytes(received[:3], "big")
        if received[3] == http2.GOAWAY:
            return (int.from_bytes(received[9 + 4:9 + 8], "big"),
                    bytes(received[9 + 8:9 + length]))
        received = received[9 + length:]
    return None


OPENED = http2.PREFACE + http2.settings_frame([])


@pytest.mark.parametrize("data, code, named", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", http2.PROTOCOL_ERROR, b"preface"),
    (OPENED + http2.frame(http2.DATA, 0, 0, b"x"), http2.PROTOCOL_ERROR, b"stream 0"),
    (OPENED + http2.frame(http2.HEADERS, http2.END_HEADERS, 2, b"\x82"), http2.PROTOCOL_ERROR,
     b"stream 2"),
    (OPENED + http2.frame(http2.HEADERS, http2.END_HEADERS, 1, b"\xff\xff"),
     http2.COMPRESSION_ERROR, b"integer"),
    (OPENED + http2.frame_header(1 << 20, http2.DATA, 0, 1), http2.FRAME_SIZE_ERROR,
     b"1048576"),
    (OPENED + http2.frame(http2.PUSH_PROMISE, 0, 1, bytes(8)), http2.PROTOCOL_ERROR, b"push"),
    (OPENED + http2.frame_header(100, http2.HEADERS, 0, 1) + b"\x82", None, b""),
], ids=["http1", "data-on-0", "even-stream", "bad-hpack", "huge-frame", "push", "cut"])
def test_broken_http2_closes_that_connection_only(
        loop_server: ServerHandle, data: bytes, code: int | None, named: bytes) -> None:
    with grpcclient.InferenceServerClient(loop_server.grpc_url) as client:
        assert_simple_answers(client)
        received = exchange(loop_server, data)
        said = goaway(received)
        if code is None:  # cut mid-frame: closed without a word, nothing to answer
            assert said is None, said
        else:  # a GOAWAY with the code, its debug data naming what was wrong
            assert said is not None and said[0] == code and named in said[1], said
        assert_simple_answers(client)


@pytest.fixture(scope="module")
def pinging_server(module_inferd: InferdHarness) -> ServerHandle:
    return module_inferd.start(module_inferd.repository("simple"),
                               "--model-control-mode=explicit", "--load-model=simple",
                               "--grpc-keepalive-time=100", "--grpc-keepalive-timeout=100")


def test_a_peer_that_stops_answering_pings_is_closed(pinging_server: ServerHandle) -> None:
    with socket.create_connection(("127.0.0.1", pinging_server.ports["grpc"]),
                                  timeout=30) as sock:
        sock.sendall(OPENED)  # then silence: no frame, no PING acknowledged
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    kinds = []
    while len(received) >= 9:
        length = int.from_bytes(received[:3], "big")
        kinds.append((received[3], received[4]))
        received = received[9 + length:]
    assert (http2.PING, 0) in kinds  # asked, never answered: the server hung up
    with grpcclient.InferenceServerClient(pinging_server.grpc_url) as client:
        assert client.is_server_live()
