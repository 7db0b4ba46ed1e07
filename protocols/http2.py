"""HTTP/2 as a gRPC server speaks it, without I/O: RFC 9113's framing and RFC 7541's header
compression, for the KServe gRPC frontend that runs on the event loop's own thread
(``inferd.plugins.frontends.kserve_grpc.loop_server``).

``Connection.receive(data)`` takes what the socket read and returns the events a server acts
on: a stream's headers, its data, a reset, a stream whose queued data has all been sent, a
GOAWAY, a PING's acknowledgement. What the protocol itself must answer (the SETTINGS
acknowledgement, PING replies, WINDOW_UPDATEs giving back what was read) is queued in
``Connection.output``, beside the frames the server sends through ``send_headers``,
``send_data``, ``send_trailers``, ``respond``, ``reset``, ``ping`` and ``goaway``; the caller
writes ``take_output()`` to its transport after each call. Outgoing DATA honours the peer's
connection and stream windows and its largest frame: what does not fit waits in its stream,
in order with the trailers queued after it, until a WINDOW_UPDATE or a SETTINGS frame opens
room. A breach of the protocol by the peer raises ``ProtocolError`` with the error code the
GOAWAY must carry.

Header blocks are decoded by ``inferd.protocols.hpack``, one decoder per connection. Compiled
with mypyc as part of the request path.
"""

from __future__ import annotations

from typing import Final

from inferd.protocols.hpack import HeaderDecoder, Headers, HpackError

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
# The most header block (HEADERS and its CONTINUATIONs) one request may carry: past it the
# connection ends, since a block must be decoded whole to keep the header table in step.
MAX_HEADER_BLOCK: Final = 256 * 2**10

# Event kinds ``Connection.receive`` returns.
EV_HEADERS: Final = 1
EV_DATA: Final = 2
EV_RESET: Final = 3
EV_DRAINED: Final = 4
EV_GOAWAY: Final = 5
EV_PING_ACK: Final = 6

Chunk = bytes | memoryview


class ProtocolError(Exception):
    """The peer broke HTTP/2: the connection ends with a GOAWAY carrying ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Event:
    """One thing the peer did that the server acts on. ``headers`` for EV_HEADERS, ``data``
    for EV_DATA, ``code`` for EV_RESET and EV_GOAWAY; ``end_stream`` when the peer has sent
    the stream's last frame."""

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
    payload = b"".join(key.to_bytes(2, "big") + value.to_bytes(4, "big")
                       for key, value in settings)
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


class _Stream:
    def __init__(self, send_window: int) -> None:
        self.send_window = send_window
        self.unacked = 0  # received and not yet given back with a WINDOW_UPDATE
        self.pending: list[Chunk] = []  # DATA payloads waiting for window, in order
        self.pending_bytes = 0
        self.trailers: bytes | None = None  # sent once ``pending`` is
        self.remote_closed = False
        self.manual = False  # window given back by ``release``, as the reader consumes
        self.released = 0


class Connection:
    """The server side of one HTTP/2 connection, without I/O (see the module's text)."""

    def __init__(self, *, max_concurrent_streams: int = 0,
                 stream_window: int = STREAM_WINDOW,
                 connection_window: int = CONNECTION_WINDOW) -> None:
        self.output: list[Chunk] = []
        self.last_stream_id = 0  # the highest stream the peer opened
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.send_window = DEFAULT_WINDOW
        self._peer_initial_window = DEFAULT_WINDOW
        self._stream_window = stream_window
        self._connection_window = connection_window
        self._unacked = 0
        self._max_streams = max_concurrent_streams
        self._buffer = b""
        self.preface_received = False
        self._streams: dict[int, _Stream] = {}
        self._decoder = HeaderDecoder()
        self._block_stream = 0  # a header block continues on this stream
        self._block = b""
        self._block_end_stream = False
        settings = [(ENABLE_PUSH, 0), (INITIAL_WINDOW_SIZE, stream_window),
                    (MAX_HEADER_LIST_SIZE, MAX_HEADER_BLOCK)]
        if max_concurrent_streams:
            settings.append((MAX_CONCURRENT_STREAMS, max_concurrent_streams))
        self.output.append(settings_frame(settings))
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
        if self._block_stream and kind != CONTINUATION:
            raise ProtocolError(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == DATA:
            self._data(flags, stream_id, payload, events)
        elif kind == HEADERS:
            self._headers(flags, stream_id, payload, events)
        elif kind == CONTINUATION:
            if stream_id != self._block_stream or not stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
            self._block += payload
            if len(self._block) > MAX_HEADER_BLOCK:
                raise ProtocolError(ENHANCE_YOUR_CALM, "header block too large")
            if flags & END_HEADERS:
                self._block_stream = 0
                self._open(stream_id, self._block, self._block_end_stream, events)
                self._block = b""
        elif kind == SETTINGS:
            self._settings(flags, stream_id, payload, events)
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload, events)
        elif kind == PING:
            if stream_id or len(payload) != 8:
                raise ProtocolError(FRAME_SIZE_ERROR if len(payload) != 8 else PROTOCOL_ERROR,
                                    "malformed PING")
            if flags & ACK:
                events.append(Event(EV_PING_ACK, 0, data=payload))
            else:
                self.output.append(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            if not stream_id or len(payload) != 4:
                raise ProtocolError(PROTOCOL_ERROR, "malformed RST_STREAM")
            if self._streams.pop(stream_id, None) is not None:
                events.append(Event(EV_RESET, stream_id, code=int.from_bytes(payload, "big")))
        elif kind == GOAWAY:
            code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else 0
            events.append(Event(EV_GOAWAY, 0, code=code))
        elif kind == PRIORITY:
            if len(payload) != 5 or not stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "malformed PRIORITY")
        elif kind == PUSH_PROMISE:
            raise ProtocolError(PROTOCOL_ERROR, "a client may not push")
        # Unknown frame types are ignored (section 5.5).

    def _data(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self._unacked += size
        if self._unacked > self._connection_window:
            raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's window was exceeded")
        if self._unacked >= self._connection_window // 2:
            self.output.append(window_update(0, self._unacked))
            self._unacked = 0
        if flags & PADDED:
            payload = _unpad(payload)
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self.last_stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "DATA on a stream never opened")
            return  # a stream this side closed or reset: what was in flight still arrives
        end_stream = bool(flags & END_STREAM)
        stream.unacked += size
        if stream.unacked > self._stream_window:
            self._reset(stream_id, FLOW_CONTROL_ERROR, events)
            return
        if end_stream:
            stream.remote_closed = True
        elif not stream.manual and stream.unacked >= self._stream_window // 2:
            self.output.append(window_update(stream_id, stream.unacked))
            stream.unacked = 0
        events.append(Event(EV_DATA, stream_id, end_stream, data=payload))

    def _headers(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if not stream_id or not stream_id & 1:
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        if flags & PADDED:
            payload = _unpad(payload)
        if flags & PRIORITY_FLAG:
            payload = payload[5:]
        if not flags & END_HEADERS:
            self._block_stream = stream_id
            self._block = payload
            self._block_end_stream = bool(flags & END_STREAM)
            return
        self._open(stream_id, payload, bool(flags & END_STREAM), events)

    def _open(self, stream_id: int, block: bytes, end_stream: bool,
              events: list[Event]) -> None:
        try:
            headers = self._decoder.decode(block)  # always, to keep the table in step
        except HpackError as error:
            raise ProtocolError(COMPRESSION_ERROR, str(error)) from None
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers: gRPC clients send none, so they only end it
            if stream.remote_closed or not end_stream:
                self._reset(stream_id, PROTOCOL_ERROR, events)
                return
            stream.remote_closed = True
            events.append(Event(EV_DATA, stream_id, True))
            return
        if stream_id <= self.last_stream_id:
            raise ProtocolError(PROTOCOL_ERROR, f"stream {stream_id} was opened before")
        self.last_stream_id = stream_id
        if self._max_streams and len(self._streams) >= self._max_streams:
            self.output.append(frame(RST_STREAM, 0, stream_id, REFUSED_STREAM.to_bytes(4, "big")))
            return
        stream = _Stream(self._peer_initial_window)
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream
        events.append(Event(EV_HEADERS, stream_id, end_stream, headers=headers))

    def _settings(self, flags: int, stream_id: int, payload: bytes,
                  events: list[Event]) -> None:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            return
        if len(payload) % 6:
            raise ProtocolError(FRAME_SIZE_ERROR, "malformed SETTINGS")
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
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value < 2**24:
                    raise ProtocolError(PROTOCOL_ERROR, f"max frame size {value}")
                self.peer_max_frame = value
            elif key == ENABLE_PUSH and value > 1:
                raise ProtocolError(PROTOCOL_ERROR, "ENABLE_PUSH above 1")
            # HEADER_TABLE_SIZE is moot: this side's encoder uses no dynamic table.
        self.output.append(frame(SETTINGS, ACK, 0))
        self._flush_all(events)

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
            self._flush_all(events)
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if not increment:
            self._reset(stream_id, PROTOCOL_ERROR, events)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._reset(stream_id, FLOW_CONTROL_ERROR, events)
            return
        if stream.pending or stream.trailers is not None:
            self._flush(stream_id, stream, events)

    def _reset(self, stream_id: int, code: int, events: list[Event]) -> None:
        self.reset(stream_id, code)
        events.append(Event(EV_RESET, stream_id, code=code))

    # -------------------------------------------------------------- what this side sends

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def hold_credit(self, stream_id: int) -> None:
        """From now on ``stream_id``'s window reopens only as ``release`` says its reader
        consumed what arrived, so a reader that falls behind holds its peer back."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.manual = True

    def release(self, stream_id: int, size: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            return
        stream.released += size
        if stream.released >= self._stream_window // 2:
            self.output.append(window_update(stream_id, stream.released))
            stream.unacked -= stream.released
            stream.released = 0

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

    def reset(self, stream_id: int, code: int) -> None:
        if self._streams.pop(stream_id, None) is not None:
            self.output.append(frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big")))

    def ping(self, payload: bytes) -> None:
        self.output.append(frame(PING, 0, 0, payload))

    def goaway(self, code: int = NO_ERROR, message: str = "") -> None:
        payload = (self.last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big")
                   + message.encode("utf-8", "replace"))
        self.output.append(frame(GOAWAY, 0, 0, payload))

    def _header_frames(self, stream_id: int, block: bytes, end_stream: bool) -> None:
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

    def _flush_all(self, events: list[Event] | None) -> None:
        for stream_id, stream in list(self._streams.items()):
            if self.send_window <= 0:
                return
            if stream.pending or stream.trailers is not None:
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
            self.output.append(frame_header(size, DATA, 0, stream_id))
            self.output.append(piece)
        if stream.pending:
            return
        if stream.trailers is not None:
            self._header_frames(stream_id, stream.trailers, True)
            self._close(stream_id)
        elif had and events is not None:
            events.append(Event(EV_DRAINED, stream_id))

    def _close(self, stream_id: int) -> None:
        """This side sent the stream's last frame: a peer still sending is told to stop."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None and not stream.remote_closed:
            self.output.append(frame(RST_STREAM, 0, stream_id, NO_ERROR.to_bytes(4, "big")))


def _unpad(payload: bytes) -> bytes:
    if not payload:
        raise ProtocolError(PROTOCOL_ERROR, "padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1:len(payload) - pad]
