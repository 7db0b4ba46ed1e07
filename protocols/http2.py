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

Headers are decoded with the peer's dynamic table; a header block whose bytes were seen
before while the table has not changed since is answered from a small cache (a client
repeating the same call sends the same few bytes of table references each time). Headers
are encoded without the dynamic table and without Huffman coding, which RFC 7541 allows a
sender always: a gRPC server's replies are a handful of short fields. Compiled with mypyc as
part of the request path.
"""

from __future__ import annotations

from typing import Final

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

Headers = tuple[tuple[str, str], ...]
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


# ------------------------------------------------------------------------------ HPACK

# RFC 7541 appendix A.
STATIC_TABLE: Final[tuple[tuple[str, str], ...]] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)

# RFC 7541 appendix B: each symbol's code, right-aligned, and its length in bits; 256 is EOS.
_HUFFMAN_CODES: Final[tuple[tuple[int, int], ...]] = (
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28),
    (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24),
    (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28),
    (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28),
    (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10),
    (0xffa, 12), (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8),
    (0x16, 6), (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5),
    (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6),
    (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13),
    (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7),
    (0x61, 7), (0x62, 7), (0x63, 7), (0x64, 7), (0x65, 7),
    (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7),
    (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14),
    (0x22, 6), (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6),
    (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6),
    (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7), (0x2c, 6),
    (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11),
    (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22),
    (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22),
    (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24),
    (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23),
    (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22),
    (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22),
    (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22),
    (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23),
    (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20),
    (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22),
    (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20),
    (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27),
    (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21),
    (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27),
    (0xfffff2, 24), (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20),
    (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21),
    (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25),
    (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27),
    (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28),
    (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27),
    (0x3ffffee, 26), (0x3fffffff, 30),
)


def _huffman_decoding() -> dict[int, int]:
    """Each code as ``length << 32 | code``, to its symbol."""
    table: dict[int, int] = {}
    for symbol, (code, length) in enumerate(_HUFFMAN_CODES):
        if symbol < 256:
            table[(length << 32) | code] = symbol
    return table


_HUFFMAN: Final = _huffman_decoding()
_SHORTEST_CODE: Final = 5
_LONGEST_CODE: Final = 30


def huffman_decode(data: bytes) -> bytes:
    """RFC 7541 section 5.2's Huffman-coded string ``data``, decoded; the padding must be
    fewer than eight bits of EOS's prefix (all ones)."""
    out = bytearray()
    bits = 0
    count = 0
    table = _HUFFMAN
    for byte in data:
        bits = (bits << 8) | byte
        count += 8
        while count >= _SHORTEST_CODE:
            found = False
            length = _SHORTEST_CODE
            while length <= count and length <= _LONGEST_CODE:
                symbol = table.get((length << 32) | (bits >> (count - length)), -1)
                if symbol >= 0:
                    out.append(symbol)
                    count -= length
                    bits &= (1 << count) - 1
                    found = True
                    break
                length += 1
            if not found:
                if count >= _LONGEST_CODE:
                    raise ProtocolError(COMPRESSION_ERROR, "invalid Huffman code")
                break
    if count >= 8 or bits != (1 << count) - 1:
        raise ProtocolError(COMPRESSION_ERROR, "invalid Huffman padding")
    return bytes(out)


def _read_int(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """The integer of ``prefix`` bits starting at ``block[pos]`` (RFC 7541 section 5.1), and
    the position after it."""
    limit = (1 << prefix) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(block) or shift > 28:
            raise ProtocolError(COMPRESSION_ERROR, "truncated or oversized integer")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _read_string(block: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(block):
        raise ProtocolError(COMPRESSION_ERROR, "truncated header block")
    huffman = bool(block[pos] & 0x80)
    length, pos = _read_int(block, pos, 7)
    end = pos + length
    if end > len(block):
        raise ProtocolError(COMPRESSION_ERROR, "truncated header block")
    raw = block[pos:end]
    if huffman:
        raw = huffman_decode(raw)
    return raw.decode("latin-1"), end


class HeaderDecoder:
    """One direction's HPACK state: the dynamic table the peer's encoder keeps in step."""

    def __init__(self, limit: int = 4096) -> None:
        self._entries: list[tuple[str, str]] = []  # oldest first
        self._size = 0
        self._limit = limit  # SETTINGS_HEADER_TABLE_SIZE as this side announced it
        self._max = limit  # the size the peer last set, at most the limit
        self._cache: dict[bytes, Headers] = {}
        self._changed = False  # the last block changed the table

    def decode(self, block: bytes) -> Headers:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        headers = self._decode(block)
        if self._changed:  # what was cached referred to the table as it was
            self._cache.clear()
        elif len(block) <= 1024:
            if len(self._cache) >= 64:
                self._cache.clear()
            self._cache[block] = headers
        return headers

    def _decode(self, block: bytes) -> Headers:
        self._changed = False
        out: list[tuple[str, str]] = []
        pos = 0
        end = len(block)
        while pos < end:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _read_int(block, pos, 7)
                out.append(self._field(index))
            elif byte & 0x40:  # literal, added to the table
                index, pos = _read_int(block, pos, 6)
                if index:
                    name = self._field(index)[0]
                else:
                    name, pos = _read_string(block, pos)
                value, pos = _read_string(block, pos)
                out.append((name, value))
                self._add(name, value)
            elif byte & 0x20:  # dynamic table size update
                size, pos = _read_int(block, pos, 5)
                if size > self._limit:
                    raise ProtocolError(COMPRESSION_ERROR, "table size update above the limit")
                self._max = size
                self._evict(0)
                self._changed = True
            else:  # literal without indexing, or never indexed
                index, pos = _read_int(block, pos, 4)
                if index:
                    name = self._field(index)[0]
                else:
                    name, pos = _read_string(block, pos)
                value, pos = _read_string(block, pos)
                out.append((name, value))
        return tuple(out)

    def _field(self, index: int) -> tuple[str, str]:
        if index <= 0:
            raise ProtocolError(COMPRESSION_ERROR, "header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        position = len(self._entries) - (index - len(STATIC_TABLE))
        if position < 0:
            raise ProtocolError(COMPRESSION_ERROR, f"header index {index} is not in the table")
        return self._entries[position]

    def _add(self, name: str, value: str) -> None:
        size = len(name) + len(value) + 32
        self._changed = True
        if size > self._max:
            self._entries.clear()
            self._size = 0
            return
        self._evict(size)
        self._entries.append((name, value))
        self._size += size

    def _evict(self, room: int) -> None:
        while self._entries and self._size + room > self._max:
            name, value = self._entries.pop(0)
            self._size -= len(name) + len(value) + 32


def _encode_int(value: int, prefix: int, flags: int) -> bytes:
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STATIC_FIELDS: Final = {field: i + 1 for i, field in enumerate(STATIC_TABLE) if field[1]}
_STATIC_NAMES: Final = {name: i + 1 for i, (name, _) in reversed(list(enumerate(STATIC_TABLE)))}


def encode_headers(fields: list[tuple[str, str]]) -> bytes:
    """A header block of ``fields``: a static table entry where one matches whole, else a
    literal that the peer does not add to its table, names and values as they are (octets:
    Latin-1)."""
    out = bytearray()
    for name, value in fields:
        index = _STATIC_FIELDS.get((name, value), 0)
        if index:
            out += _encode_int(index, 7, 0x80)
            continue
        index = _STATIC_NAMES.get(name, 0)
        out += _encode_int(index, 4, 0x00)
        if not index:
            raw_name = name.encode("latin-1")
            out += _encode_int(len(raw_name), 7, 0x00)
            out += raw_name
        raw = value.encode("latin-1")
        out += _encode_int(len(raw), 7, 0x00)
        out += raw
    return bytes(out)


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
        headers = self._decoder.decode(block)  # always, to keep the table in step
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
