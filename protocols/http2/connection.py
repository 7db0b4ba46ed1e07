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
Huffman-heavy headers, pings past gRPC's policy) exhausts a budget (``guard``) and
gets ENHANCE_YOUR_CALM.

Header blocks are decoded by ``inferd.protocols.http2.hpack``, one decoder per connection, bounded
by the header list size this side announces. This module owns the frame loop, DATA, header
blocks and the streams they open; the connection-level frames are ``control``'s, the
streams and what this side sends on them ``streams``', the frames' bytes and names
``frames``' (re-exported here, the one module callers import). Compiled with mypyc as part
of the request path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from inferd.protocols.http2.hpack import HeaderDecoder, HeaderListTooLarge, Headers, HpackError

# HTTP/2's vocabulary, re-exported: the frontend and the tests speak HTTP/2 through this module.
from inferd.protocols.http2.frames import (
    ACK as ACK, CANCEL as CANCEL, COMPRESSION_ERROR as COMPRESSION_ERROR,
    CONTINUATION as CONTINUATION, DATA as DATA, DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW as DEFAULT_WINDOW, ENABLE_PUSH as ENABLE_PUSH, END_HEADERS as END_HEADERS,
    END_STREAM as END_STREAM, ENHANCE_YOUR_CALM as ENHANCE_YOUR_CALM, EV_DATA as EV_DATA,
    EV_DRAINED as EV_DRAINED, EV_GOAWAY as EV_GOAWAY, EV_HEADERS as EV_HEADERS,
    EV_HEADERS_TOO_LARGE as EV_HEADERS_TOO_LARGE, EV_PING_ACK as EV_PING_ACK, EV_RESET as EV_RESET,
    FLOW_CONTROL_ERROR as FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR as FRAME_SIZE_ERROR,
    GOAWAY as GOAWAY, HEADERS as HEADERS, HEADER_TABLE_SIZE as HEADER_TABLE_SIZE,
    INITIAL_WINDOW_SIZE as INITIAL_WINDOW_SIZE, INTERNAL_ERROR as INTERNAL_ERROR,
    MAX_CONCURRENT_STREAMS as MAX_CONCURRENT_STREAMS, MAX_FRAME_SIZE as MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE as MAX_HEADER_LIST_SIZE, MAX_WINDOW as MAX_WINDOW, NO_ERROR as NO_ERROR,
    PADDED as PADDED, PING as PING, PREFACE as PREFACE, PRIORITY as PRIORITY,
    PRIORITY_FLAG as PRIORITY_FLAG, PROTOCOL_ERROR as PROTOCOL_ERROR, PUSH_PROMISE as PUSH_PROMISE,
    REFUSED_STREAM as REFUSED_STREAM, RST_STREAM as RST_STREAM, SETTINGS as SETTINGS,
    STREAM_CLOSED as STREAM_CLOSED, WINDOW_UPDATE as WINDOW_UPDATE, Chunk as Chunk, Event as Event,
    ProtocolError as ProtocolError, frame as frame, frame_header as frame_header,
    rst_stream as rst_stream, settings_frame as settings_frame, window_update as window_update,
)
from inferd.protocols.http2.frames import unpad
from inferd.protocols.http2.guard import (
    Budget,
    PingPolicy,
    content_length,
    request_problem,
    trailers_problem,
)
from inferd.protocols.http2.control import ControlFrames
from inferd.protocols.http2.streams import Stream

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
# No header list is this object: what ``_last_valid`` holds before the first request.
_NONE_YET: Final[Headers] = (("", ""),)


class Connection(ControlFrames):
    """The server side of one HTTP/2 connection, without I/O (see the module's text): what
    the peer sent; what this side sends is ``ConnectionStreams``'."""

    def __init__(self, *, max_concurrent_streams: int = DEFAULT_MAX_STREAMS,
                 max_header_list: int = DEFAULT_MAX_HEADER_LIST,
                 reset_budget: int = DEFAULT_RESET_BUDGET,
                 control_budget: int = DEFAULT_CONTROL_BUDGET,
                 ping_policy: PingPolicy | None = None,
                 stream_window: int = STREAM_WINDOW,
                 connection_window: int = CONNECTION_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(reset_budget=reset_budget, control_budget=control_budget,
                         ping_policy=ping_policy, stream_window=stream_window,
                         connection_window=connection_window, clock=clock)
        self.preface_received = False
        self._settings_received = False  # the preface's SETTINGS (section 3.4)
        self._max_streams = max_concurrent_streams
        self._max_header_list = max_header_list
        self._max_block = BLOCK_PER_LIST * max_header_list
        self._buffer = b""
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
        self._huffman = Budget(HUFFMAN_BUDGET)
        self.output.append(settings_frame([
            (ENABLE_PUSH, 0), (MAX_CONCURRENT_STREAMS, max_concurrent_streams),
            (INITIAL_WINDOW_SIZE, stream_window), (MAX_HEADER_LIST_SIZE, max_header_list)]))
        self.output.append(window_update(0, connection_window - DEFAULT_WINDOW))

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
            payload = unpad(payload)
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
            payload = unpad(payload)
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

    def _trailers(self, stream_id: int, stream: Stream, block: bytes, end_stream: bool,
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
        stream = Stream(self._peer_initial_window, expected_length)
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream

    def _malformed(self, stream_id: int, events: list[Event]) -> None:
        """A malformed request on an open stream (section 8.1.1): a stream error, never
        served, charged as a refusal."""
        self._refusal()
        self._stream_error(stream_id, PROTOCOL_ERROR, events)

