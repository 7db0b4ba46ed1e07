"""The sans-I/O HTTP/2 of the loop gRPC server: a client's frames driven through
``Connection`` byte for byte, and what it sends back."""

from __future__ import annotations

import pytest
from inferd.protocols.http2 import hpack, connection as http2
from inferd.protocols.http2.connection import Connection, ProtocolError


# ------------------------------------------------------------------------------ frames

def client_headers(stream_id: int, fields: list[tuple[str, str]], end_stream: bool = False,
                   ) -> bytes:
    flags = http2.END_HEADERS | (http2.END_STREAM if end_stream else 0)
    return http2.frame(http2.HEADERS, flags, stream_id, hpack.encode_headers(fields))


# The preface and the SETTINGS frame that must follow it (RFC 9113 section 3.4).
OPENING = http2.PREFACE + http2.settings_frame([])
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/s/M"),
           ("content-type", "application/grpc")]


def opened(**settings: int) -> Connection:
    connection = Connection()
    connection.take_output()
    pairs = list(settings.items())
    ids = {"initial_window": http2.INITIAL_WINDOW_SIZE, "max_frame": http2.MAX_FRAME_SIZE}
    assert connection.receive(http2.PREFACE + http2.settings_frame(
        [(ids[key], value) for key, value in pairs])) == []
    assert connection.take_output() == [http2.frame(http2.SETTINGS, http2.ACK, 0)]
    return connection


def frames(chunks: list[http2.Chunk]) -> list[tuple[int, int, int, bytes]]:
    data = b"".join(bytes(chunk) for chunk in chunks)
    out = []
    while data:
        length = int.from_bytes(data[:3], "big")
        out.append((data[3], data[4], int.from_bytes(data[5:9], "big"), data[9:9 + length]))
        data = data[9 + length:]
    return out


def test_the_server_announces_its_settings_and_opens_the_connection_window() -> None:
    sent = frames(Connection().take_output())
    assert [kind for kind, *_ in sent] == [http2.SETTINGS, http2.WINDOW_UPDATE]
    increment = int.from_bytes(sent[1][3], "big")
    assert increment == http2.CONNECTION_WINDOW - http2.DEFAULT_WINDOW


def test_a_request_arriving_in_pieces_gives_its_headers_then_its_data() -> None:
    connection = opened()
    wire = (client_headers(1, REQUEST)
            + http2.frame(http2.DATA, http2.END_STREAM, 1, b"\x00\x00\x00\x00\x02hi"))
    events = [event for at in range(len(wire)) for event in connection.receive(wire[at:at + 1])]
    assert [(e.kind, e.stream_id, e.end_stream) for e in events] == [
        (http2.EV_HEADERS, 1, False), (http2.EV_DATA, 1, True)]
    assert events[0].headers == tuple(REQUEST)
    assert events[1].data == b"\x00\x00\x00\x00\x02hi"


def test_a_header_block_continued_and_padded_frames() -> None:
    connection = opened()
    block = hpack.encode_headers(REQUEST)
    padded = bytes([3]) + block[:4] + b"\x00" * 3
    wire = (http2.frame(http2.HEADERS, http2.PADDED, 3, padded)
            + http2.frame(http2.CONTINUATION, http2.END_HEADERS, 3, block[4:])
            + http2.frame(http2.DATA, http2.PADDED | http2.END_STREAM, 3, b"\x01ab\x00"))
    events = connection.receive(wire)
    assert events[0].headers == tuple(REQUEST)
    assert events[1].data == b"ab" and events[1].end_stream


def test_a_reply_leaves_whole_when_it_fits_and_waits_for_the_window_when_not() -> None:
    connection = opened(initial_window=10)
    connection.receive(client_headers(1, REQUEST, end_stream=True))
    connection.receive(client_headers(3, REQUEST, end_stream=True))
    connection.respond(1, b"H", b"0123456789", b"T")
    assert [(k, f, s, p) for k, f, s, p in frames(connection.take_output())] == [
        (http2.HEADERS, http2.END_HEADERS, 1, b"H"), (http2.DATA, 0, 1, b"0123456789"),
        (http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, 1, b"T")]
    connection.respond(3, b"H", b"0123456789abcd", b"T")
    sent = frames(connection.take_output())
    assert [(k, p) for k, _, _, p in sent] == [(http2.HEADERS, b"H"), (http2.DATA, b"0123456789")]
    assert connection.pending(3) == 4
    events = connection.receive(http2.window_update(3, 100))
    sent = frames(connection.take_output())
    assert [(k, f, p) for k, f, _, p in sent] == [
        (http2.DATA, 0, b"abcd"), (http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, b"T")]
    assert events == [] and not connection.is_open(3)


def test_data_is_cut_at_the_peers_largest_frame_and_a_drained_stream_is_reported() -> None:
    connection = opened(initial_window=100_000)
    connection.receive(client_headers(1, REQUEST))
    connection.receive(http2.settings_frame([(http2.MAX_FRAME_SIZE, 20_000)]))
    connection.take_output()
    connection.send_headers(1, b"H")
    connection.send_data(1, bytes(70_000))
    sent = frames(connection.take_output())
    sizes = [len(p) for k, _, _, p in sent if k == http2.DATA]
    assert sizes == [20_000, 20_000, 20_000, 5_535]  # the connection's window is 65,535
    events = connection.receive(http2.window_update(0, 10_000))
    assert [len(p) for k, _, _, p in frames(connection.take_output())] == [4_465]
    assert [(e.kind, e.stream_id) for e in events] == [(http2.EV_DRAINED, 1)]


def test_what_is_read_is_given_back_only_as_it_is_released() -> None:
    connection = opened()
    connection.receive(client_headers(1, REQUEST) + client_headers(3, REQUEST))
    half = http2.STREAM_WINDOW // 2
    for stream_id in (1, 3):
        for at in range(0, half, http2.DEFAULT_MAX_FRAME):
            connection.receive(http2.frame(http2.DATA, 0, stream_id,
                                           bytes(min(http2.DEFAULT_MAX_FRAME, half - at))))
    assert not [f for f in frames(connection.take_output()) if f[0] == http2.WINDOW_UPDATE]
    connection.release(3, half)
    assert frames(connection.take_output()) == [(http2.WINDOW_UPDATE, 0, 3,
                                                 half.to_bytes(4, "big"))]
    connection.release(1, half)
    assert frames(connection.take_output()) == [(http2.WINDOW_UPDATE, 0, 1,
                                                 half.to_bytes(4, "big"))]


def test_a_stream_that_closes_gives_back_what_it_held_of_the_connection_window() -> None:
    connection = opened()
    half = http2.CONNECTION_WINDOW // 2
    for stream_id in range(1, 2 * (half // http2.STREAM_WINDOW) + 2, 2):
        connection.receive(client_headers(stream_id, REQUEST))
        for _ in range(http2.STREAM_WINDOW // http2.DEFAULT_MAX_FRAME):
            connection.receive(http2.frame(http2.DATA, 0, stream_id,
                                           bytes(http2.DEFAULT_MAX_FRAME)))
        connection.reset(stream_id, http2.CANCEL)
    updates = [int.from_bytes(p, "big") for k, _, s, p in frames(connection.take_output())
               if k == http2.WINDOW_UPDATE and s == 0]
    assert sum(updates) >= half


def test_pings_are_answered_and_a_reset_is_an_event() -> None:
    connection = opened()
    connection.receive(client_headers(1, REQUEST))
    events = connection.receive(http2.frame(http2.PING, 0, 0, b"12345678")
                                + http2.frame(http2.RST_STREAM, 0, 1, bytes(4)))
    assert frames(connection.take_output()) == [(http2.PING, http2.ACK, 0, b"12345678")]
    assert [(e.kind, e.stream_id) for e in events] == [(http2.EV_RESET, 1)]
    assert not connection.is_open(1)


@pytest.mark.parametrize("wire, code", [
    (b"GET / HTTP/1.1\r\n\r\n" + bytes(10), http2.PROTOCOL_ERROR),
    (OPENING + http2.frame(http2.DATA, 0, 0, b"x"), http2.PROTOCOL_ERROR),
    (OPENING + http2.frame(http2.HEADERS, http2.END_HEADERS, 2, b""),
     http2.PROTOCOL_ERROR),
    (OPENING + http2.frame(http2.PING, 0, 0, b"short"), http2.FRAME_SIZE_ERROR),
    (OPENING + http2.frame_header(20_000, http2.DATA, 0, 1), http2.FRAME_SIZE_ERROR),
    (OPENING + http2.frame(http2.HEADERS, 0, 1, b"\x82")
     + http2.frame(http2.DATA, 0, 1, b""), http2.PROTOCOL_ERROR),
    (OPENING + http2.window_update(0, 2**31 - 1), http2.FLOW_CONTROL_ERROR),
    (OPENING + http2.frame(http2.HEADERS, http2.END_HEADERS, 1, b"\x80"),
     http2.COMPRESSION_ERROR),
])
def test_a_broken_protocol_is_a_connection_error(wire: bytes, code: int) -> None:
    with pytest.raises(ProtocolError) as error:
        Connection().receive(wire)
    assert error.value.code == code
