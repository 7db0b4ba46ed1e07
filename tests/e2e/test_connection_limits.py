"""Slow, idle and too many connections (issue 13, point 6), over raw loopback sockets: a
slowloris crowd (idle sockets, heads that never end, heads that trickle a line at a time)
far past ``--http-max-connections`` never stops a normal client from being served and is
closed after the documented timeouts; gRPC connections that never set up HTTP/2 are closed
after ``--grpc-handshake-timeout-secs`` and idle ones after
``--grpc-max-connection-idle-secs``, and a crowd of idle gRPC connections past
``--grpc-max-connections`` is closed at once and never starves an HTTP client (issue 28);
running out of file descriptors is answered by refusing
or closing connections, never by a crash, and the server serves again once they are back.
"""

from __future__ import annotations

import resource
import socket
import threading
import time
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import ServerHandle, wait_for

TIMEOUT_SECS = 2.0
CAP = 24
CROWD = 90  # idle, stuck and trickling sockets together, well past the cap
WAIT_SECS = 15.0


@pytest.fixture(scope="module")
def server(module_inferd: Any) -> ServerHandle:
    return module_inferd.start(
        module_inferd.repository("simple"),
        f"--http-header-timeout-secs={TIMEOUT_SECS}",
        f"--http-keep-alive-timeout-secs={TIMEOUT_SECS}",
        f"--http-max-connections={CAP}",
        f"--grpc-handshake-timeout-secs={TIMEOUT_SECS}",
        f"--grpc-max-connection-idle-secs={TIMEOUT_SECS}",
        f"--grpc-max-connections={CAP}",
    )


def simple_inputs(module: Any) -> list[Any]:
    rows = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(rows)
    return inputs


def http_infer(server: ServerHandle) -> None:
    """One inference on a fresh connection, bounded."""
    client = httpclient.InferenceServerClient(
        server.http_url, connection_timeout=WAIT_SECS, network_timeout=WAIT_SECS)
    try:
        result = client.infer("simple", simple_inputs(httpclient))
        assert result.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]
    finally:
        client.close()


def established(server: ServerHandle, port: int) -> int:
    """The server process's established connections on ``port``."""
    connections = psutil.Process(server.process.pid).net_connections(kind="tcp")
    return sum(1 for c in connections
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def closed_by_server(sock: socket.socket, within: float) -> bytes | None:
    """What the server sent before closing ``sock`` within ``within`` seconds; None if it
    was still open then."""
    data = b""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            return None
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    return None


def knock(port: int, held: list[socket.socket]) -> str:
    """How the server answers a new client asking whether it is live: "served" (200),
    "refused" (a 503, or the connection refused, reset or closed with no answer) or
    "hanging" (no answer and no close within WAIT_SECS). The socket is added to ``held``."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECS)
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "hanging"
    held.append(sock)
    head = b""
    try:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
        while b"\r\n" not in head:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return "refused"
            head += chunk
    except (ConnectionResetError, BrokenPipeError):
        return "refused"
    except TimeoutError:
        return "hanging"
    if head.startswith(b"HTTP/1.1 503 "):
        return "refused"
    return "served" if head.startswith(b"HTTP/1.1 200 ") else f"answered {head!r}"


def test_a_slowloris_crowd_never_starves_a_normal_client(server: ServerHandle) -> None:
    port = server.ports["http"]
    crowd: list[socket.socket] = []
    trickling: list[socket.socket] = []
    stop = threading.Event()

    def trickle() -> None:  # one more header line every 0.2 s, never the end of the head
        while not stop.wait(0.2):
            for sock in list(trickling):
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    trickling.remove(sock)

    thread = threading.Thread(target=trickle, daemon=True)
    try:
        for index in range(CROWD):
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECS)
            crowd.append(sock)
            if index % 3 == 1:
                sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
            elif index % 3 == 2:
                sock.sendall(b"GET /v2 HTTP/1.1\r\n")
                trickling.append(sock)
        thread.start()
        served = 0
        started = time.monotonic()
        while time.monotonic() - started < TIMEOUT_SECS * 1.5:
            before = time.monotonic()
            http_infer(server)
            assert time.monotonic() - before < 5.0, "a normal client waited behind the crowd"
            served += 1
        assert served >= 5
        assert established(server, port) <= CAP
        # The crowd is gone after the documented timeouts (a trickle does not extend them).
        answers = [closed_by_server(sock, TIMEOUT_SECS + 4) for sock in crowd]
        assert all(answer is not None for answer in answers), "a slow client was kept open"
        assert any(answer.startswith(b"HTTP/1.1 408 ") for answer in answers if answer)
    finally:
        stop.set()
        for sock in crowd:
            sock.close()
    http_infer(server)


def test_a_grpc_connection_that_never_sets_up_is_closed(server: ServerHandle) -> None:
    port = server.ports["grpc"]
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECS) as silent, \
            socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECS) as garbage:
        garbage.sendall(b"GET / HTTP/1.1\r\n")  # not HTTP/2: the set-up never completes
        started = time.monotonic()
        assert closed_by_server(silent, TIMEOUT_SECS + 6) is not None
        assert closed_by_server(garbage, TIMEOUT_SECS + 6) is not None
        assert time.monotonic() - started < TIMEOUT_SECS + 6
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live(client_timeout=WAIT_SECS)


def test_an_idle_grpc_connection_is_closed_and_the_client_reconnects(
        server: ServerHandle) -> None:
    port = server.ports["grpc"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.infer("simple", simple_inputs(grpcclient), client_timeout=WAIT_SECS)
        assert established(server, port) >= 1
        deadline = time.monotonic() + TIMEOUT_SECS + 8
        while established(server, port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert established(server, port) == 0, "an idle gRPC connection was kept open"
        result = client.infer("simple", simple_inputs(grpcclient), client_timeout=WAIT_SECS)
        assert result.as_numpy("OUTPUT1").tolist() == [[0] * 16]


# An HTTP/2 client's opening: the preface and an empty SETTINGS frame. The connection is then
# set up and idle, as a gRPC channel between calls.
HTTP2_OPENING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def test_an_idle_grpc_crowd_past_the_cap_is_closed_and_never_starves_http(
        server: ServerHandle) -> None:
    port = server.ports["grpc"]
    crowd: list[socket.socket] = []
    try:
        for _ in range(CROWD):
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECS)
            sock.sendall(HTTP2_OPENING)
            crowd.append(sock)
        # The kernel accepts a connection before the server sees and closes it: wait for the
        # server to have closed the excess (a CI run counted 26 of a cap of 24 at once).
        wait_for(lambda: established(server, port) <= CAP,
                 f"at most {CAP} gRPC connections established", server)
        http_infer(server)  # the descriptors HTTP needs are still there
        # Past the cap a connection is closed as soon as it is accepted, before the server
        # sends a byte; the others get the server's SETTINGS, then are closed once idle for
        # --grpc-max-connection-idle-secs.
        answers = [closed_by_server(sock, TIMEOUT_SECS + 8) for sock in crowd]
        assert all(answer is not None for answer in answers), "an idle gRPC connection was kept"
        refused = sum(1 for answer in answers if answer == b"")
        assert refused >= CROWD - CAP, f"only {refused} of {CROWD} connections were refused"
        assert all(answer[3] == 4 for answer in answers if answer)  # a SETTINGS frame first
    finally:
        for sock in crowd:
            sock.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("simple", simple_inputs(grpcclient), client_timeout=WAIT_SECS)
        assert result.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]


def test_out_of_descriptors_refuses_connections_then_serves_again(inferd: Any) -> None:
    server = inferd.start(inferd.repository("simple"), "--http-max-connections=100000",
                          "--http-keep-alive-timeout-secs=60", "--http-header-timeout-secs=60")
    pid = server.process.pid
    open_now = psutil.Process(pid).num_fds()
    limit = open_now + 40
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
    held: list[socket.socket] = []
    try:
        for _ in range(limit + 40):  # more than the server can hold
            try:
                held.append(socket.create_connection(("127.0.0.1", server.ports["http"]),
                                                     timeout=WAIT_SECS))
            except OSError:
                break
        deadline = time.monotonic() + WAIT_SECS
        while psutil.Process(pid).num_fds() < limit - 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert psutil.Process(pid).num_fds() >= limit - 2, "the descriptors never ran out"
        # Out of descriptors, new clients are refused or closed, never left hanging; one
        # may slip in when a descriptor frees up for a moment. Each keeps its connection
        # until all five have tried: one that closed would give its descriptor to the next.
        knocking: list[socket.socket] = []
        try:
            answers = [knock(server.ports["http"], knocking) for _ in range(5)]
        finally:
            for sock in knocking:
                sock.close()
        assert set(answers) <= {"refused", "served"}, answers  # "hanging": never answered
        assert answers.count("refused") >= 3, f"{answers}: descriptors to spare"
        assert server.process.poll() is None
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + WAIT_SECS
    while True:  # accepting resumes a moment after descriptors are free again
        try:
            http_infer(server)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.infer("simple", simple_inputs(grpcclient), client_timeout=WAIT_SECS)
    assert server.process.poll() is None
