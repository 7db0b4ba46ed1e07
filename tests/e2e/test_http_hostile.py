"""The KServe HTTP frontend against hostile or broken clients (issue 8, points 5, 7 and 9; issue
35, point 4), over raw loopback sockets since no well-behaved client sends these bytes:
connections that never finish a head or a body, more connections than
``--http-max-connections``, garbage and invalid requests after valid ones, half-closed
connections, non-ASCII digits in a length header, clients that never read a large response,
request bodies in more chunks than Triton allows, and JSON nested deeper than the parser is
let go. Every test then checks that the server still answers a tritonclient.http infer.

One server with one-second timeouts serves most of the module; the connection cap has its own
server, whose long header timeout keeps idle connections open while the test holds them.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import ServerHandle, wait_for

TIMEOUT_SECS = 1.0
CAP = 12
WAIT_SECS = 10.0  # the longest any single wait here may take
STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> ServerHandle:
    return module_inferd.start(
        module_inferd.repository("simple", "identity_fp32"),
        "--http-header-timeout-secs", str(TIMEOUT_SECS),
        "--http-body-timeout-secs", str(TIMEOUT_SECS),
        "--http-keep-alive-timeout-secs", str(TIMEOUT_SECS),
    )


@pytest.fixture(scope="module")
def capped(module_inferd: Any) -> ServerHandle:
    return module_inferd.start(
        module_inferd.repository("simple"),
        "--http-header-timeout-secs", "60", "--http-keep-alive-timeout-secs", "60",
        f"--http-max-connections={CAP}",
    )


INFER_BODY = json.dumps({"inputs": [
    {"name": name, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
    for name in ("INPUT0", "INPUT1")
]}).encode()


def infer_request(extra_headers: bytes = b"", body: bytes = INFER_BODY) -> bytes:
    return (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\n"
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        + extra_headers + b"\r\n" + body
    )


def connect(server: ServerHandle, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(WAIT_SECS)
    sock.connect(("127.0.0.1", server.ports["http"]))
    return sock


def read_until_closed(sock: socket.socket, limit: float = WAIT_SECS) -> tuple[bytes, str]:
    """Everything the server sends until it closes ("closed"), resets ("reset") or ``limit``
    seconds pass ("open")."""
    data = b""
    deadline = time.monotonic() + limit
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            break
        except ConnectionResetError:
            return data, "reset"
        if not chunk:
            return data, "closed"
        data += chunk
    return data, "open"


def statuses(data: bytes) -> list[int]:
    return [int(code) for code in STATUS.findall(data)]


def last_error(data: bytes) -> str:
    body = data.rsplit(b"\r\n\r\n", 1)[1]
    message: str = json.loads(body)["error"]
    return message


def assert_serves(server: ServerHandle) -> None:
    """A fresh tritonclient.http client still gets ``simple``'s answer."""
    client = httpclient.InferenceServerClient(
        server.http_url, connection_timeout=WAIT_SECS, network_timeout=WAIT_SECS
    )
    try:
        rows = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(rows)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), rows + rows)
    finally:
        client.close()


# ------------------------------------------------------------------ point 5: slow clients


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(server: ServerHandle) -> None:
    started = time.monotonic()  # before the server can start the connection's clock
    with connect(server) as sock:
        data, state = read_until_closed(sock)
    assert (data, state) == (b"", "closed")  # closed, not left "open" past WAIT_SECS
    assert time.monotonic() - started >= TIMEOUT_SECS
    assert_serves(server)


def test_a_half_sent_head_gets_408(server: ServerHandle) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: te")
        data, state = read_until_closed(sock)
    assert state == "closed"
    assert statuses(data) == [408]
    assert b"connection: close" in data
    assert "--http-header-timeout-secs" in last_error(data)
    assert_serves(server)


def test_the_head_timeout_runs_from_the_previous_response(server: ServerHandle) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\nGET /v2 HTTP/1.1\r\n")
        data, state = read_until_closed(sock)
    assert state == "closed"
    assert statuses(data) == [200, 408]


def test_a_body_shorter_than_its_content_length_gets_408(server: ServerHandle) -> None:
    with connect(server) as sock:
        sock.sendall(infer_request()[:-10])
        data, state = read_until_closed(sock)
    assert state == "closed"  # closed, not left "open" past WAIT_SECS
    assert statuses(data) == [408]
    assert "--http-body-timeout-secs" in last_error(data)
    assert_serves(server)


def test_a_body_that_keeps_coming_is_not_cut_off(server: ServerHandle) -> None:
    request = infer_request()
    with connect(server) as sock:
        head_end = request.index(b"\r\n\r\n") + 4
        sock.sendall(request[:head_end])
        # The client's pace is what is tested, not a wait for an event: twenty pieces, a tenth
        # of the timeout apart, so twice the timeout in all (a deadline on the whole body,
        # swept up to a quarter of it late, would cut it off) while each pause is a tenth of
        # what the timeout allows (a busy machine stretches it, not tenfold).
        piece = -(-(len(request) - head_end) // 20)
        for offset in range(head_end, len(request), piece):
            time.sleep(TIMEOUT_SECS / 10)
            sock.sendall(request[offset : offset + piece])
        data, state = read_until_closed(sock)
    assert statuses(data) == [200]
    assert state == "closed"  # idle afterwards: the header timeout closes it


def test_the_open_file_limit_is_raised_to_the_hard_limit(server: ServerHandle) -> None:
    limits = Path(f"/proc/{server.process.pid}/limits").read_text()
    found = re.search(r"^Max open files\s+(\S+)\s+(\S+)", limits, re.MULTILINE)
    assert found is not None
    soft, hard = found.groups()
    assert soft == hard or int(soft) >= 1 << 20


def test_at_the_cap_a_new_connection_replaces_the_longest_idle_one(
    capped: ServerHandle,
) -> None:
    held = []
    try:
        for _ in range(CAP):  # each answered once, in order: the first is the longest idle
            held.append(connect(capped))
            held[-1].sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
            assert held[-1].recv(1 << 16).startswith(b"HTTP/1.1 200 ")
        with connect(capped) as newcomer:
            newcomer.sendall(infer_request())
            assert newcomer.recv(1 << 16).startswith(b"HTTP/1.1 200 ")
        data, state = read_until_closed(held[0])
        assert (data, state) == (b"", "closed")
        for sock in held[-3:]:  # the others are untouched
            sock.sendall(infer_request())
            sock.settimeout(WAIT_SECS)
            assert sock.recv(1 << 16).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()


def test_connections_past_the_cap_of_busy_ones_get_503_and_the_rest_keep_serving(
    capped: ServerHandle,
) -> None:
    # Every connection is receiving a request body (a request in flight): none can go.
    held = [connect(capped) for _ in range(CAP)]
    for sock in held:
        sock.sendall(infer_request()[:-10])
    try:
        with connect(capped) as excess:
            data, state = read_until_closed(excess)
        assert state in ("closed", "reset")
        assert statuses(data) == [503]
        assert "--http-max-connections" in last_error(data)
        # Every descriptor the cap allows is taken: the other protocols still answer.
        with grpcclient.InferenceServerClient(capped.grpc_url) as grpc:
            assert grpc.is_server_live(client_timeout=WAIT_SECS)
            rows = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(rows)
            result = grpc.infer("simple", inputs, client_timeout=WAIT_SECS)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), rows - rows)
        metrics = f"http://127.0.0.1:{capped.ports['metrics']}/metrics"
        with urllib.request.urlopen(metrics, timeout=WAIT_SECS) as response:
            assert response.status == 200
            assert b"nv_inference_request_success" in response.read()
        for sock in held[:3]:  # connections inside the cap are served as usual
            sock.sendall(infer_request()[-10:])
            sock.settimeout(WAIT_SECS)
            assert sock.recv(1 << 16).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + WAIT_SECS
    while True:  # the server sees the closes a moment later
        try:
            assert_serves(capped)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_metrics_connections_past_its_cap_are_refused(server: ServerHandle) -> None:
    from inferd.plugins.frontends.metrics.frontend import MAX_CONNECTIONS

    address = ("127.0.0.1", server.ports["metrics"])
    held = [socket.create_connection(address, timeout=WAIT_SECS) for _ in range(MAX_CONNECTIONS)]
    port, clients = server.ports["metrics"], [sock.getsockname()[1] for sock in held]
    try:  # the server has taken every one before the excess arrives
        wait_for(lambda: all(server_holds(server, client, port) for client in clients),
                 "the server to accept the connections", server)
        with socket.create_connection(address, timeout=WAIT_SECS) as excess:
            data, state = read_until_closed(excess)
        assert state in ("closed", "reset")
        assert statuses(data) == [503]
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: not any(server_holds(server, client, port) for client in clients),
             "the server to close them", server)
    metrics = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(metrics, timeout=WAIT_SECS) as response:
        assert response.status == 200


# ------------------------------------------------------------------ point 7: framing


def test_garbage_after_a_valid_request_gets_the_answer_then_400(server: ServerHandle) -> None:
    with connect(server) as sock:
        sock.sendall(infer_request() + b"\x00\x01 not http\r\n\r\n")
        data, state = read_until_closed(sock)
    assert state == "closed"
    assert statuses(data) == [200, 400]
    assert b'"name":"OUTPUT0"' in data.split(b"HTTP/1.1 400")[0]
    assert_serves(server)


def test_pipelined_requests_then_an_invalid_one_get_both_answers_then_400(
    server: ServerHandle,
) -> None:
    with connect(server) as sock:
        sock.sendall(infer_request() + infer_request() + b"BAD\x01 / HTTP/9.9\r\n\r\n")
        data, state = read_until_closed(sock)
    assert state == "closed"
    assert statuses(data) == [200, 200, 400]
    assert_serves(server)


def test_a_half_closed_client_still_gets_its_answer(server: ServerHandle) -> None:
    with connect(server) as sock:
        sock.sendall(infer_request())
        sock.shutdown(socket.SHUT_WR)
        data, state = read_until_closed(sock)
    assert state == "closed"
    assert statuses(data) == [200]
    assert data.endswith(b"]}]}")
    assert_serves(server)


def test_a_unicode_digit_in_the_header_length_is_400(server: ServerHandle) -> None:
    with connect(server) as sock:
        # latin-1 b'\xb2' is '²', which str.isdigit() accepts and int() refuses.
        sock.sendall(infer_request(b"Inference-Header-Content-Length: \xb2\r\n"))
        data, _ = read_until_closed(sock, TIMEOUT_SECS * 3)
    assert statuses(data) == [400]
    assert "Inference-Header-Content-Length" in last_error(data)
    assert_serves(server)


# ------------------------------------------------------------------ issue 35: chunks and nesting

MAX_CHUNKS = 65_536  # Triton's cap on the non-empty chunks of one request body


def too_many_chunks() -> str:
    return (f"Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks. "
            "Send fewer or larger HTTP chunks.")


def byte_chunked_infer(size: int) -> bytes:
    """``simple``'s infer request, padded with JSON whitespace to ``size`` bytes and sent a
    byte a chunk: ``size`` non-empty chunks, then the empty one that ends the body."""
    body = INFER_BODY.ljust(size)
    return (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"1\r\n%c\r\n" % byte for byte in body) + b"0\r\n\r\n"
    )


def test_a_body_in_the_most_chunks_is_served_and_one_chunk_more_is_400(
    server: ServerHandle,
) -> None:
    with connect(server) as sock:
        sock.sendall(byte_chunked_infer(MAX_CHUNKS))
        data, state = read_until_closed(sock)
    assert (statuses(data), state) == ([200], "closed")
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["outputs"][0]["name"] == "OUTPUT0"
    with connect(server) as sock:
        sock.sendall(byte_chunked_infer(MAX_CHUNKS + 1))
        data, state = read_until_closed(sock)
    assert (statuses(data), state) == ([400], "closed")
    assert last_error(data) == too_many_chunks()
    assert_serves(server)


def test_a_request_pipelined_before_too_many_chunks_is_answered_first(
    server: ServerHandle,
) -> None:
    with connect(server) as sock:
        sock.sendall(infer_request() + byte_chunked_infer(MAX_CHUNKS + 1))
        data, state = read_until_closed(sock)
    assert (statuses(data), state) == ([200, 400], "closed")
    assert b'"name":"OUTPUT0"' in data.split(b"HTTP/1.1 400")[0]
    assert last_error(data) == too_many_chunks()
    assert_serves(server)


def post_closing(server: ServerHandle, path: str, body: bytes) -> tuple[int, str]:
    """One POST over a fresh connection the server closes after answering: (status, error)."""
    with connect(server) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
        data, state = read_until_closed(sock)
    assert state == "closed" and len(statuses(data)) == 1
    return statuses(data)[0], last_error(data)


def nested_array(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


DEEP = nested_array(200_000)


@pytest.mark.parametrize(("path", "body", "what"), [
    ("/v2/models/simple/infer",
     b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": '
     + DEEP + b"}]}", "malformed inference request"),
    ("/v2/repository/index", b'{"ready": ' + b"[" * 1_000_000,
     "malformed repository index request"),
    ("/v2/repository/models/simple/load",
     json.dumps({"parameters": {"config": '{"input": ' + DEEP.decode() + "}"}}).encode(),
     "malformed load parameter 'config'"),
    ("/v2/systemsharedmemory/region/r/register", b'{"key": ' + DEEP + b"}",
     "malformed shared memory register request"),
    ("/v2/logging", b'{"log_info": ' + DEEP + b"}", "malformed log settings request"),
    ("/v2/trace/setting", b'{"trace_rate": ' + DEEP + b"}",
     "failed to parse the trace setting request"),
], ids=["infer", "index", "load-config", "shared-memory", "logging", "trace"])
def test_json_nested_deeper_than_64_levels_is_400(server: ServerHandle, path: str, body: bytes,
                                                  what: str) -> None:
    assert post_closing(server, path, body) == (
        400, f"{what}: JSON nesting deeper than 64 levels")
    assert_serves(server)


def test_the_nesting_cap_is_exact(server: ServerHandle) -> None:
    # The settings object is a level: 63 arrays in it reach the cap, 64 pass it.
    status, error = post_closing(server, "/v2/logging",
                                 b'{"log_info": ' + nested_array(63) + b"}")
    assert status == 400 and "nesting" not in error and "log_info" in error
    assert post_closing(server, "/v2/logging", b'{"log_info": ' + nested_array(64) + b"}") == (
        400, "malformed log settings request: JSON nesting deeper than 64 levels")
    assert_serves(server)


# ------------------------------------------------------------------ point 9: never read

LARGE_ELEMENTS = 2 << 20  # FP32: an 8 MiB input and an 8 MiB output


def large_identity_request() -> bytes:
    header = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [LARGE_ELEMENTS], "datatype": "FP32",
                    "parameters": {"binary_data_size": LARGE_ELEMENTS * 4}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }).encode()
    body = header + np.ones(LARGE_ELEMENTS, dtype=np.float32).tobytes()
    return (
        b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: test\r\n"
        + b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
        % (len(header), len(body)) + body
    )


def resident_bytes(server: ServerHandle) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert found is not None
    return int(found.group(1)) * 1024


def server_holds(server: ServerHandle, sock: socket.socket | int, port: int | None = None
                 ) -> bool:
    """Whether the server process has the peer socket of ``sock`` (or of a client port) on
    ``port`` (HTTP's by default) open. One not accepted yet, or one the server closed with
    unsent data (it lingers in the kernel; the client sees nothing until it reads), belongs to
    no process: /proc/net/tcp shows it with inode 0."""
    local = f":{port or server.ports['http']:04X}"
    client = sock if isinstance(sock, int) else sock.getsockname()[1]
    remote = f":{client:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(local) and fields[2].endswith(remote):
            return fields[9] != "0"
    return False


def test_clients_that_never_read_are_dropped_and_their_responses_freed(
    server: ServerHandle,
) -> None:
    request = large_identity_request()
    response_bytes = LARGE_ELEMENTS * 4
    # Warm up with readers, so the allocator already holds what serving these takes.
    for _ in range(3):
        readers = [connect(server) for _ in range(2)]
        for sock in readers:
            sock.sendall(request)
        for sock in readers:
            with sock:
                received = 0
                while received < response_bytes:
                    chunk = sock.recv(1 << 20)
                    assert chunk
                    received += len(chunk)
    baseline = resident_bytes(server)
    rounds, per_round = 4, 2
    for _ in range(rounds):
        idle = [connect(server, receive_buffer=4096) for _ in range(per_round)]
        sent = time.monotonic()
        for sock in idle:
            sock.sendall(request)
        while any(server_holds(server, sock) for sock in idle):
            assert time.monotonic() - sent < WAIT_SECS, "a client that never reads was kept"
            time.sleep(0.05)
        for sock in idle:
            with sock:
                data, state = read_until_closed(sock)
            assert state in ("closed", "reset")
            assert len(data) < response_bytes  # cut off, not delivered in full
    growth = resident_bytes(server) - baseline
    # Kept for good, the responses would add rounds * per_round * 8 MiB = 64 MiB.
    assert growth < rounds * per_round * response_bytes / 2, f"RSS grew by {growth >> 20} MiB"
    assert_serves(server)
