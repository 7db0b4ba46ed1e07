"""HTTP/2 as a gRPC server speaks it, without I/O: RFC 9113's framing, stream states and flow
control, and RFC 7541's header compression, for the KServe gRPC frontend that runs on the
event loop's own thread (``inferd.plugins.frontends.kserve_grpc.loop_server``).

``Connection.receive(data)`` takes what the socket read and returns the events a server acts
on: a stream's headers, its data, a reset, a stream whose queued data has all been sent, a
GOAWAY, a PING's acknowledgement. What the protocol itself must answer (the SETTINGS
acknowledgement, PING replies, WINDOW_UPDATEs, RST_STREAMs of refused or malformed streams)
is queued in ``Connection.output``, beside the frames the server sends through
``send_headers``, ``send_data``, ``send_trailers``, ``respond``, ``reset``, ``ping`` and
``goaway``; the caller writes ``take_output()`` to its transport after each call.

Both directions are flow-controlled. Outgoing DATA honours the peer's windows and largest
frame: what does not fit waits in its stream, in order with the trailers queued after it,
until a WINDOW_UPDATE or a SETTINGS frame opens room. Incoming DATA is credited back only as
the reader ``release``s it, so a connection never holds more unread request bytes than its
windows. A breach of the protocol raises ``ProtocolError`` with the code the GOAWAY must
carry; a breach confined to one stream resets that stream. A peer that spends the server's
work without serving calls (streams reset or refused, frames that only ask for answers,
Huffman-heavy headers, pings past gRPC's policy) exhausts a budget (``http2_guard``) and
gets ENHANCE_YOUR_CALM.

Header blocks are decoded by ``inferd.protocols.hpack``, one decoder per connection, bounded
by the header list size this side announces. Compiled with mypyc as part of the request path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from inferd.protocols.hpack import HeaderDecoder, HeaderListTooLarge, Headers, HpackError
from inferd.protocols.http2_guard import (
    Budget,
    PingPolicy,
    content_length,
    request_problem,
    trailers_problem,
)

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 section 6).
DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9

# Flags.
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# Error codes (section 7).
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
STREAM_CLOSED: Final = 0x5
FRAME_SIZE_ERROR: Final = 0x6
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9
ENHANCE_YOUR_CALM: Final = 0xB

# SETTINGS parameters (section 6.5.2).
HEADER_TABLE_SIZE: Final = 0x1
ENABLE_PUSH: Final = 0x2
MAX_CONCURRENT_STREAMS: Final = 0x3
INITIAL_WINDOW_SIZE: Final = 0x4
MAX_FRAME_SIZE: Final = 0x5
MAX_HEADER_LIST_SIZE: Final = 0x6

DEFAULT_WINDOW: Final = 65_535
DEFAULT_MAX_FRAME: Final = 16_384
MAX_WINDOW: Final = 2**31 - 1
# What this side lets a peer send before it reads more: per stream, and for the connection.
STREAM_WINDOW: Final = 4 * 2**20
CONNECTION_WINDOW: Final = 16 * 2**20
DEFAULT_MAX_STREAMS: Final = 128
DEFAULT_MAX_HEADER_LIST: Final = 16 * 2**10
DEFAULT_RESET_BUDGET: Final = 1000
DEFAULT_CONTROL_BUDGET: Final = 1000
# A header block (HEADERS and its CONTINUATIONs) may hold at most this many times the header
# list it announces, in at most this many CONTINUATIONs: a block must be decoded whole to
# keep the header table in step, so past either the connection ends.
BLOCK_PER_LIST: Final = 4
MAX_CONTINUATIONS: Final = 32
# Octets of Huffman-coded strings a connection may have decoded: a burst, then a tenth a
# second. A client's repeated headers come from the table and cost nothing here.
HUFFMAN_BUDGET: Final = 4 * 2**20
# Streams remembered once closed, to tell a late frame (tolerated) from a frame on a stream
# the peer itself closed (STREAM_CLOSED), and how each closed (section 5.1): this side reset
# or ended it first, so the peer's frames in flight are ignored; both sides sent END_STREAM,
# so only WINDOW_UPDATE, RST_STREAM and PRIORITY may still come; the peer reset it, so
# anything but RST_STREAM and PRIORITY is a stream error.
_CLOSED_REMEMBERED: Final = 1024
_CLOSED_HERE: Final = 0
_CLOSED_BOTH: Final = 1
_CLOSED_BY_PEER: Final = 2

# Event kinds ``Connection.receive`` returns.
EV_HEADERS: Final = 1
EV_DATA: Final = 2
EV_RESET: Final = 3
EV_DRAINED: Final = 4
EV_GOAWAY: Final = 5
EV_PING_ACK: Final = 6
# A stream opened with a header list over the announced limit (``code``: its size): the
# server answers it with an error and nothing else.
EV_HEADERS_TOO_LARGE: Final = 7

Chunk = bytes | memoryview
# No header list is this object: what ``_last_valid`` holds before the first request.
_NONE_YET: Final[Headers] = (("", ""),)


class ProtocolError(Exception):
    """The peer broke HTTP/2: the connection ends with a GOAWAY carrying ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Event:
    """One thing the peer did that the server acts on. ``headers`` for EV_HEADERS, ``data``
    for EV_DATA, ``code`` for EV_RESET, EV_GOAWAY and EV_HEADERS_TOO_LARGE; ``end_stream``
    when the peer has sent the stream's last frame."""

    def __init__(self, kind: int, stream_id: int, end_stream: bool = False,
                 headers: Headers = (), data: bytes = b"", code: int = 0) -> None:
        self.kind = kind
        self.stream_id = stream_id
        self.end_stream = end_stream
        self.headers = headers
        self.data = data
        self.code = code


# ------------------------------------------------------------------------------ frames


def frame_header(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    return (((length << 8 | kind) << 8 | flags) << 32 | stream_id).to_bytes(9, "big")


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return frame_header(len(payload), kind, flags, stream_id) + payload


def settings_frame(settings: list[tuple[int, int]]) -> bytes:
    payload = b"".join([key.to_bytes(2, "big") + value.to_bytes(4, "big")
                        for key, value in settings])
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


class _Stream:
    def __init__(self, send_window: int, expected_length: int) -> None:
        self.send_window = send_window
        self.in_window = 0  # received and not yet given back with a WINDOW_UPDATE
        self.held = 0  # received and not yet released by the reader
        self.freed = 0  # released and not yet given back
        self.pending: list[Chunk] = []  # DATA payloads waiting for window, in order
        self.pending_bytes = 0
        self.trailers: bytes | None = None  # sent once ``pending`` is
        self.remote_closed = False
        self.expected_length = expected_length  # content-length, -1 without one
        self.received_length = 0


class Connection:
    """The server side of one HTTP/2 connection, without I/O (see the module's text)."""

    def __init__(self, *, max_concurrent_streams: int = DEFAULT_MAX_STREAMS,
                 max_header_list: int = DEFAULT_MAX_HEADER_LIST,
                 reset_budget: int = DEFAULT_RESET_BUDGET,
                 control_budget: int = DEFAULT_CONTROL_BUDGET,
                 ping_policy: PingPolicy | None = None,
                 stream_window: int = STREAM_WINDOW,
                 connection_window: int = CONNECTION_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.output: list[Chunk] = []
        self.last_stream_id = 0  # the highest stream the peer opened
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.send_window = DEFAULT_WINDOW
        self.blocked_bytes = 0  # DATA waiting for the peer's windows, all streams
        self.data_sent = 0  # DATA octets sent, all streams: how a caller sees output move
        self.preface_received = False
        self._settings_received = False  # the preface's SETTINGS (section 3.4)
        self._peer_initial_window = DEFAULT_WINDOW
        self._stream_window = stream_window
        self._connection_window = connection_window
        self._in_window = 0  # received on the connection, not yet given back
        self._freed = 0  # released on the connection, not yet given back
        self._max_streams = max_concurrent_streams
        self._max_header_list = max_header_list
        self._max_block = BLOCK_PER_LIST * max_header_list
        self._buffer = b""
        self._streams: dict[int, _Stream] = {}
        self._blocked: dict[int, _Stream] = {}  # streams with data or trailers waiting
        # Closed streams, newest last, and how they closed (``_CLOSED_*``).
        self._closed: dict[int, int] = {}
        self._too_large = 0  # the size of the last header list over the limit
        self._decoder = HeaderDecoder(max_list_size=max_header_list)
        self._huffman_seen = 0
        self._block_stream = 0  # a header block continues on this stream
        self._block_parts: list[bytes] = []
        self._block_size = 0
        self._block_frames = 0
        self._block_end_stream = False
        self._block_depends_on_itself = False
        self._last_valid: Headers = _NONE_YET  # the last header list found well-formed
        self._last_expected = -1
        self._clock = clock
        self._resets = Budget(reset_budget)
        self._control = Budget(control_budget)
        self._huffman = Budget(HUFFMAN_BUDGET)
        self._pings = ping_policy if ping_policy is not None else PingPolicy()
        self.output.append(settings_frame([
            (ENABLE_PUSH, 0), (MAX_CONCURRENT_STREAMS, max_concurrent_streams),
            (INITIAL_WINDOW_SIZE, stream_window), (MAX_HEADER_LIST_SIZE, max_header_list)]))
        self.output.append(window_update(0, connection_window - DEFAULT_WINDOW))

    # -------------------------------------------------------------- what the peer sent

    def take_output(self) -> list[Chunk]:
        output = self.output
        self.output = []
        return output

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def receive(self, data: bytes) -> list[Event]:
        buffer = self._buffer + data if self._buffer else data
        pos = 0
        if not self.preface_received:
            if len(buffer) < len(PREFACE):
                if not PREFACE.startswith(buffer):
                    raise ProtocolError(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                self._buffer = buffer
                return []
            if not buffer.startswith(PREFACE):
                raise ProtocolError(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
            self.preface_received = True
            pos = len(PREFACE)
        events: list[Event] = []
        end = len(buffer)
        while end - pos >= 9:
            length = (buffer[pos] << 16) | (buffer[pos + 1] << 8) | buffer[pos + 2]
            if length > DEFAULT_MAX_FRAME:
                raise ProtocolError(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            if end - pos - 9 < length:
                break
            kind = buffer[pos + 3]
            flags = buffer[pos + 4]
            stream_id = int.from_bytes(buffer[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = buffer[pos + 9:pos + 9 + length]
            pos += 9 + length
            self._frame(kind, flags, stream_id, payload, events)
        self._buffer = buffer[pos:] if pos < end else b""
        return events

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes,
               events: list[Event]) -> None:
        if not self._settings_received:
            if kind != SETTINGS or flags & ACK:
                raise ProtocolError(PROTOCOL_ERROR, "the preface was not followed by SETTINGS")
            self._settings_received = True
        if self._block_stream:
            if kind != CONTINUATION or stream_id != self._block_stream:
                raise ProtocolError(PROTOCOL_ERROR, "a header block was interrupted")
            self._continuation(flags, stream_id, payload, events)
        elif kind == DATA:
            self._data(flags, stream_id, payload, events)
        elif kind == HEADERS:
            self._headers(flags, stream_id, payload, events)
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload, events)
        elif kind == PING:
            self._ping(flags, stream_id, payload, events)
        elif kind == SETTINGS:
            self._settings(flags, stream_id, payload, events)
        elif kind == RST_STREAM:
            self._rst_stream(stream_id, payload, events)
        elif kind == PRIORITY:
            if not stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "PRIORITY on stream 0")
            self._spent("PRIORITY")
            if len(payload) != 5:
                self._stream_error(stream_id, FRAME_SIZE_ERROR, events)
            elif int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:
                self._stream_error(stream_id, PROTOCOL_ERROR, events)
        elif kind == GOAWAY:
            if stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "GOAWAY on a stream")
            if len(payload) < 8:
                raise ProtocolError(FRAME_SIZE_ERROR, "malformed GOAWAY")
            self._spent("GOAWAY")
            events.append(Event(EV_GOAWAY, 0, code=int.from_bytes(payload[4:8], "big")))
        elif kind == PUSH_PROMISE:
            raise ProtocolError(PROTOCOL_ERROR, "a client may not push")
        elif kind == CONTINUATION:
            raise ProtocolError(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        else:
            self._spent("frames of unknown types")  # otherwise ignored (section 5.5)

    # ------------------------------------------------------------ stream-carrying frames

    def _data(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self._in_window += size
        if self._in_window > self._connection_window:
            raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's window was exceeded")
        if flags & PADDED:
            payload = _unpad(payload)
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            self._free_connection(size)
            if stream is not None:  # half-closed (remote): the peer said it was done
                self._stream_error(stream_id, STREAM_CLOSED, events)
                return
            self._not_open(stream_id, "DATA")
            self._spent("DATA on closed streams")
            return
        end_stream = bool(flags & END_STREAM)
        stream.in_window += size
        if stream.in_window > self._stream_window:
            self._free_connection(size)
            self._stream_error(stream_id, FLOW_CONTROL_ERROR, events)
            return
        padding = size - len(payload)
        if padding:
            self._free_connection(padding)
            stream.freed += padding
        stream.held += len(payload)
        if payload:
            self._control.credit(1.0)
        elif not end_stream:
            self._spent("empty DATA")
        if stream.expected_length >= 0:
            stream.received_length += len(payload)
            if (stream.received_length > stream.expected_length
                    or end_stream and stream.received_length != stream.expected_length):
                self._malformed(stream_id, events)
                return
        if end_stream:
            stream.remote_closed = True
        events.append(Event(EV_DATA, stream_id, end_stream, data=payload))

    def _headers(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id or not stream_id & 1:
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        if flags & PADDED:
            payload = _unpad(payload)
        self._block_depends_on_itself = False
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise ProtocolError(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            # A stream that depends on itself is a stream error (section 5.3.1); its block
            # is still decoded, to keep the header table in step.
            self._block_depends_on_itself = (
                int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id)
            payload = payload[5:]
        if len(payload) > self._max_block:
            raise ProtocolError(ENHANCE_YOUR_CALM, "header block too large")
        self._block_end_stream = bool(flags & END_STREAM)
        if not flags & END_HEADERS:
            self._block_stream = stream_id
            self._block_parts = [payload]
            self._block_size = len(payload)
            self._block_frames = 0
            return
        self._header_block(stream_id, payload, events)

    def _continuation(self, flags: int, stream_id: int, payload: bytes,
                      events: list[Event]) -> None:
        self._block_frames += 1
        self._block_size += len(payload)
        if self._block_frames > MAX_CONTINUATIONS or self._block_size > self._max_block:
            raise ProtocolError(ENHANCE_YOUR_CALM, "header block too large")
        if not payload:
            self._spent("empty CONTINUATION")
        self._block_parts.append(payload)
        if flags & END_HEADERS:
            self._block_stream = 0
            block = b"".join(self._block_parts)
            self._block_parts = []
            self._header_block(stream_id, block, events)

    def _header_block(self, stream_id: int, block: bytes, events: list[Event]) -> None:
        end_stream = self._block_end_stream
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._trailers(stream_id, stream, block, end_stream, events)
            return
        if stream_id <= self.last_stream_id:
            self._decode(block)
            if stream_id not in self._closed:
                raise ProtocolError(PROTOCOL_ERROR, f"stream {stream_id} is below stream "
                                    f"{self.last_stream_id}, opened before it")
            self._not_open(stream_id, "HEADERS")
            self._spent("HEADERS on closed streams")
            return
        self.last_stream_id = stream_id
        decoded = self._decode(block)
        headers = decoded if decoded is not None else ()
        if len(self._streams) >= self._max_streams:
            self._refused(stream_id, REFUSED_STREAM)
            return
        if decoded is None:
            self._refusal()
            self._open(stream_id, -1, end_stream)
            events.append(Event(EV_HEADERS_TOO_LARGE, stream_id, end_stream,
                                code=self._too_large))
            return
        if headers is self._last_valid:  # the decoder's cache gave the same list again
            problem = None
            expected = self._last_expected
        else:
            problem = request_problem(headers)
            expected = content_length(headers) if problem is None else -1
            if problem is None and expected >= -1:
                self._last_valid = headers
                self._last_expected = expected
        if self._block_depends_on_itself:
            problem = "a stream that depends on itself"
        elif expected == -2:
            problem = "content-length is not a number"
        elif end_stream and expected > 0:
            problem = "content-length does not match the DATA"
        if problem is not None:
            self._refused(stream_id, PROTOCOL_ERROR)
            return
        self._control.credit(2.0)
        self._open(stream_id, expected, end_stream)
        events.append(Event(EV_HEADERS, stream_id, end_stream, headers=headers))

    def _trailers(self, stream_id: int, stream: _Stream, block: bytes, end_stream: bool,
                  events: list[Event]) -> None:
        """A second header block on an open stream: the request's trailers."""
        headers = self._decode(block)
        if headers is None:
            self._malformed(stream_id, events)
            return
        if stream.remote_closed:
            self._stream_error(stream_id, STREAM_CLOSED, events)
        elif not end_stream:
            self._malformed(stream_id, events)
        elif trailers_problem(headers) is not None or (
                stream.expected_length >= 0
                and stream.received_length != stream.expected_length):
            self._malformed(stream_id, events)
        else:
            stream.remote_closed = True
            events.append(Event(EV_DATA, stream_id, True))

    def _decode(self, block: bytes) -> Headers | None:
        """The header list of ``block``, None when it is over the announced limit (its size
        in ``_too_large``). Every block goes through the decoder, to keep its table in step,
        and is charged to the connection's Huffman budget."""
        decoder = self._decoder
        try:
            return decoder.decode(block)
        except HeaderListTooLarge as too_large:
            if too_large.fatal:
                raise ProtocolError(ENHANCE_YOUR_CALM, "header list too large") from None
            self._too_large = too_large.size
            return None
        except HpackError as broken:
            raise ProtocolError(COMPRESSION_ERROR, str(broken)) from None
        finally:
            spent = decoder.huffman_bytes - self._huffman_seen
            if spent:
                self._huffman_seen = decoder.huffman_bytes
                if not self._huffman.charge(self._clock(), float(spent)):
                    raise ProtocolError(ENHANCE_YOUR_CALM, "too many Huffman-coded headers")

    def _open(self, stream_id: int, expected_length: int, end_stream: bool) -> None:
        stream = _Stream(self._peer_initial_window, expected_length)
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream

    # ---------------------------------------------------------------- control frames

    def _settings(self, flags: int, stream_id: int, payload: bytes,
                  events: list[Event]) -> None:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolError(FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            self._spent("SETTINGS")
            return
        if len(payload) % 6:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed SETTINGS")
        self._spent("SETTINGS")
        for at in range(0, len(payload), 6):
            key = int.from_bytes(payload[at:at + 2], "big")
            value = int.from_bytes(payload[at + 2:at + 6], "big")
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self._streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError(FLOW_CONTROL_ERROR, "a stream's window overflowed")
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value < 2**24:
                    raise ProtocolError(PROTOCOL_ERROR, f"max frame size {value}")
                self.peer_max_frame = value
            elif key == ENABLE_PUSH and value > 1:
                raise ProtocolError(PROTOCOL_ERROR, "ENABLE_PUSH above 1")
            # HEADER_TABLE_SIZE is moot: this side's encoder uses no dynamic table.
        self.output.append(frame(SETTINGS, ACK, 0))
        self._flush_blocked(events)

    def _ping(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed PING")
        if flags & ACK:
            self._spent("PING")
            events.append(Event(EV_PING_ACK, 0, data=payload))
            return
        if not self._pings.received(self._clock(), bool(self._streams)):
            raise ProtocolError(ENHANCE_YOUR_CALM, "too_many_pings")
        self._spent("PING")
        self.output.append(frame(PING, ACK, 0, payload))

    def _window_update(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed WINDOW_UPDATE")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not stream_id:
            if not increment:
                raise ProtocolError(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's window overflowed")
            sent = self.data_sent
            if self._blocked:
                self._flush_blocked(events)
            if self.data_sent == sent:  # it opened room for nothing waiting
                self._spent("WINDOW_UPDATE")
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            self._not_open(stream_id, "WINDOW_UPDATE")
            self._spent("WINDOW_UPDATE")
            return
        if not increment:
            self._stream_error(stream_id, PROTOCOL_ERROR, events)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._stream_error(stream_id, FLOW_CONTROL_ERROR, events)
            return
        sent = self.data_sent
        if stream.pending or stream.trailers is not None:
            self._flush(stream_id, stream, events)
        if self.data_sent == sent:
            self._spent("WINDOW_UPDATE")

    def _rst_stream(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed RST_STREAM")
        if stream_id in self._streams:
            # A call cancelled while the server works on it: rapid reset (CVE-2023-44487)
            # costs the server a call's start for two frames.
            if not self._resets.charge(self._clock()):
                raise ProtocolError(ENHANCE_YOUR_CALM, "too many streams reset")
            self._remove(stream_id, _CLOSED_BY_PEER)
            events.append(Event(EV_RESET, stream_id, code=int.from_bytes(payload, "big")))
            return
        self._not_open(stream_id, "RST_STREAM")
        self._spent("RST_STREAM")

    def _not_open(self, stream_id: int, kind: str) -> None:
        """A frame other than PRIORITY for a stream that is not open (section 5.1): a
        connection error on an idle stream; on a closed one, what its closing allows."""
        if stream_id > self.last_stream_id:
            raise ProtocolError(PROTOCOL_ERROR, f"{kind} on idle stream {stream_id}")
        how = self._closed.get(stream_id, _CLOSED_HERE)
        if how == _CLOSED_BY_PEER:
            if kind != "RST_STREAM":
                self.output.append(rst_stream(stream_id, STREAM_CLOSED))
        elif how == _CLOSED_BOTH and kind in ("DATA", "HEADERS"):
            raise ProtocolError(STREAM_CLOSED, f"{kind} on closed stream {stream_id}")

    def _spent(self, what: str) -> None:
        """Charge a frame that serves no call to the control-frame budget."""
        if not self._control.charge(self._clock()):
            raise ProtocolError(ENHANCE_YOUR_CALM, f"too many {what}")

    def _refusal(self) -> None:
        """Charge a stream this side will not serve to the reset budget."""
        if not self._resets.charge(self._clock()):
            raise ProtocolError(ENHANCE_YOUR_CALM, "too many streams refused")

    def _refused(self, stream_id: int, code: int) -> None:
        """A stream the peer opened and this side will not serve: reset at once."""
        self._refusal()
        self.output.append(rst_stream(stream_id, code))
        self._remember_closed(stream_id, _CLOSED_HERE)

    def _malformed(self, stream_id: int, events: list[Event]) -> None:
        """A malformed request on an open stream (section 8.1.1): a stream error, never
        served, charged as a refusal."""
        self._refusal()
        self._stream_error(stream_id, PROTOCOL_ERROR, events)

    def _stream_error(self, stream_id: int, code: int, events: list[Event]) -> None:
        """Reset ``stream_id`` with ``code``; an open stream's reader hears of it."""
        if stream_id in self._streams:
            self.reset(stream_id, code)
            events.append(Event(EV_RESET, stream_id, code=code))
        else:
            self.output.append(rst_stream(stream_id, code))

    # -------------------------------------------------------------- what this side sends

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def release(self, stream_id: int, size: int) -> None:
        """The reader took ``size`` bytes of ``stream_id``'s DATA: the peer may send as much
        again, on the stream and on the connection."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # what it held went back to the connection as it closed
        self._free_connection(size)
        stream.held -= size
        if stream.remote_closed:
            return
        stream.freed += size
        if stream.freed >= self._stream_window // 2:
            self.output.append(window_update(stream_id, stream.freed))
            stream.in_window -= stream.freed
            stream.freed = 0

    def pending(self, stream_id: int) -> int:
        """Bytes of ``stream_id``'s DATA still waiting for the peer's window."""
        stream = self._streams.get(stream_id)
        return stream.pending_bytes if stream is not None else 0

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool = False) -> None:
        if stream_id not in self._streams:
            return
        self._header_frames(stream_id, block, end_stream)
        if end_stream:
            self._close(stream_id)

    def send_data(self, stream_id: int, data: Chunk) -> None:
        """Queue ``data`` on the stream; it leaves as far as the windows allow now."""
        stream = self._streams.get(stream_id)
        if stream is None or not len(data):
            return
        stream.pending.append(data)
        stream.pending_bytes += len(data)
        self.blocked_bytes += len(data)
        self._flush(stream_id, stream, None)

    def send_trailers(self, stream_id: int, block: bytes) -> None:
        """End the stream with ``block`` once its queued data has been sent."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.trailers = block
        self._flush(stream_id, stream, None)

    def respond(self, stream_id: int, headers: bytes, data: Chunk, trailers: bytes) -> None:
        """A whole reply: ``headers``, one DATA of ``data``, then ``trailers`` ending it."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        size = len(data)
        if (size <= self.peer_max_frame and size <= self.send_window
                and size <= stream.send_window and len(headers) <= self.peer_max_frame
                and len(trailers) <= self.peer_max_frame):
            self.send_window -= size
            self.data_sent += size
            self._pings.forgive()
            self._control.credit(1.0)
            self.output.append(frame_header(len(headers), HEADERS, END_HEADERS, stream_id)
                               + headers + frame_header(size, DATA, 0, stream_id))
            self.output.append(data)
            self.output.append(frame_header(len(trailers), HEADERS, END_HEADERS | END_STREAM,
                                            stream_id) + trailers)
            self._close(stream_id)
            return
        self._header_frames(stream_id, headers, False)
        self.send_data(stream_id, data)
        self.send_trailers(stream_id, trailers)

    def refuse(self, stream_id: int) -> None:
        """Refuse an open stream the server will not serve now (REFUSED_STREAM: the client
        may retry it), charged to the connection's reset budget."""
        if stream_id in self._streams:
            self._refusal()
            self.reset(stream_id, REFUSED_STREAM)

    def reset(self, stream_id: int, code: int) -> None:
        if stream_id in self._streams:
            self._remove(stream_id, _CLOSED_HERE)
            self.output.append(rst_stream(stream_id, code))

    def ping(self, payload: bytes) -> None:
        self.output.append(frame(PING, 0, 0, payload))

    def goaway(self, code: int = NO_ERROR, message: str = "") -> None:
        payload = (self.last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big")
                   + message.encode("utf-8", "replace"))
        self.output.append(frame(GOAWAY, 0, 0, payload))

    def _header_frames(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        self._pings.forgive()
        limit = self.peer_max_frame
        flags = END_STREAM if end_stream else 0
        if len(block) <= limit:
            self.output.append(frame(HEADERS, flags | END_HEADERS, stream_id, block))
            return
        self.output.append(frame(HEADERS, flags, stream_id, block[:limit]))
        for at in range(limit, len(block), limit):
            last = at + limit >= len(block)
            self.output.append(frame(CONTINUATION, END_HEADERS if last else 0, stream_id,
                                     block[at:at + limit]))

    def _flush_blocked(self, events: list[Event] | None) -> None:
        """Send what the streams waiting for window can send now: only those are visited."""
        for stream_id, stream in list(self._blocked.items()):
            if self.send_window <= 0:
                return
            self._flush(stream_id, stream, events)

    def _flush(self, stream_id: int, stream: _Stream, events: list[Event] | None) -> None:
        had = stream.pending_bytes
        limit = self.peer_max_frame
        while stream.pending:
            room = min(self.send_window, stream.send_window, limit)
            if room <= 0:
                break
            chunk = stream.pending[0]
            if len(chunk) <= room:
                stream.pending.pop(0)
                piece = chunk
            else:
                view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
                piece = view[:room]
                stream.pending[0] = view[room:]
            size = len(piece)
            self.send_window -= size
            stream.send_window -= size
            stream.pending_bytes -= size
            self.blocked_bytes -= size
            self.data_sent += size
            self._control.credit(1.0)
            self.output.append(frame_header(size, DATA, 0, stream_id))
            self.output.append(piece)
        if stream.pending:
            self._blocked[stream_id] = stream
            return
        self._blocked.pop(stream_id, None)
        if had:
            self._pings.forgive()
        if stream.trailers is not None:
            self._header_frames(stream_id, stream.trailers, True)
            self._close(stream_id)
        elif had and events is not None:
            events.append(Event(EV_DRAINED, stream_id))

    def _close(self, stream_id: int) -> None:
        """This side sent the stream's last frame: a peer still sending is told to stop."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        open_remotely = not stream.remote_closed
        self._remove(stream_id, _CLOSED_HERE if open_remotely else _CLOSED_BOTH)
        if open_remotely:
            self.output.append(rst_stream(stream_id, NO_ERROR))

    def _remove(self, stream_id: int, how: int) -> None:
        """Forget a closed stream: what it held of the connection's window is given back,
        and what it had waiting to be sent is dropped."""
        stream = self._streams.pop(stream_id)
        if stream.held:
            self._free_connection(stream.held)
        if stream.pending_bytes:
            self.blocked_bytes -= stream.pending_bytes
        self._blocked.pop(stream_id, None)
        self._remember_closed(stream_id, how)

    def _remember_closed(self, stream_id: int, how: int) -> None:
        closed = self._closed
        closed[stream_id] = how
        if len(closed) > _CLOSED_REMEMBERED:
            del closed[next(iter(closed))]

    def _free_connection(self, size: int) -> None:
        self._freed += size
        if self._freed >= self._connection_window // 2:
            self.output.append(window_update(0, self._freed))
            self._in_window -= self._freed
            self._freed = 0


def _unpad(payload: bytes) -> bytes:
    if not payload:
        raise ProtocolError(PROTOCOL_ERROR, "padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1:len(payload) - pad]
