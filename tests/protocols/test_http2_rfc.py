"""The loop gRPC server's HTTP/2 (``inferd.protocols.http2.connection``) against the text of RFC
9113 and RFC 7541, one test per rule: a client's frames are driven through ``Connection`` byte by
byte (in larger pieces only where a test moves windows' worth of data), and the outcome is checked
exactly: the code of a connection error, or the RST_STREAM of a stream error and a connection
that still serves the next request. Then the budgets a hostile peer meets (rapid reset, control
frame floods, gRPC's ping policy, oversized header blocks) and inbound flow control.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from inferd.protocols.http2 import hpack, connection as http2
from inferd.protocols.http2.connection import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    Connection,
    Event,
    ProtocolError,
    frame,
    frame_header,
    rst_stream,
    settings_frame,
    window_update,
)

from tests.protocols.test_http2 import REQUEST, client_headers, frames

Frame = tuple[int, int, int, bytes]
UNKNOWN_TYPE = 0x20


# ----------------------------------------------------------------------------- helpers


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def feed(connection: Connection, wire: bytes, step: int = 1) -> list[Event]:
    """``wire`` as a client's socket would deliver it, ``step`` bytes a read."""
    events: list[Event] = []
    for at in range(0, len(wire), step):
        events += connection.receive(wire[at:at + step])
    return events


def sent(connection: Connection) -> list[Frame]:
    return frames(connection.take_output())


def kinds(events: list[Event]) -> list[tuple[int, int, int]]:
    return [(event.kind, event.stream_id, event.code) for event in events]


def connect(*settings: tuple[int, int], **options: object) -> Connection:
    """A connection past its preface and the client's SETTINGS (``settings``)."""
    connection = Connection(**options)  # type: ignore[arg-type]
    connection.take_output()
    assert feed(connection, PREFACE + settings_frame(list(settings))) == []
    assert sent(connection) == [(SETTINGS, ACK, 0, b"")]
    return connection


def connection_error(connection: Connection, wire: bytes, step: int = 1) -> ProtocolError:
    with pytest.raises(ProtocolError) as error:
        feed(connection, wire, step)
    return error.value


def reset(stream_id: int, code: int) -> Frame:
    return (RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def assert_serves(connection: Connection, stream_id: int) -> None:
    """The connection lives: a valid request on a new stream is heard."""
    events = feed(connection, client_headers(stream_id, REQUEST, end_stream=True))
    assert kinds(events) == [(http2.EV_HEADERS, stream_id, 0)]
    assert events[0].headers == tuple(REQUEST)
    assert sent(connection) == []


def data(stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    return frame(DATA, flags, stream_id, payload)


def priority(stream_id: int, depends_on: int, length: int = 5) -> bytes:
    return frame(PRIORITY, 0, stream_id, (depends_on.to_bytes(4, "big") + b"\x0f")[:length]
                 + bytes(max(0, length - 5)))


def ping(payload: bytes = b"01234567", flags: int = 0) -> bytes:
    return frame(PING, flags, 0, payload)


def indexed_literal(name: str, value: str) -> bytes:
    """A literal field with incremental indexing and a new name (RFC 7541 section 6.2.1)."""
    return (b"\x40" + hpack.encode_int(len(name), 7, 0) + name.encode("latin-1")
            + hpack.encode_int(len(value), 7, 0) + value.encode("latin-1"))


def list_size(fields: list[tuple[str, str]]) -> int:
    """A header list's size as RFC 9113 section 6.5.2 measures it."""
    return sum(len(name) + len(value) + 32 for name, value in fields)


def with_field(field: tuple[str, str]) -> list[tuple[str, str]]:
    return [*REQUEST, field]


# Past the 16,384 octets of header list the server announces, in a block that fits one frame
# (each repeated field is one octet: a static table entry).
OVERSIZED_TRAILERS = [("x-pad", "v" * 16_000)] + [("accept-encoding", "gzip, deflate")] * 20


# ------------------------------------------------------- section 3.4, the connection preface


def test_3_4_the_preface_must_be_followed_by_a_settings_frame() -> None:
    connection = Connection()
    error = connection_error(connection, PREFACE + ping())
    assert error.code == http2.PROTOCOL_ERROR


# ------------------------------------------------------------- section 4, frame format and size


def test_4_1_undefined_flags_and_the_reserved_bit_are_ignored() -> None:
    connection = connect()
    unknown_headers_flags = 0x02 | 0x10 | 0x40 | 0x80
    block = hpack.encode_headers(REQUEST)
    wire = (frame_header(len(block), HEADERS, END_HEADERS | unknown_headers_flags,
                         0x8000_0001) + block
            + data(1, b"ab", 0x02 | 0x04 | 0x20 | END_STREAM)
            + frame(WINDOW_UPDATE, 0, 0, (0x8000_0001).to_bytes(4, "big"))
            + ping(flags=0x02))
    events = feed(connection, wire)
    assert [(e.kind, e.stream_id, e.end_stream) for e in events] == [
        (http2.EV_HEADERS, 1, False), (http2.EV_DATA, 1, True)]
    assert events[1].data == b"ab"
    assert sent(connection) == [(PING, ACK, 0, b"01234567")]


@pytest.mark.parametrize("kind, stream_id", [
    (DATA, 1), (HEADERS, 3), (SETTINGS, 0), (PING, 0), (UNKNOWN_TYPE, 0), (CONTINUATION, 1)])
def test_4_2_a_frame_longer_than_the_max_frame_size_is_a_frame_size_error(
        kind: int, stream_id: int) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    error = connection_error(connection, frame_header(16_385, kind, 0, stream_id) + bytes(16_385),
                             step=4096)
    assert error.code == http2.FRAME_SIZE_ERROR


def test_4_2_a_frame_of_exactly_the_max_frame_size_is_accepted() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, data(1, bytes(16_384)), step=4096)
    assert [(e.kind, len(e.data)) for e in events] == [(http2.EV_DATA, 16_384)]


# --------------------------------------------------------------- section 5.1, stream states


@pytest.mark.parametrize("wire", [
    pytest.param(data(1, b"x"), id="DATA"),
    pytest.param(window_update(1, 1), id="WINDOW_UPDATE"),
    pytest.param(rst_stream(1, http2.CANCEL), id="RST_STREAM"),
    pytest.param(frame(CONTINUATION, END_HEADERS, 1, hpack.encode_headers(REQUEST)),
                 id="CONTINUATION"),
])
def test_5_1_a_frame_other_than_headers_or_priority_on_an_idle_stream(wire: bytes) -> None:
    assert connection_error(connect(), wire).code == http2.PROTOCOL_ERROR


def test_5_1_priority_on_an_idle_stream_is_allowed() -> None:
    connection = connect()
    assert feed(connection, priority(1, 0) + priority(7, 3)) == []
    assert sent(connection) == []
    assert_serves(connection, 1)


def _half_closed_by_headers(connection: Connection) -> None:
    feed(connection, client_headers(1, REQUEST, end_stream=True))


def _half_closed_by_data(connection: Connection) -> None:
    feed(connection, client_headers(1, REQUEST) + data(1, b"x", END_STREAM))


@pytest.mark.parametrize("close", [_half_closed_by_headers, _half_closed_by_data])
@pytest.mark.parametrize("wire", [
    pytest.param(data(1, b"late"), id="DATA"),
    pytest.param(client_headers(1, [("x-trailer", "1")], end_stream=True), id="HEADERS"),
])
def test_5_1_a_frame_on_a_half_closed_remote_stream_is_a_stream_closed_stream_error(
        close: Callable[[Connection], None], wire: bytes) -> None:
    connection = connect()
    close(connection)
    sent(connection)
    events = feed(connection, wire)
    assert sent(connection) == [reset(1, http2.STREAM_CLOSED)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.STREAM_CLOSED)]
    assert_serves(connection, 3)


def test_5_1_window_update_priority_and_rst_stream_are_allowed_on_a_half_closed_remote_stream(
        ) -> None:
    connection = connect()
    _half_closed_by_headers(connection)
    assert feed(connection, window_update(1, 10) + priority(1, 0)) == []
    assert sent(connection) == [] and connection.is_open(1)
    events = feed(connection, rst_stream(1, http2.CANCEL))
    assert kinds(events) == [(http2.EV_RESET, 1, http2.CANCEL)]
    assert sent(connection) == [] and not connection.is_open(1)


def _closed_by_both_end_streams() -> Connection:
    connection = connect()
    feed(connection, client_headers(1, REQUEST, end_stream=True))
    connection.respond(1, b"", b"", b"")
    sent(connection)
    assert not connection.is_open(1)
    return connection


def _closed_by_the_clients_reset() -> Connection:
    connection = connect()
    feed(connection, client_headers(1, REQUEST) + rst_stream(1, http2.CANCEL))
    assert sent(connection) == []
    return connection


@pytest.mark.parametrize("wire", [
    pytest.param(data(1, b"late"), id="DATA"),
    pytest.param(client_headers(1, [("x-trailer", "1")], end_stream=True), id="HEADERS"),
    pytest.param(client_headers(1, OVERSIZED_TRAILERS, end_stream=True),
                 id="HEADERS-past-the-list-limit"),
])
def test_5_1_a_frame_after_both_end_streams_is_a_stream_closed_connection_error(
        wire: bytes) -> None:
    error = connection_error(_closed_by_both_end_streams(), wire, step=512)
    assert error.code == http2.STREAM_CLOSED


@pytest.mark.parametrize("wire", [
    pytest.param(window_update(1, 1), id="WINDOW_UPDATE"),
    pytest.param(rst_stream(1, http2.CANCEL), id="RST_STREAM"),
    pytest.param(priority(1, 0), id="PRIORITY"),
])
def test_5_1_window_update_rst_stream_and_priority_are_tolerated_after_both_end_streams(
        wire: bytes) -> None:
    connection = _closed_by_both_end_streams()
    assert feed(connection, wire) == []
    assert sent(connection) == []
    assert_serves(connection, 3)


@pytest.mark.parametrize("wire", [
    pytest.param(data(1, b"late"), id="DATA"),
    pytest.param(client_headers(1, [("x-trailer", "1")], end_stream=True), id="HEADERS"),
    pytest.param(window_update(1, 1), id="WINDOW_UPDATE"),
])
def test_5_1_a_frame_other_than_priority_after_the_clients_reset_is_a_stream_closed_stream_error(
        wire: bytes) -> None:
    connection = _closed_by_the_clients_reset()
    assert feed(connection, wire) == []
    assert sent(connection) == [reset(1, http2.STREAM_CLOSED)]
    assert_serves(connection, 3)


@pytest.mark.parametrize("wire", [
    pytest.param(priority(1, 0), id="PRIORITY"),
    # Section 5.4.2: a RST_STREAM is never answered with a RST_STREAM.
    pytest.param(rst_stream(1, http2.CANCEL), id="RST_STREAM"),
])
def test_5_1_priority_and_rst_stream_after_the_clients_reset_are_not_answered(
        wire: bytes) -> None:
    connection = _closed_by_the_clients_reset()
    assert feed(connection, wire) == []
    assert sent(connection) == []
    assert_serves(connection, 3)


def _reset_by_the_server(connection: Connection) -> None:
    connection.reset(1, http2.CANCEL)


def _ended_by_the_server(connection: Connection) -> None:
    connection.respond(1, b"", b"", b"")  # the client has not ended the stream


@pytest.mark.parametrize("close", [_reset_by_the_server, _ended_by_the_server])
def test_5_1_frames_in_flight_after_the_servers_rst_stream_are_ignored(
        close: Callable[[Connection], None]) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    close(connection)
    assert [kind for kind, *_ in sent(connection)][-1] == RST_STREAM
    wire = (data(1, b"in flight") + window_update(1, 5) + priority(1, 0)
            + client_headers(1, [("x-trailer", "1")], end_stream=True)
            + rst_stream(1, http2.CANCEL))
    assert feed(connection, wire) == []
    assert sent(connection) == []
    assert_serves(connection, 3)


def test_5_1_an_ignored_header_block_still_updates_the_hpack_table() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    connection.reset(1, http2.CANCEL)
    sent(connection)
    block = indexed_literal("x-kept", "in the table")
    feed(connection, frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
    reference = hpack.encode_headers(REQUEST) + bytes([0x80 | 62])
    events = feed(connection, frame(HEADERS, END_HEADERS | END_STREAM, 3, reference))
    assert kinds(events) == [(http2.EV_HEADERS, 3, 0)]
    assert events[0].headers == (*REQUEST, ("x-kept", "in the table"))


def test_5_1_an_ignored_header_block_past_the_header_list_limit_is_still_ignored() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    connection.reset(1, http2.CANCEL)
    sent(connection)
    trailers = [("x-pad", "v" * 16_400)]
    assert list_size(trailers) > 16_384
    block = hpack.encode_headers(trailers)
    wire = (frame(HEADERS, END_STREAM, 1, block[:10_000])
            + frame(CONTINUATION, END_HEADERS, 1, block[10_000:]))
    assert feed(connection, wire, step=512) == []
    assert sent(connection) == []
    assert_serves(connection, 3)


@pytest.mark.parametrize("stream_id", [2, 4])
def test_5_1_1_a_client_stream_id_must_be_odd(stream_id: int) -> None:
    connection = connect()
    error = connection_error(connection, client_headers(stream_id, REQUEST))
    assert error.code == http2.PROTOCOL_ERROR


PAST_THE_LIST_LIMIT = REQUEST + OVERSIZED_TRAILERS


@pytest.mark.parametrize("fields", [REQUEST, PAST_THE_LIST_LIMIT], ids=["request", "too-large"])
def test_5_1_1_a_client_stream_id_lower_than_one_already_opened_is_a_protocol_error(
        fields: list[tuple[str, str]]) -> None:
    connection = connect()
    feed(connection, client_headers(5, REQUEST, end_stream=True))
    error = connection_error(connection, client_headers(3, fields, end_stream=True), step=512)
    assert error.code == http2.PROTOCOL_ERROR


def _announced_settings(connection: Connection) -> dict[int, int]:
    first = frames(connection.take_output())[0]
    assert first[:3] == (SETTINGS, 0, 0)
    payload = first[3]
    return {int.from_bytes(payload[at:at + 2], "big"): int.from_bytes(payload[at + 2:at + 6],
                                                                       "big")
            for at in range(0, len(payload), 6)}


def test_5_1_2_and_6_5_2_the_server_announces_its_limits() -> None:
    announced = _announced_settings(Connection())
    assert announced[http2.MAX_CONCURRENT_STREAMS] == 128
    assert announced[http2.MAX_HEADER_LIST_SIZE] == 16_384
    assert announced.get(http2.ENABLE_PUSH, 0) == 0  # a server may only announce 0


def test_5_1_2_a_stream_past_max_concurrent_streams_is_refused() -> None:
    connection = connect()
    for stream_id in range(1, 257, 2):
        assert kinds(feed(connection, client_headers(stream_id, REQUEST))) == [
            (http2.EV_HEADERS, stream_id, 0)]
    assert connection.open_streams == 128
    assert feed(connection, client_headers(257, REQUEST)) == []
    assert sent(connection) == [reset(257, http2.REFUSED_STREAM)]
    feed(connection, rst_stream(1, http2.CANCEL))
    assert_serves(connection, 259)


# ---------------------------------------------------------- section 5.3.1, self-dependency


def test_5_3_1_a_priority_frame_making_a_stream_depend_on_itself() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, priority(1, 1))
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.PROTOCOL_ERROR)]
    assert_serves(connection, 3)


def test_5_3_1_a_headers_frame_making_its_stream_depend_on_itself() -> None:
    connection = connect()
    payload = (1).to_bytes(4, "big") + b"\x0f" + hpack.encode_headers(REQUEST)
    events = feed(connection, frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 1, payload))
    assert events == []
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert_serves(connection, 3)


# ------------------------------------------------------------ section 5.5, extending HTTP/2


@pytest.mark.parametrize("stream_id", [0, 1, 9])
def test_5_5_a_frame_of_an_unknown_type_is_ignored(stream_id: int) -> None:
    connection = connect()
    assert feed(connection, frame(UNKNOWN_TYPE, 0xFF, stream_id, b"whatever")) == []
    assert sent(connection) == []
    assert_serves(connection, 1)


def test_5_5_a_frame_of_an_unknown_type_inside_a_header_block_is_a_protocol_error() -> None:
    connection = connect()
    block = hpack.encode_headers(REQUEST)
    wire = (frame(HEADERS, 0, 1, block[:3]) + frame(UNKNOWN_TYPE, 0, 1, b"x")
            + frame(CONTINUATION, END_HEADERS, 1, block[3:]))
    assert connection_error(connection, wire).code == http2.PROTOCOL_ERROR


# ---------------------------------------------------------------------- section 6.1, DATA


def test_6_1_data_on_stream_0() -> None:
    assert connection_error(connect(), data(0, b"x")).code == http2.PROTOCOL_ERROR


@pytest.mark.parametrize("payload", [
    pytest.param(b"", id="no-pad-length"),
    pytest.param(b"\x04abc", id="padding-as-long-as-the-payload"),
    pytest.param(b"\x09abc", id="padding-longer-than-the-payload"),
])
def test_6_1_data_whose_padding_is_not_shorter_than_its_payload(payload: bytes) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    error = connection_error(connection, data(1, payload, PADDED))
    assert error.code == http2.PROTOCOL_ERROR


def test_6_1_data_padded_to_its_last_octet_is_accepted() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, data(1, b"\x03\x00\x00\x00", PADDED | END_STREAM))
    assert [(e.kind, e.data, e.end_stream) for e in events] == [(http2.EV_DATA, b"", True)]


# ------------------------------------------------------------------- section 6.2, HEADERS


def test_6_2_headers_on_stream_0() -> None:
    wire = frame(HEADERS, END_HEADERS, 0, hpack.encode_headers(REQUEST))
    assert connection_error(connect(), wire).code == http2.PROTOCOL_ERROR


@pytest.mark.parametrize("flags, payload", [
    pytest.param(PADDED, b"", id="no-pad-length"),
    pytest.param(PADDED, b"\x05\x82\x86\x84\x00", id="padding-longer-than-the-payload"),
    pytest.param(PADDED | PRIORITY_FLAG, b"\x06" + bytes(5), id="padding-with-a-priority"),
])
def test_6_2_headers_whose_padding_is_not_shorter_than_its_payload(
        flags: int, payload: bytes) -> None:
    wire = frame(HEADERS, END_HEADERS | flags, 1, payload)
    assert connection_error(connect(), wire).code == http2.PROTOCOL_ERROR


def test_6_2_padded_headers_with_a_priority_are_accepted() -> None:
    connection = connect()
    block = hpack.encode_headers(REQUEST)
    payload = b"\x02" + (0).to_bytes(4, "big") + b"\x10" + block + b"\x00\x00"
    events = feed(connection, frame(HEADERS, END_HEADERS | PADDED | PRIORITY_FLAG, 1, payload))
    assert kinds(events) == [(http2.EV_HEADERS, 1, 0)]
    assert events[0].headers == tuple(REQUEST)


def test_6_2_headers_too_short_for_their_priority_fields() -> None:
    wire = frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 1, b"\x00\x00\x00")
    assert connection_error(connect(), wire).code == http2.FRAME_SIZE_ERROR


@pytest.mark.parametrize("interruption", [
    pytest.param(data(1, b"x"), id="DATA-same-stream"),
    pytest.param(client_headers(3, REQUEST), id="HEADERS-other-stream"),
    pytest.param(ping(), id="PING"),
    pytest.param(settings_frame([]), id="SETTINGS"),
    pytest.param(priority(1, 0), id="PRIORITY"),
    pytest.param(window_update(0, 1), id="WINDOW_UPDATE"),
])
def test_6_2_a_header_block_interrupted_by_another_frame(interruption: bytes) -> None:
    connection = connect()
    block = hpack.encode_headers(REQUEST)
    wire = frame(HEADERS, 0, 1, block[:3]) + interruption
    assert connection_error(connection, wire).code == http2.PROTOCOL_ERROR


# ------------------------------------------------------------------ section 6.3, PRIORITY


def test_6_3_priority_on_stream_0() -> None:
    assert connection_error(connect(), priority(0, 1)).code == http2.PROTOCOL_ERROR


@pytest.mark.parametrize("length", [4, 6])
def test_6_3_priority_of_a_length_other_than_5_is_a_frame_size_stream_error(length: int) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, priority(1, 0, length))
    assert sent(connection) == [reset(1, http2.FRAME_SIZE_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.FRAME_SIZE_ERROR)]
    assert_serves(connection, 3)


# ---------------------------------------------------------------- section 6.4, RST_STREAM


def test_6_4_rst_stream_on_stream_0() -> None:
    assert connection_error(connect(), rst_stream(0, 0)).code == http2.PROTOCOL_ERROR


def test_6_4_rst_stream_on_an_idle_stream() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    assert connection_error(connection, rst_stream(3, 0)).code == http2.PROTOCOL_ERROR


@pytest.mark.parametrize("length", [3, 5])
def test_6_4_rst_stream_of_a_length_other_than_4(length: int) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    error = connection_error(connection, frame(RST_STREAM, 0, 1, bytes(length)))
    assert error.code == http2.FRAME_SIZE_ERROR


def test_6_4_rst_stream_closes_the_stream_and_is_not_answered() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, rst_stream(1, 0x1234))
    assert kinds(events) == [(http2.EV_RESET, 1, 0x1234)]  # an unknown code is no error
    assert sent(connection) == [] and not connection.is_open(1)


# ------------------------------------------------------------------ section 6.5, SETTINGS


def test_6_5_settings_on_a_stream() -> None:
    wire = frame(SETTINGS, 0, 1, b"")
    assert connection_error(connect(), wire).code == http2.PROTOCOL_ERROR


def test_6_5_a_settings_acknowledgement_with_a_payload() -> None:
    wire = frame(SETTINGS, ACK, 0, bytes(6))
    assert connection_error(connect(), wire).code == http2.FRAME_SIZE_ERROR


@pytest.mark.parametrize("length", [1, 5, 7, 13])
def test_6_5_settings_of_a_length_not_a_multiple_of_6(length: int) -> None:
    wire = frame(SETTINGS, 0, 0, bytes(length))
    assert connection_error(connect(), wire).code == http2.FRAME_SIZE_ERROR


@pytest.mark.parametrize("setting, value, code", [
    (http2.ENABLE_PUSH, 2, http2.PROTOCOL_ERROR),
    (http2.ENABLE_PUSH, 2**32 - 1, http2.PROTOCOL_ERROR),
    (http2.INITIAL_WINDOW_SIZE, 2**31, http2.FLOW_CONTROL_ERROR),
    (http2.INITIAL_WINDOW_SIZE, 2**32 - 1, http2.FLOW_CONTROL_ERROR),
    (http2.MAX_FRAME_SIZE, 16_383, http2.PROTOCOL_ERROR),
    (http2.MAX_FRAME_SIZE, 0, http2.PROTOCOL_ERROR),
    (http2.MAX_FRAME_SIZE, 2**24, http2.PROTOCOL_ERROR),
])
def test_6_5_2_a_setting_out_of_its_range(setting: int, value: int, code: int) -> None:
    wire = settings_frame([(setting, value)])
    assert connection_error(connect(), wire).code == code


@pytest.mark.parametrize("setting, value", [
    (http2.ENABLE_PUSH, 0), (http2.ENABLE_PUSH, 1), (http2.INITIAL_WINDOW_SIZE, 2**31 - 1),
    (http2.MAX_FRAME_SIZE, 16_384), (http2.MAX_FRAME_SIZE, 2**24 - 1),
    (http2.HEADER_TABLE_SIZE, 0), (http2.MAX_CONCURRENT_STREAMS, 0),
    (http2.MAX_HEADER_LIST_SIZE, 1),
    (0x0, 7), (0x7, 1), (0xFF, 2**32 - 1), (0xFFFF, 0),  # unknown settings are ignored
])
def test_6_5_2_a_setting_within_its_range_is_acknowledged(setting: int, value: int) -> None:
    connection = connect()
    assert feed(connection, settings_frame([(setting, value)])) == []
    assert sent(connection) == [(SETTINGS, ACK, 0, b"")]
    assert_serves(connection, 1)


def test_6_5_3_every_settings_frame_is_acknowledged_once_and_an_ack_is_not() -> None:
    connection = connect()
    wire = (settings_frame([]) + settings_frame([(http2.MAX_FRAME_SIZE, 20_000)])
            + frame(SETTINGS, ACK, 0) + settings_frame([(0xAB, 1), (http2.ENABLE_PUSH, 0)]))
    assert feed(connection, wire) == []
    assert sent(connection) == [(SETTINGS, ACK, 0, b"")] * 3


def test_6_9_2_an_initial_window_change_that_overflows_an_open_streams_window() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    feed(connection, window_update(1, 2**31 - 1 - 65_535))  # the stream's window is at most
    error = connection_error(connection, settings_frame([(http2.INITIAL_WINDOW_SIZE, 65_536)]))
    assert error.code == http2.FLOW_CONTROL_ERROR


# -------------------------------------------------------------- section 6.6, PUSH_PROMISE


def test_6_6_and_8_4_a_client_may_not_push() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    payload = (2).to_bytes(4, "big") + hpack.encode_headers(REQUEST)
    wire = frame(PUSH_PROMISE, END_HEADERS, 1, payload)
    assert connection_error(connection, wire).code == http2.PROTOCOL_ERROR


# ---------------------------------------------------------------------- section 6.7, PING


def test_6_7_a_ping_is_answered_with_its_payload() -> None:
    connection = connect()
    assert feed(connection, ping(b"\x00\xffabcdef")) == []
    assert sent(connection) == [(PING, ACK, 0, b"\x00\xffabcdef")]


def test_6_7_ping_on_a_stream() -> None:
    wire = frame(PING, 0, 1, bytes(8))
    assert connection_error(connect(), wire).code == http2.PROTOCOL_ERROR


@pytest.mark.parametrize("length", [0, 7, 9])
@pytest.mark.parametrize("flags", [0, ACK])
def test_6_7_ping_of_a_length_other_than_8(length: int, flags: int) -> None:
    wire = frame(PING, flags, 0, bytes(length))
    assert connection_error(connect(), wire).code == http2.FRAME_SIZE_ERROR


def test_6_7_a_ping_acknowledgement_is_not_answered() -> None:
    connection = connect()
    events = feed(connection, ping(b"pong...!", ACK))
    assert sent(connection) == []
    assert [(e.kind, e.data) for e in events] == [(http2.EV_PING_ACK, b"pong...!")]


# -------------------------------------------------------------------- section 6.8, GOAWAY


def test_6_8_goaway_on_a_stream() -> None:
    wire = frame(GOAWAY, 0, 1, bytes(8))
    assert connection_error(connect(), wire).code == http2.PROTOCOL_ERROR


def test_6_8_a_clients_goaway_is_heard_with_its_code() -> None:
    connection = connect()
    events = feed(connection, frame(GOAWAY, 0, 0, bytes(4) + (0xB).to_bytes(4, "big") + b"bye"))
    assert kinds(events) == [(http2.EV_GOAWAY, 0, 0xB)]
    assert sent(connection) == []


# ------------------------------------------------------------- section 6.9, WINDOW_UPDATE


def test_6_9_a_window_update_of_0_on_the_connection() -> None:
    assert connection_error(connect(), window_update(0, 0)).code == http2.PROTOCOL_ERROR


def test_6_9_a_window_update_of_0_on_a_stream_is_a_stream_error() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, window_update(1, 0))
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.PROTOCOL_ERROR)]
    assert_serves(connection, 3)


@pytest.mark.parametrize("stream_id", [0, 1])
@pytest.mark.parametrize("length", [3, 5])
def test_6_9_window_update_of_a_length_other_than_4(stream_id: int, length: int) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    wire = frame(WINDOW_UPDATE, 0, stream_id, b"\x00" * (length - 1) + b"\x01")
    assert connection_error(connection, wire).code == http2.FRAME_SIZE_ERROR


def test_6_9_1_a_window_update_overflowing_the_connections_window() -> None:
    connection = connect()
    feed(connection, window_update(0, 2**31 - 1 - 65_535))  # to the largest window
    assert sent(connection) == []
    assert connection_error(connection, window_update(0, 1)).code == http2.FLOW_CONTROL_ERROR


def test_6_9_1_a_window_update_overflowing_a_streams_window_is_a_stream_error() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    feed(connection, window_update(1, 2**31 - 1 - 65_535))
    assert sent(connection) == []
    events = feed(connection, window_update(1, 1))
    assert sent(connection) == [reset(1, http2.FLOW_CONTROL_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.FLOW_CONTROL_ERROR)]
    assert_serves(connection, 3)


def test_6_9_2_a_zero_initial_window_holds_a_reply_until_a_window_update() -> None:
    connection = connect((http2.INITIAL_WINDOW_SIZE, 0))
    feed(connection, client_headers(1, REQUEST, end_stream=True))
    connection.respond(1, b"H", b"0123456789", b"T")
    assert sent(connection) == [(HEADERS, END_HEADERS, 1, b"H")]
    assert connection.pending(1) == 10
    assert feed(connection, window_update(1, 4)) == []
    assert sent(connection) == [(DATA, 0, 1, b"0123")]
    assert feed(connection, window_update(1, 6)) == []
    assert sent(connection) == [(DATA, 0, 1, b"456789"),
                                (HEADERS, END_HEADERS | END_STREAM, 1, b"T")]
    assert not connection.is_open(1)


def test_6_9_2_raising_the_initial_window_releases_a_held_reply() -> None:
    connection = connect((http2.INITIAL_WINDOW_SIZE, 0))
    feed(connection, client_headers(1, REQUEST, end_stream=True))
    connection.respond(1, b"H", b"0123456789", b"T")
    sent(connection)
    assert feed(connection, settings_frame([(http2.INITIAL_WINDOW_SIZE, 10)])) == []
    assert sent(connection) == [(SETTINGS, ACK, 0, b""), (DATA, 0, 1, b"0123456789"),
                                (HEADERS, END_HEADERS | END_STREAM, 1, b"T")]


def test_6_9_2_lowering_the_initial_window_can_make_a_streams_window_negative() -> None:
    connection = connect((http2.INITIAL_WINDOW_SIZE, 10))
    feed(connection, client_headers(1, REQUEST))
    connection.send_headers(1, b"H")
    connection.send_data(1, b"0123456789")
    assert [kind for kind, *_ in sent(connection)] == [HEADERS, DATA]
    feed(connection, settings_frame([(http2.INITIAL_WINDOW_SIZE, 5)]))  # the window: -5
    assert sent(connection) == [(SETTINGS, ACK, 0, b"")]
    connection.send_data(1, b"abc")
    assert sent(connection) == []
    assert feed(connection, window_update(1, 5)) == []  # the window: 0
    assert sent(connection) == []
    events = feed(connection, window_update(1, 3))
    assert sent(connection) == [(DATA, 0, 1, b"abc")]
    assert kinds(events) == [(http2.EV_DRAINED, 1, 0)]


def test_6_9_1_a_reply_waits_for_the_connections_window() -> None:
    connection = connect((http2.INITIAL_WINDOW_SIZE, 2**20))
    feed(connection, client_headers(1, REQUEST, end_stream=True))
    connection.respond(1, b"H", bytes(70_000), b"T")
    out = sent(connection)
    assert sum(len(p) for kind, _, _, p in out if kind == DATA) == 65_535
    assert out[-1][0] == DATA
    assert feed(connection, window_update(0, 4_465)) == []
    assert [(kind, flags, len(p)) for kind, flags, _, p in sent(connection)] == [
        (DATA, 0, 4_465), (HEADERS, END_HEADERS | END_STREAM, 1)]


# -------------------------------------------------------------- section 6.10, CONTINUATION


def test_6_10_continuation_after_a_complete_header_block() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST))
    wire = frame(CONTINUATION, END_HEADERS, 1, hpack.encode_headers([("x-more", "1")]))
    assert connection_error(connection, wire).code == http2.PROTOCOL_ERROR


@pytest.mark.parametrize("stream_id", [0, 3])
def test_6_10_continuation_on_another_stream(stream_id: int) -> None:
    connection = connect()
    block = hpack.encode_headers(REQUEST)
    wire = (frame(HEADERS, 0, 1, block[:3])
            + frame(CONTINUATION, END_HEADERS, stream_id, block[3:]))
    assert connection_error(connection, wire).code == http2.PROTOCOL_ERROR


# ------------------------------------------ sections 8.1 to 8.3, malformed requests


REQUEST_WITHOUT = {name: [field for field in REQUEST if field[0] != name]
                   for name in (":method", ":scheme", ":path")}
MALFORMED_REQUESTS = {
    "uppercase-name": with_field(("X-Upper", "1")),
    "uppercase-pseudo-header": [(":METHOD", "POST"), *REQUEST[1:]],
    "space-in-name": with_field(("x y", "1")),
    "colon-in-name": with_field(("x:y", "1")),
    "control-in-name": with_field(("x\x01", "1")),
    "del-in-name": with_field(("x\x7f", "1")),
    "non-ascii-name": with_field(("\xe9t\xe9", "1")),
    "empty-name": with_field(("", "1")),
    "unknown-pseudo-header": [*REQUEST[:3], (":foo", "bar"), *REQUEST[3:]],
    "response-pseudo-header": [(":status", "200"), *REQUEST],
    "pseudo-header-after-a-field": [*REQUEST[:2], REQUEST[3], REQUEST[2]],
    "duplicated-method": [REQUEST[0], *REQUEST],
    "duplicated-path": [*REQUEST[:3], (":path", "/s/N"), REQUEST[3]],
    "duplicated-authority": [(":authority", "a"), (":authority", "b"), *REQUEST],
    "no-method": REQUEST_WITHOUT[":method"],
    "no-scheme": REQUEST_WITHOUT[":scheme"],
    "no-path": REQUEST_WITHOUT[":path"],
    "empty-method": [(":method", ""), *REQUEST[1:]],
    "empty-scheme": [REQUEST[0], (":scheme", ""), *REQUEST[2:]],
    "empty-path": [*REQUEST[:2], (":path", ""), REQUEST[3]],
    "connection": with_field(("connection", "close")),
    "keep-alive": with_field(("keep-alive", "timeout=5")),
    "proxy-connection": with_field(("proxy-connection", "keep-alive")),
    "transfer-encoding": with_field(("transfer-encoding", "chunked")),
    "upgrade": with_field(("upgrade", "h2c")),
    "te-gzip": with_field(("te", "gzip")),
    "te-trailers-and-more": with_field(("te", "trailers, deflate")),
    "nul-in-value": with_field(("x-value", "a\x00b")),
    "cr-in-value": with_field(("x-value", "a\rb")),
    "lf-in-value": with_field(("x-value", "a\nb")),
    "lf-in-pseudo-header": [*REQUEST[:2], (":path", "/s\n/M"), REQUEST[3]],
    "value-starting-with-space": with_field(("x-value", " a")),
    "value-ending-with-tab": with_field(("x-value", "a\t")),
}


@pytest.mark.parametrize("fields", MALFORMED_REQUESTS.values(), ids=MALFORMED_REQUESTS.keys())
@pytest.mark.parametrize("end_stream", [False, True])
def test_8_a_malformed_request_is_a_protocol_error_stream_error_and_never_heard(
        fields: list[tuple[str, str]], end_stream: bool) -> None:
    connection = connect()
    events = feed(connection, client_headers(1, fields, end_stream))
    assert events == []
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert not connection.is_open(1)
    assert_serves(connection, 3)


WELL_FORMED_REQUESTS = {
    "te-trailers": with_field(("te", "trailers")),
    "authority": [(":authority", "example.com:8001"), *REQUEST],
    "empty-value": with_field(("x-empty", "")),
    "inner-space-in-value": with_field(("x-value", "a b\tc")),
    "content-length": with_field(("content-length", "0")),
}


@pytest.mark.parametrize("fields", WELL_FORMED_REQUESTS.values(),
                         ids=WELL_FORMED_REQUESTS.keys())
def test_8_a_well_formed_request_is_heard(fields: list[tuple[str, str]]) -> None:
    connection = connect()
    events = feed(connection, client_headers(1, fields, end_stream=True))
    assert kinds(events) == [(http2.EV_HEADERS, 1, 0)]
    assert events[0].headers == tuple(fields)
    assert sent(connection) == []


@pytest.mark.parametrize("frames_after", [
    pytest.param([data(1, b"123456")], id="more-than-declared"),
    pytest.param([data(1, b"12"), data(1, b"3456", END_STREAM)], id="more-over-two-frames"),
    pytest.param([data(1, b"123", END_STREAM)], id="less-at-end-stream"),
    pytest.param([data(1, b"123"), client_headers(1, [("x-t", "1")], end_stream=True)],
                 id="less-at-trailers"),
])
def test_8_1_1_content_length_disagreeing_with_the_data(frames_after: list[bytes]) -> None:
    connection = connect()
    feed(connection, client_headers(1, with_field(("content-length", "5"))))
    events = feed(connection, b"".join(frames_after))
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert kinds(events)[-1] == (http2.EV_RESET, 1, http2.PROTOCOL_ERROR)
    assert_serves(connection, 3)


def test_8_1_1_content_length_with_end_stream_on_the_headers() -> None:
    connection = connect()
    assert feed(connection, client_headers(1, with_field(("content-length", "5")), True)) == []
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert_serves(connection, 3)


def test_8_1_1_content_length_matching_the_data_is_accepted() -> None:
    connection = connect()
    wire = (client_headers(1, with_field(("content-length", "5")))
            + data(1, b"12") + data(1, b"345") + client_headers(1, [("x-t", "1")], True))
    events = feed(connection, wire)
    assert [(e.kind, e.data, e.end_stream) for e in events] == [
        (http2.EV_HEADERS, b"", False), (http2.EV_DATA, b"12", False),
        (http2.EV_DATA, b"345", False), (http2.EV_DATA, b"", True)]
    assert sent(connection) == []


@pytest.mark.parametrize("trailers", [
    pytest.param([(":path", "/")], id="request-pseudo-header"),
    pytest.param([("x-t", "1"), (":status", "200")], id="response-pseudo-header"),
    pytest.param([("X-Upper", "1")], id="uppercase-name"),
    pytest.param([("x-t", "a\nb")], id="lf-in-value"),
    pytest.param([("connection", "close")], id="connection-specific"),
])
def test_8_1_malformed_trailers(trailers: list[tuple[str, str]]) -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST) + data(1, b"ab"))
    events = feed(connection, client_headers(1, trailers, end_stream=True))
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.PROTOCOL_ERROR)]
    assert_serves(connection, 3)


def test_8_1_a_second_header_block_without_end_stream() -> None:
    connection = connect()
    feed(connection, client_headers(1, REQUEST) + data(1, b"ab"))
    events = feed(connection, client_headers(1, [("x-t", "1")], end_stream=False))
    assert sent(connection) == [reset(1, http2.PROTOCOL_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.PROTOCOL_ERROR)]
    assert_serves(connection, 3)


# ------------------------------------------------------------------------- RFC 7541, HPACK


def _hpack_error(block: bytes) -> ProtocolError:
    return connection_error(connect(), frame(HEADERS, END_HEADERS | END_STREAM, 1, block))


def test_rfc7541_4_2_a_table_size_update_after_a_field_is_a_compression_error() -> None:
    block = hpack.encode_headers(REQUEST) + hpack.encode_int(0, 5, 0x20)
    assert _hpack_error(block).code == http2.COMPRESSION_ERROR


def test_rfc7541_4_2_a_table_size_update_at_the_start_of_a_block_is_accepted() -> None:
    connection = connect()
    block = (hpack.encode_int(0, 5, 0x20) + hpack.encode_int(4096, 5, 0x20)
             + hpack.encode_headers(REQUEST))
    events = feed(connection, frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
    assert kinds(events) == [(http2.EV_HEADERS, 1, 0)]


def test_rfc7541_6_3_a_table_size_update_above_the_settings_limit() -> None:
    block = hpack.encode_int(4097, 5, 0x20) + hpack.encode_headers(REQUEST)
    assert _hpack_error(block).code == http2.COMPRESSION_ERROR


@pytest.mark.parametrize("field", [
    pytest.param(hpack.encode_int(0, 7, 0x80), id="indexed-0"),
    pytest.param(hpack.encode_int(62, 7, 0x80), id="indexed-62-empty-table"),
    pytest.param(hpack.encode_int(1000, 7, 0x80), id="indexed-1000"),
    pytest.param(hpack.encode_int(62, 4, 0x00) + b"\x01a", id="literal-name-62"),
    pytest.param(hpack.encode_int(62, 6, 0x40) + b"\x01a", id="indexed-literal-name-62"),
])
def test_rfc7541_6_1_an_index_outside_both_tables_is_a_compression_error(field: bytes) -> None:
    assert _hpack_error(hpack.encode_headers(REQUEST) + field).code == http2.COMPRESSION_ERROR


def test_rfc7541_5_2_a_huffman_string_holding_eos_is_a_compression_error() -> None:
    field = b"\x00\x01x" + bytes([0x80 | 4]) + b"\xff\xff\xff\xff"  # EOS, then 2 bits of 1s
    assert _hpack_error(hpack.encode_headers(REQUEST) + field).code == http2.COMPRESSION_ERROR


def test_rfc9113_6_5_2_a_header_list_at_the_limit_is_heard_and_one_past_it_is_too_large(
        ) -> None:
    connection = connect()
    base = list_size(REQUEST) + len("x-pad") + 32
    at_limit = with_field(("x-pad", "v" * (16_384 - base)))
    assert list_size(at_limit) == 16_384
    events = feed(connection, client_headers(1, at_limit, end_stream=True), step=512)
    assert kinds(events) == [(http2.EV_HEADERS, 1, 0)]
    past_limit = with_field(("x-pad", "v" * (16_385 - base)))
    events = feed(connection, client_headers(3, past_limit, end_stream=True), step=512)
    assert kinds(events) == [(http2.EV_HEADERS_TOO_LARGE, 3, 16_385)]
    assert sent(connection) == []
    assert_serves(connection, 5)


def _bomb(references: int) -> tuple[bytes, int]:
    """A request adding one 4 KB entry to the table, then referring to it ``references``
    times: the block and the size of its header list."""
    name, value = "x-bomb", "v" * 4000
    block = (hpack.encode_headers(REQUEST) + indexed_literal(name, value)
             + hpack.encode_int(62, 7, 0x80) * references)
    return block, list_size(REQUEST) + (1 + references) * list_size([(name, value)])


def test_rfc9113_6_5_2_a_list_past_the_limit_but_within_4x_is_too_large_and_the_connection_lives(
        ) -> None:
    connection = connect()
    block, size = _bomb(14)
    assert 16_384 < size <= 4 * 16_384
    events = feed(connection, frame(HEADERS, END_HEADERS | END_STREAM, 1, block), step=256)
    assert kinds(events) == [(http2.EV_HEADERS_TOO_LARGE, 1, size)]
    assert_serves(connection, 3)


def test_rfc9113_6_5_2_an_hpack_bomb_past_4x_the_limit_enhances_calm() -> None:
    block, size = _bomb(16)
    assert size > 4 * 16_384
    error = connection_error(connect(), frame(HEADERS, END_HEADERS | END_STREAM, 1, block),
                             step=256)
    assert error.code == http2.ENHANCE_YOUR_CALM


# -------------------------------------------------------------- budgets (http2.guard)


def _request_and_reset(stream_id: int) -> bytes:
    return client_headers(stream_id, REQUEST) + rst_stream(stream_id, http2.CANCEL)


def test_rapid_reset_past_the_reset_budget_enhances_calm() -> None:
    connection = connect(reset_budget=10, clock=Clock())
    for stream_id in range(1, 21, 2):
        assert [e.kind for e in feed(connection, _request_and_reset(stream_id))] == [
            http2.EV_HEADERS, http2.EV_RESET]
    error = connection_error(connection, _request_and_reset(21))
    assert error.code == http2.ENHANCE_YOUR_CALM


def test_rapid_reset_the_budget_drains_a_tenth_of_its_burst_a_second() -> None:
    clock = Clock()
    connection = connect(reset_budget=10, clock=clock)
    for stream_id in range(1, 21, 2):
        feed(connection, _request_and_reset(stream_id))
    clock.now += 1.0  # room for one more
    assert len(feed(connection, _request_and_reset(21))) == 2
    error = connection_error(connection, _request_and_reset(23))
    assert error.code == http2.ENHANCE_YOUR_CALM


def test_rapid_reset_a_drained_budget_allows_a_whole_burst_again() -> None:
    clock = Clock()
    connection = connect(reset_budget=10, clock=clock)
    for stream_id in range(1, 21, 2):
        feed(connection, _request_and_reset(stream_id))
    clock.now += 10.0
    for stream_id in range(21, 41, 2):
        assert len(feed(connection, _request_and_reset(stream_id))) == 2
    assert connection_error(connection, _request_and_reset(41)).code == http2.ENHANCE_YOUR_CALM


def test_refused_streams_are_charged_to_the_reset_budget() -> None:
    connection = connect(reset_budget=10, max_concurrent_streams=1, clock=Clock())
    feed(connection, client_headers(1, REQUEST))
    for stream_id in range(3, 23, 2):
        assert feed(connection, client_headers(stream_id, REQUEST)) == []
        assert sent(connection) == [reset(stream_id, http2.REFUSED_STREAM)]
    error = connection_error(connection, client_headers(23, REQUEST))
    assert error.code == http2.ENHANCE_YOUR_CALM


CONTROL_FRAMES = {
    "SETTINGS": settings_frame([]),
    "WINDOW_UPDATE-connection": window_update(0, 1),
    "WINDOW_UPDATE-stream": window_update(1, 1),
    "empty-DATA": data(1, b""),
    "PRIORITY": priority(1, 0),
    "unknown-type": frame(UNKNOWN_TYPE, 0, 0, b"x"),
}


@pytest.mark.parametrize("wire", CONTROL_FRAMES.values(), ids=CONTROL_FRAMES.keys())
def test_control_frames_past_the_control_budget_enhance_calm(wire: bytes) -> None:
    connection = connect(control_budget=20, clock=Clock())
    feed(connection, client_headers(1, REQUEST))  # a call's work clears what SETTINGS cost
    for _ in range(20):
        feed(connection, wire)
    assert connection_error(connection, wire).code == http2.ENHANCE_YOUR_CALM


def test_empty_continuations_past_the_control_budget_enhance_calm() -> None:
    connection = connect(control_budget=20, clock=Clock())
    feed(connection, client_headers(1, REQUEST))
    feed(connection, frame(HEADERS, 0, 3, hpack.encode_headers(REQUEST)))
    for _ in range(20):
        feed(connection, frame(CONTINUATION, 0, 3, b""))
    error = connection_error(connection, frame(CONTINUATION, 0, 3, b""))
    assert error.code == http2.ENHANCE_YOUR_CALM


def test_ping_policy_the_third_early_ping_past_two_strikes_is_too_many() -> None:
    connection = connect(clock=Clock())
    for _ in range(3):  # the first ping, then two early ones: two strikes
        feed(connection, ping())
        assert sent(connection) == [(PING, ACK, 0, b"01234567")]
    error = connection_error(connection, ping())
    assert (error.code, error.message) == (http2.ENHANCE_YOUR_CALM, "too_many_pings")


def test_ping_policy_sending_a_reply_forgives_the_strikes() -> None:
    connection = connect(clock=Clock())
    feed(connection, client_headers(1, REQUEST, end_stream=True)
         + client_headers(3, REQUEST, end_stream=True))
    for _ in range(3):
        feed(connection, ping())
    connection.respond(1, b"H", b"reply", b"T")
    sent(connection)
    for _ in range(3):
        feed(connection, ping())
    assert [kind for kind, *_ in sent(connection)] == [PING] * 3
    error = connection_error(connection, ping())
    assert (error.code, error.message) == (http2.ENHANCE_YOUR_CALM, "too_many_pings")


def test_ping_policy_pings_five_minutes_apart_during_a_call_are_no_strikes() -> None:
    clock = Clock()
    connection = connect(clock=clock)
    feed(connection, client_headers(1, REQUEST))
    for _ in range(10):
        feed(connection, ping())
        clock.now += 300.0
    assert [kind for kind, *_ in sent(connection)] == [PING] * 10


def test_ping_policy_without_a_call_pings_must_be_two_hours_apart() -> None:
    clock = Clock()
    connection = connect(clock=clock)
    for _ in range(3):
        feed(connection, ping())
        clock.now += 300.0
    assert connection_error(connection, ping()).code == http2.ENHANCE_YOUR_CALM


def _split_block(pieces: int) -> list[bytes]:
    block = hpack.encode_headers(with_field(("user-agent", "x" * 60)))
    assert len(block) > pieces
    cuts = [len(block) * at // pieces for at in range(pieces + 1)]
    return [block[start:end] for start, end in zip(cuts, cuts[1:], strict=False)]


def test_a_header_block_in_32_continuations_is_accepted() -> None:
    connection = connect()
    pieces = _split_block(33)
    wire = (frame(HEADERS, END_STREAM, 1, pieces[0])
            + b"".join(frame(CONTINUATION, 0, 1, piece) for piece in pieces[1:-1])
            + frame(CONTINUATION, END_HEADERS, 1, pieces[-1]))
    assert kinds(feed(connection, wire)) == [(http2.EV_HEADERS, 1, 0)]


def test_a_header_block_in_more_than_32_continuations_enhances_calm() -> None:
    connection = connect()
    pieces = _split_block(34)
    feed(connection, frame(HEADERS, END_STREAM, 1, pieces[0])
         + b"".join(frame(CONTINUATION, 0, 1, piece) for piece in pieces[1:33]))
    error = connection_error(connection, frame(CONTINUATION, END_HEADERS, 1, pieces[33]))
    assert error.code == http2.ENHANCE_YOUR_CALM


def test_a_header_block_over_4x_the_header_list_size_enhances_calm() -> None:
    connection = connect()
    wire = frame(HEADERS, 0, 1, bytes(16_384)) + frame(CONTINUATION, 0, 1, bytes(16_384)) * 3
    assert feed(connection, wire, step=4096) == []  # 65,536 octets: not past 4 x 16,384
    error = connection_error(connection, frame(CONTINUATION, END_HEADERS, 1, b"\x82"))
    assert error.code == http2.ENHANCE_YOUR_CALM


# --------------------------------------------------------------- inbound flow control


def _windows(out: list[Frame]) -> dict[int, int]:
    """What the WINDOW_UPDATEs in ``out`` gave back, per stream (0: the connection)."""
    given: dict[int, int] = {}
    for kind, _, stream_id, payload in out:
        if kind == WINDOW_UPDATE:
            given[stream_id] = given.get(stream_id, 0) + int.from_bytes(payload, "big")
    return given


def test_6_9_1_data_past_the_streams_window_is_a_flow_control_stream_error() -> None:
    connection = Connection(stream_window=100)
    assert _announced_settings(connection)[http2.INITIAL_WINDOW_SIZE] == 100
    feed(connection, PREFACE + settings_frame([]) + client_headers(1, REQUEST))
    sent(connection)
    assert len(feed(connection, data(1, bytes(100)))) == 1
    events = feed(connection, data(1, b"x"))
    assert sent(connection) == [reset(1, http2.FLOW_CONTROL_ERROR)]
    assert kinds(events) == [(http2.EV_RESET, 1, http2.FLOW_CONTROL_ERROR)]
    assert_serves(connection, 3)


def test_6_1_padding_counts_against_the_flow_control_window() -> None:
    connection = connect(stream_window=100)
    feed(connection, client_headers(1, REQUEST))
    events = feed(connection, data(1, bytes([90]) + b"123456789" + bytes(90), PADDED))
    assert [e.data for e in events] == [b"123456789"]
    events = feed(connection, data(1, b"x"))
    assert sent(connection) == [reset(1, http2.FLOW_CONTROL_ERROR)]


def test_6_9_1_data_past_the_connections_window_is_a_flow_control_connection_error() -> None:
    connection = Connection(connection_window=70_000, stream_window=65_535)
    assert frames(connection.take_output())[1] == (WINDOW_UPDATE, 0, 0,
                                                   (70_000 - 65_535).to_bytes(4, "big"))
    feed(connection, PREFACE + settings_frame([])
         + client_headers(1, REQUEST) + client_headers(3, REQUEST))
    sent(connection)
    wire = data(1, bytes(16_384)) * 3 + data(1, bytes(16_383)) + data(3, bytes(4_465))
    feed(connection, wire, step=997)
    error = connection_error(connection, data(3, b"x"))
    assert error.code == http2.FLOW_CONTROL_ERROR


def test_inbound_windows_are_given_back_only_as_the_reader_releases() -> None:
    connection = connect(stream_window=100)
    feed(connection, client_headers(1, REQUEST) + data(1, bytes(100)))
    assert sent(connection) == []
    for _ in range(10):
        connection.release(1, 10)
    assert _windows(sent(connection)).get(1, 0) == 100
    assert len(feed(connection, data(1, bytes(100)))) == 1
    events = feed(connection, data(1, b"x"))
    assert kinds(events) == [(http2.EV_RESET, 1, http2.FLOW_CONTROL_ERROR)]


def test_the_connections_window_is_given_back_as_the_reader_releases() -> None:
    connection = connect(connection_window=70_000, stream_window=65_535)
    feed(connection, client_headers(1, REQUEST)
         + data(1, bytes(16_384)) * 2 + data(1, bytes(2_232)), step=997)
    assert sent(connection) == []
    connection.release(1, 35_000)
    assert _windows(sent(connection)) == {0: 35_000, 1: 35_000}


def _client_reset(connection: Connection) -> None:
    assert kinds(feed(connection, rst_stream(1, http2.CANCEL))) == [(http2.EV_RESET, 1, 8)]


@pytest.mark.parametrize("close", [_client_reset, _reset_by_the_server])
def test_a_closed_stream_returns_what_it_held_to_the_connections_window(
        close: Callable[[Connection], None]) -> None:
    connection = connect(connection_window=70_000, stream_window=65_535)
    feed(connection, client_headers(1, REQUEST)
         + data(1, bytes(16_384)) * 2 + data(1, bytes(2_232)), step=997)
    sent(connection)
    close(connection)
    assert _windows(sent(connection)) == {0: 35_000}


def test_data_arriving_after_the_servers_reset_is_returned_to_the_connections_window() -> None:
    connection = connect(connection_window=70_000, stream_window=65_535)
    feed(connection, client_headers(1, REQUEST))
    connection.reset(1, http2.CANCEL)
    sent(connection)
    assert feed(connection, data(1, bytes(16_384)) * 2 + data(1, bytes(2_232)), step=997) == []
    assert _windows(sent(connection)) == {0: 35_000}
